"""A notebook's concluding sentences, computed from verdicts and kept with the results.

``conclude`` turns a ``Comparison`` (or a sentence computed from rows with their ``unstable``
flags) into the sentence the notebook prints, and appends it to ``conclusions.csv`` in the
notebook's results folder with its verdict and whether any measurement behind it was
unstable. A conclusion is never drawn from an unstable measurement: the sentence then says so
instead, and ``perflab check-results`` flags any stored conclusion that breaks this rule.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from perflab.measure.comparison import Comparison
from perflab.measure.paths import git_commit, library_tree

FIELDS = (
    "key",
    "sentence",
    "verdict",
    "unstable",
    "ratio",
    "ci_low",
    "ci_high",
    "confidence",
    "noise_band",
    "concluded_at",
    "commit",
    "library_tree",
)
UNSTABLE_SENTENCE = "no conclusion: the measurement behind it is unstable (IQR > 25% of median)"


def conclude(
    out: str | Path,
    key: str,
    evidence: Comparison | str,
    *,
    unstable: bool = False,
    verdict: str = "",
    comparison: Comparison | None = None,
    interval: tuple[float, float, float] | None = None,
) -> str:
    """The sentence for ``evidence`` (a Comparison's own sentence, or one computed by the
    caller, then with the ``comparison`` it rests on where there is one), replaced by
    ``UNSTABLE_SENTENCE`` when ``unstable``; stored under ``key`` with the comparison's ratio,
    interval, confidence and band, so that ``perflab check-results`` can hold the sentence to
    them (a re-run replaces the row of the same key). ``interval`` (low, high, level): the
    interval a sentence from rows states, where there is no comparison."""
    if isinstance(evidence, Comparison):
        sentence, verdict, comparison = evidence.sentence(), evidence.verdict, evidence
    else:
        sentence = evidence
        if comparison is not None and not verdict:
            verdict = comparison.verdict
    if unstable:
        sentence, verdict = f"{key}: {UNSTABLE_SENTENCE}", "none"
    path = Path(out) / "conclusions.csv"
    rows = []
    if path.exists():
        with path.open(newline="") as f:
            rows = [row for row in csv.DictReader(f) if row["key"] != key]
    numbers = (
        {}
        if comparison is None
        else {
            "ratio": comparison.ratio,
            "ci_low": comparison.ci[0],
            "ci_high": comparison.ci[1],
            "confidence": comparison.confidence,
            "noise_band": comparison.noise_band,
        }
    )
    if interval is not None and comparison is None:
        numbers = dict(zip(("ci_low", "ci_high", "confidence"), interval, strict=True))
    rows.append(
        {
            "key": key,
            "sentence": sentence,
            "verdict": verdict,
            "unstable": unstable,
            **numbers,
            "concluded_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": git_commit() or "",
            "library_tree": library_tree() or "",
        }
    )
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, restval="")
        writer.writeheader()
        writer.writerows(rows)
    return sentence


@dataclass(frozen=True)
class Finding:
    """A conclusion a library function computed from its measurements: the key it is stored
    under, its sentence, and the comparison it rests on (None for a sentence from counts or a
    model), whose verdict and interval ``conclude`` records beside it."""

    key: str
    sentence: str
    comparison: Comparison | None = None
    unstable: bool = False
    verdict_text: str = ""  # a verdict in words where there is no comparison
    interval: tuple[float, float, float] | None = None  # (low, high, level) the sentence states

    @property
    def verdict(self) -> str:
        return self.comparison.verdict if self.comparison is not None else self.verdict_text


def conclude_all(out: str | Path, findings: list[Finding]) -> list[str]:
    """Each finding stored in ``out``'s conclusions.csv (``conclude``); their sentences."""
    return [
        conclude(
            out,
            f.key,
            f.sentence,
            unstable=f.unstable,
            verdict=f.verdict,
            comparison=f.comparison,
            interval=f.interval,
        )
        for f in findings
    ]
