"""Contradictions in saved results: what ``perflab check-results DIR`` flags.

Every CSV under DIR is read, and each rule below that applies to its columns is checked:

- **negative time**: a time column (``*_s``, ``*_ms``) below zero (except differences of
  separately timed medians, ``*_by_subtraction_s``, which notebook 01 shows because noise can
  make them negative);
- **share out of bounds**: a share (``*_share``) or a utilisation (``mfu``) outside [0, 1];
- **ratio not positive**: a ratio (a column with ``_over_``, ``ratio`` or ``speedup`` in its
  name) at or below zero;
- **larger preset faster**: in a timing table, a model with more parameters (its row's
  ``num_parameters``, which follows shape overrides; else its preset's count) whose median's
  interval lies entirely below that of a smaller model timed in the same configuration and
  recipe (mode, dtype, context, batch, device, and the recipe's attention, head, optimizer,
  compile, QKV and checkpointing);
- **above the roofline**: a measured throughput whose 95% interval lies entirely above the
  bound computed for it (``tokens_per_s_low`` over ``roofline_tokens_per_s``, notebook 10);
  for a step whose bytes fit in the device's last-level cache (``step_bytes`` at most
  ``last_level_cache_bytes``), over its compute bound alone, since the memory bound's
  bandwidth is a copy through memory that such a step need not make;
- **conclusion from an unstable measurement**: a row of ``conclusions.csv`` that concludes
  ("faster", "slower" or another verdict) although it is marked unstable;
- **sweep row contradicts a verdict**: a comparison measured interleaved (columns ``a``, ``b``,
  ``verdict``) says b is faster (slower) than a, while another table of the same folder shows
  the same configuration (equal values in the columns both tables have) with b's time on the
  other side of a's: beyond both intervals where the rows have them (``median_ci_*``), beyond
  the noise band where they do not; rows flagged unstable (``unstable``, or ``<time>_unstable``
  beside the time) claim nothing and are left to the flag;
- **unstable flag missing**: a table of medians (``median_s``, ``median_ms``, or a time with
  ``*_unstable`` beside it elsewhere) without an ``unstable`` column, so an unstable row would
  be shown like any other;
- **confidence overstated**: an interval labelled with more confidence than its method gives: a
  stored sentence whose "N% CI" exceeds its row's ``confidence``, a table whose ``verdict`` is
  conclusive although its ``confidence`` is below 95%, or a column named ``ci95*`` beside a
  level below 95% (a stated level with no confidence recorded is flagged in CPU folders; GPU
  folders' sentences predate the record and stay as measured);
- **"same" outside the band**: a verdict "same", or a sentence saying "no difference" or "the
  same time", for an interval not inside 1 ± ``noise_band``;
- **above the yardstick**: an achieved rate above the peak measured for it in the same row
  (``achieved_flops_per_s`` over ``peak_flops_per_s``, ``achieved_bytes_per_s`` over
  ``copy_bytes_per_s``);
- **measured by other code**: in a CPU results folder, a table whose rows (``library_tree``)
  or metadata do not record the library now in ``lib/perflab``; GPU folders are historical
  records and keep their provenance.

- **unreadable**: a CSV that cannot be read as a table (empty, malformed), a metadata sidecar
  (``<name>.json``) that is not a JSON object, or a ``conclusions.csv`` without its columns.

Rows whose ``status`` is not "ok" (out of memory, errors) are not checked. A folder with no
CSV at all is refused: there is nothing to check.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from perflab.implementations.model import PRESET_ALIASES, PRESETS, get_preset
from perflab.measure.comparison import NOISE_BAND, band_edges
from perflab.measure.paths import display_path, library_tree
from perflab.measure.stats import CONFIDENCE, outward

_SAME_CONFIGURATION = (
    "mode",
    "dtype",
    "context_length",
    "batch_size",
    "device",
    "attention",
    "head",
    "optimizer",
    "compile",
    "qkv",
    "checkpoint_group",
    "steps",
)


def _finding(path: Path, rule: str, detail: str) -> dict:
    return {"file": str(path), "rule": rule, "detail": detail}


def _numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(frame[column], errors="coerce")


def _bounds(path: Path, frame: pd.DataFrame) -> list[dict]:
    findings = []
    for column in frame.columns:
        values = _numeric(frame, column)
        if values.isna().all():
            continue
        timed = column.endswith(("_s", "_ms")) and "by_subtraction" not in column
        if timed and (values < 0).any():
            rule, bad = "negative time", values < 0
        elif (column.endswith("_share") or column == "mfu") and ((values < 0) | (values > 1)).any():
            rule, bad = "share out of bounds", (values < 0) | (values > 1)
        elif any(t in column for t in ("_over_", "ratio", "speedup")) and (values <= 0).any():
            rule, bad = "ratio not positive", values <= 0
        else:
            continue
        shown = ", ".join(f"{v:.4g}" for v in values[bad].head(3))
        findings.append(_finding(path, rule, f"{column}: {int(bad.sum())} rows ({shown})"))
    return findings


def _preset_order(path: Path, frame: pd.DataFrame) -> list[dict]:
    needed = {"preset", "median_ci_low_s", "median_ci_high_s"}
    if not needed <= set(frame.columns):
        return []
    frame = frame.copy()
    known = frame["preset"].isin([*PRESETS, *PRESET_ALIASES])
    from_preset = (
        frame["preset"]
        .where(known)
        .map(lambda p: get_preset(p).num_parameters() if isinstance(p, str) else float("nan"))
    )
    counted = (
        pd.to_numeric(frame["num_parameters"], errors="coerce")
        if "num_parameters" in frame
        else pd.Series(float("nan"), index=frame.index)
    )
    frame["parameters"] = counted.fillna(from_preset)
    frame = frame[frame["parameters"].notna()]
    group = [c for c in _SAME_CONFIGURATION if c in frame.columns]
    findings = []
    for key, rows in frame.groupby(group, dropna=False) if group else [((), frame)]:
        rows = rows.sort_values("parameters")
        for small in rows.itertuples():
            for large in rows.itertuples():
                if large.parameters <= small.parameters:
                    continue
                if large.median_ci_high_s < small.median_ci_low_s:
                    findings.append(
                        _finding(
                            path,
                            "larger preset faster",
                            (
                                f"{large.preset} ({large.parameters:,.0f} parameters, "
                                f"{large.median_ci_low_s:.4g}–{large.median_ci_high_s:.4g} s) "
                                f"below {small.preset} ({small.parameters:,.0f}, "
                                f"{small.median_ci_low_s:.4g}–{small.median_ci_high_s:.4g} s) "
                                f"at {dict(zip(group, key, strict=True))}"
                            ),
                        )
                    )
    return findings


def _roofline(path: Path, frame: pd.DataFrame) -> list[dict]:
    if not {"tokens_per_s_low", "roofline_tokens_per_s"} <= set(frame.columns):
        return []
    bound = _numeric(frame, "roofline_tokens_per_s")
    fits = pd.Series(False, index=frame.index)
    if {"step_bytes", "last_level_cache_bytes", "compute_bound_tokens_per_s"} <= set(frame):
        fits = _numeric(frame, "step_bytes") <= _numeric(frame, "last_level_cache_bytes")
        bound = bound.where(~fits, _numeric(frame, "compute_bound_tokens_per_s"))
    above = _numeric(frame, "tokens_per_s_low") > bound
    return [
        _finding(
            path,
            "above the roofline",
            f"row {index}: measured at least {low:.4g} tokens/s, bound {limit:.4g}"
            + (" (compute: the step fits in the last-level cache)" if cached else ""),
        )
        for index, low, limit, cached in zip(
            frame.index[above],
            _numeric(frame, "tokens_per_s_low")[above],
            bound[above],
            fits[above],
            strict=True,
        )
    ]


def _conclusions(path: Path, frame: pd.DataFrame) -> list[dict]:
    if path.name != "conclusions.csv" or not {"unstable", "verdict"} <= set(frame.columns):
        return []
    unstable = frame["unstable"].astype(str).str.lower() == "true"
    concluding = ~frame["verdict"].astype(object).fillna("").isin(
        ["", "none", "same", "inconclusive"]
    )
    return [
        _finding(path, "conclusion from an unstable measurement", f"{row.key}: {row.sentence}")
        for row in frame[unstable & concluding].itertuples()
    ]


def _band_of(row) -> float:
    band = pd.to_numeric(getattr(row, "noise_band", None), errors="coerce")
    return NOISE_BAND if pd.isna(band) else float(band)


def _same_outside_band(path: Path, frame: pd.DataFrame) -> list[dict]:
    if not {"ci_low", "ci_high"} <= set(frame.columns):
        return []
    findings = []
    for index, row in frame.iterrows():
        low, high = (
            pd.to_numeric(row["ci_low"], errors="coerce"),
            pd.to_numeric(row["ci_high"], errors="coerce"),
        )
        if pd.isna(low) or pd.isna(high):
            continue
        band = _band_of(row)
        inside = 1 - band <= low and high <= 1 + band
        said_same = str(row.get("verdict", "")) == "same" or re.search(
            r"no difference|the same time", str(row.get("sentence", ""))
        )
        if said_same and not inside:
            findings.append(
                _finding(
                    path,
                    '"same" outside the band',
                    (
                        f"row {index} ({row.get('key', row.get('b', ''))}): interval "
                        f"{outward(low, high, 3, band_edges(band))} is not inside 1 ± {band:.0%}"
                    ),
                )
            )
    return findings


def _overstated(path: Path, frame: pd.DataFrame, historical: bool = False) -> list[dict]:
    """A sentence that states a higher level than its interval's recorded ``confidence``, one
    that states a level where no interval was recorded (a conclusion from a plain sentence;
    historical GPU rows predate the record), and a verdict from an interval below 95%."""
    findings = []
    if "sentence" not in frame.columns and "verdict" not in frame.columns:
        return findings
    if "confidence" in frame.columns:
        level = pd.to_numeric(frame["confidence"], errors="coerce")
    else:
        level = pd.Series(float("nan"), index=frame.index)
    for index, row in frame.iterrows():
        stated = re.findall(r"(\d+(?:\.\d+)?)% (?:CI|interval)", str(row.get("sentence", "")))
        if pd.isna(level[index]):
            if stated and not historical:
                detail = f"row {index}: '{stated[0]}% CI' stated, no interval's confidence recorded"
                findings.append(_finding(path, "confidence overstated", detail))
            continue
        for claim in stated:
            if float(claim) / 100 > level[index] + 1e-9:
                detail = f"row {index}: '{claim}% CI' for an interval of {level[index]:.2%}"
                findings.append(_finding(path, "confidence overstated", detail))
        verdict = str(row.get("verdict", ""))
        if verdict in ("faster", "slower", "same") and level[index] < CONFIDENCE - 1e-9:
            detail = f"row {index}: verdict {verdict!r} from a {level[index]:.2%} interval"
            findings.append(_finding(path, "confidence overstated", detail))
    return findings


def _unstable_missing(path: Path, frame: pd.DataFrame) -> list[dict]:
    if path.name == "conclusions.csv" or "unstable" in frame.columns:
        return []
    medians = [c for c in ("median_s", "median_ms") if c in frame.columns]
    paired = {"a", "b", "verdict"} <= set(frame.columns)  # interleaved: the verdict is the flag
    if not medians or paired:
        return []
    return [_finding(path, "unstable flag missing", f"{medians[0]} without an unstable column")]


def _above_yardstick(path: Path, frame: pd.DataFrame) -> list[dict]:
    findings = []
    for achieved, peak in (
        ("achieved_flops_per_s", "peak_flops_per_s"),
        ("achieved_bytes_per_s", "copy_bytes_per_s"),
    ):
        if not {achieved, peak} <= set(frame.columns):
            continue
        above = _numeric(frame, achieved) > _numeric(frame, peak)
        for index in frame.index[above]:
            findings.append(
                _finding(
                    path,
                    "above the yardstick",
                    (
                        f"row {index}: {achieved} {frame.at[index, achieved]:.4g} above {peak} "
                        f"{frame.at[index, peak]:.4g}"
                    ),
                )
            )
    return findings


def _time_column(sweep: pd.DataFrame) -> str | None:
    """A sweep's timed column, in seconds or milliseconds: one whose interval is saved beside it
    (``median_s`` with ``median_ci_low_s`` and ``median_ci_high_s``, ``step_ms`` with
    ``step_ci_low_ms`` ...), else a median, step or end-to-end time."""
    columns = set(sweep.columns)
    for column in sweep.columns:
        for unit in ("_s", "_ms"):
            stem = column.removesuffix(unit)
            if (
                column.endswith(unit)
                and {f"{stem}_ci_low{unit}", f"{stem}_ci_high{unit}"} <= columns
            ):
                return column
    for stem in ("median", "step", "end_to_end"):
        for unit in ("_s", "_ms"):
            if stem + unit in columns:
                return stem + unit
    return None


def _sweep_against_verdicts(directory: Path, tables: dict[Path, pd.DataFrame]) -> list[dict]:
    findings = []
    for path, comparisons in tables.items():
        if not {"a", "b", "verdict"} <= set(comparisons.columns):
            continue
        for other_path, sweep in tables.items():
            if other_path == path or other_path.parent != path.parent:
                continue
            time_column = _time_column(sweep)
            shared = [
                c
                for c in comparisons.columns
                if c in sweep.columns
                and c
                not in (
                    "a",
                    "b",
                    "verdict",
                    "status",
                    "error",
                    "measured_at",
                    "commit",
                    "library_tree",
                    "median_a_s",
                    "median_b_s",
                )
            ]
            if time_column is None or not shared:
                continue
            for row in comparisons.itertuples(index=False):
                if row.verdict not in ("faster", "slower"):
                    continue
                match = sweep
                for column in shared:
                    match = match[match[column].astype(str) == str(getattr(row, column))]
                named = {}
                for column in sweep.columns:
                    values = match[column].astype(str)
                    if (values == row.a).any() and (values == row.b).any():
                        named = {
                            "a": match[values == row.a].iloc[-1],
                            "b": match[values == row.b].iloc[-1],
                        }
                        break
                if not named:
                    continue
                unit = "_ms" if time_column.endswith("_ms") else "_s"
                stem = time_column.removesuffix(unit)
                flag = "unstable" if stem == "median" else stem + "_unstable"
                shaky = [str(named[side].get(flag, "")).lower() == "true" for side in "ab"]
                if any(shaky):
                    continue  # an unstable row claims nothing; its flag is shown with it
                ta, tb = float(named["a"][time_column]), float(named["b"][time_column])
                band = _band_of(row)
                # The time's own interval where the sweep saved one (median_s ->
                # median_ci_low_s, end_to_end_s -> end_to_end_ci_low_s): a row claims no more.
                low, high = (f"{stem}_ci_{end}{unit}" for end in ("low", "high"))
                if {low, high} <= set(sweep.columns):
                    b_faster = named["b"][high] < named["a"][low]
                    b_slower = named["b"][low] > named["a"][high]
                else:
                    b_faster, b_slower = tb < (1 - band) * ta, tb > (1 + band) * ta
                if (row.verdict == "slower" and b_faster) or (row.verdict == "faster" and b_slower):
                    where = ", ".join(f"{c}={getattr(row, c)}" for c in shared)
                    findings.append(
                        _finding(
                            other_path,
                            "sweep row contradicts a verdict",
                            (
                                f"{row.b} vs {row.a} at {where}: {path.name} says "
                                f"{row.verdict!r}, the shown {time_column} is {tb / ta:.2f}x"
                            ),
                        )
                    )
    return findings


def _is_gpu_folder(folder: Path) -> bool:
    """A results folder of a GPU run: its metadata names a CUDA (or ROCm) device."""
    for sidecar in folder.glob("*.json"):
        try:
            machine = json.loads(sidecar.read_text()).get("machine", {})
        except (ValueError, AttributeError):
            continue
        if isinstance(machine, dict) and str(machine.get("device", "")).startswith("cuda"):
            return True
    return folder.name.startswith(("nvidia", "amd-instinct"))


def _other_library(path: Path, frame: pd.DataFrame, full: Path, tree: str | None) -> list[dict]:
    if tree is None or _is_gpu_folder(full.parent):
        return []
    if "library_tree" in frame.columns and "measured_at" in frame.columns:
        trees = frame["library_tree"].astype(object).fillna("").astype(str)
        other = trees != tree
        if other.any():
            seen = ", ".join(sorted({t[:10] or "none" for t in trees[other]}))
            return [
                _finding(
                    path,
                    "measured by other code",
                    (
                        f"{int(other.sum())} of {len(frame)} rows by library_tree {seen}, not the "
                        f"shipped {tree[:10]}"
                    ),
                )
            ]
        return []
    if path.name == "conclusions.csv":
        recorded = (
            frame.get("library_tree", pd.Series("", index=frame.index)).astype(object).fillna("")
        )
        stale = recorded.astype(str) != tree
        return (
            [
                _finding(
                    path,
                    "measured by other code",
                    f"{int(stale.sum())} conclusions from another library",
                )
            ]
            if stale.any()
            else []
        )
    sidecar = full.with_suffix(".json")
    if "measured_at" in frame.columns:
        return [_finding(path, "measured by other code", "rows record no library_tree")]
    if sidecar.exists():
        try:
            recorded = json.loads(sidecar.read_text()).get("library_tree")
        except (ValueError, AttributeError):
            recorded = None
        if recorded != tree:
            return [
                _finding(
                    path,
                    "measured by other code",
                    (
                        f"{sidecar.name} records library_tree {str(recorded)[:10]}, "
                        f"not the shipped {tree[:10]}"
                    ),
                )
            ]
    return []


def _unreadable_sidecar(name: Path, path: Path) -> list[dict]:
    sidecar = path.with_suffix(".json")
    if not sidecar.exists():
        return []
    try:
        record = json.loads(sidecar.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        return [_finding(name.with_suffix(".json"), "unreadable", f"not valid JSON: {error}")]
    if not isinstance(record, dict):
        return [
            _finding(
                name.with_suffix(".json"),
                "unreadable",
                f"metadata must be a JSON object, got a {type(record).__name__}",
            )
        ]
    return []


def _malformed_conclusions(name: Path, frame: pd.DataFrame) -> list[dict]:
    missing = [c for c in ("key", "sentence", "verdict") if c not in frame.columns]
    if name.name != "conclusions.csv" or not missing:
        return []
    return [_finding(name, "unreadable", f"conclusions without the columns {', '.join(missing)}")]


def check_results(directory: str | Path, library: str | None = "current") -> pd.DataFrame:
    """One row (file, rule, detail) per contradiction found in the CSVs under ``directory``.
    CPU rows are held to ``library`` (default: the tree of ``lib/perflab`` on disk; None skips
    that rule)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"no results folder {str(directory)!r}")
    tree = library_tree() if library == "current" else library
    findings, tables = [], {}
    paths = sorted(directory.rglob("*.csv"))
    if not paths:
        raise ValueError(f"no result files (*.csv) under {str(directory)!r}: nothing to check")
    for path in paths:
        name = path.relative_to(directory)
        try:
            frame = pd.read_csv(path)
        except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:
            first = (str(error).splitlines() or [""])[0]
            findings.append(_finding(name, "unreadable", f"not a readable table: {first}"))
            continue
        findings += _unreadable_sidecar(name, path) + _malformed_conclusions(name, frame)
        if "status" in frame:
            frame = frame[frame["status"].astype(object).fillna("ok") == "ok"]
        tables[name] = frame
        findings += (
            _bounds(name, frame)
            + _preset_order(name, frame)
            + _roofline(name, frame)
            + _conclusions(name, frame)
            + _same_outside_band(name, frame)
            + _overstated(name, frame, _is_gpu_folder(path.parent))
            + _unstable_missing(name, frame)
            + _above_yardstick(name, frame)
            + _other_library(name, frame, path, tree)
        )
    findings += _sweep_against_verdicts(directory, tables)
    return pd.DataFrame(findings, columns=["file", "rule", "detail"])


def checked_files(directory: str | Path) -> int:
    """How many CSV files ``check_results`` reads under ``directory``."""
    return sum(1 for _ in Path(directory).rglob("*.csv"))


def contradictions_line(findings: pd.DataFrame, directory: str | Path) -> str:
    """How many contradictions ``check_results`` found in ``directory``."""
    return f"{len(findings)} contradictions in {display_path(directory)}"
