"""A notebook's concluding sentences, computed from verdicts and kept with the results.

``conclude`` turns a ``Comparison`` (or a sentence computed from rows with their ``unstable``
flags) into the sentence the notebook prints, and appends it to ``conclusions.csv`` in the
notebook's results folder with its verdict and whether any measurement behind it was
unstable. A conclusion is never drawn from an unstable measurement: the sentence then says so
instead, and ``perflab check-results`` flags any stored conclusion that breaks this rule.
"""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

from perflab.bench.comparison import Comparison
from perflab.paths import git_commit

FIELDS = ("key", "sentence", "verdict", "unstable", "concluded_at", "commit")
UNSTABLE_SENTENCE = "no conclusion: the measurement behind it is unstable (IQR > 25% of median)"


def conclude(out: str | Path, key: str, evidence: Comparison | str, *,
             unstable: bool = False, verdict: str = "") -> str:  # fmt: skip
    """The sentence for ``evidence`` (a Comparison's own sentence, or one computed by the
    caller), replaced by ``UNSTABLE_SENTENCE`` when ``unstable``; stored under ``key`` (a
    re-run replaces the row of the same key)."""
    if isinstance(evidence, Comparison):
        sentence, verdict = evidence.sentence(), evidence.verdict
    else:
        sentence = evidence
    if unstable:
        sentence, verdict = f"{key}: {UNSTABLE_SENTENCE}", "none"
    path = Path(out) / "conclusions.csv"
    rows = []
    if path.exists():
        with path.open(newline="") as f:
            rows = [row for row in csv.DictReader(f) if row["key"] != key]
    rows.append({
        "key": key, "sentence": sentence, "verdict": verdict, "unstable": unstable,
        "concluded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git_commit() or "",
    })  # fmt: skip
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    return sentence
