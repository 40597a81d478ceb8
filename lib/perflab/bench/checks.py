"""Contradictions in saved results: what ``perflab check-results DIR`` flags.

Every CSV under DIR is read, and each rule below that applies to its columns is checked:

- **negative time**: a time column (``*_s``, ``*_ms``) below zero (except differences of
  separately timed medians, ``*_by_subtraction_s``, which notebook 01 shows because noise can
  make them negative);
- **share out of bounds**: a share (``*_share``) or a utilisation (``mfu``) outside [0, 1];
- **ratio not positive**: a ratio (a column with ``_over_``, ``ratio`` or ``speedup`` in its
  name) at or below zero;
- **larger preset faster**: in a timing table, a preset with more parameters whose median's
  95% interval lies entirely below that of a smaller preset timed in the same configuration
  (mode, dtype, context, batch, device);
- **above the roofline**: a measured throughput whose 95% interval lies entirely above the
  bound computed for it (``tokens_per_s_low`` over ``roofline_tokens_per_s``, notebook 10);
- **conclusion from an unstable measurement**: a row of ``conclusions.csv`` that concludes
  ("faster", "slower" or another verdict) although it is marked unstable.

Rows whose ``status`` is not "ok" (out of memory, errors) are not checked.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from perflab.model import PRESET_ALIASES, PRESETS, get_preset

_SAME_CONFIGURATION = ("mode", "dtype", "context_length", "batch_size", "device")


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
    frame = frame[frame["preset"].isin([*PRESETS, *PRESET_ALIASES])].copy()
    frame["parameters"] = frame["preset"].map(lambda p: get_preset(p).num_parameters())
    group = [c for c in _SAME_CONFIGURATION if c in frame.columns]
    findings = []
    for key, rows in frame.groupby(group, dropna=False) if group else [((), frame)]:
        rows = rows.sort_values("parameters")
        for small in rows.itertuples():
            for large in rows.itertuples():
                if large.parameters <= small.parameters:
                    continue
                if large.median_ci_high_s < small.median_ci_low_s:
                    findings.append(_finding(path, "larger preset faster", (
                        f"{large.preset} ({large.median_ci_low_s:.4g}–{large.median_ci_high_s:.4g}"
                        f" s) below {small.preset} ({small.median_ci_low_s:.4g}–"
                        f"{small.median_ci_high_s:.4g} s) at {dict(zip(group, key, strict=True))}"
                    )))  # fmt: skip
    return findings


def _roofline(path: Path, frame: pd.DataFrame) -> list[dict]:
    if not {"tokens_per_s_low", "roofline_tokens_per_s"} <= set(frame.columns):
        return []
    above = _numeric(frame, "tokens_per_s_low") > _numeric(frame, "roofline_tokens_per_s")
    return [
        _finding(path, "above the roofline", f"row {index}: measured at least "
                 f"{row.tokens_per_s_low:.4g} tokens/s, bound {row.roofline_tokens_per_s:.4g}")
        for index, row in zip(frame.index[above], frame[above].itertuples(), strict=True)
    ]  # fmt: skip


def _conclusions(path: Path, frame: pd.DataFrame) -> list[dict]:
    if path.name != "conclusions.csv" or not {"unstable", "verdict"} <= set(frame.columns):
        return []
    unstable = frame["unstable"].astype(str).str.lower() == "true"
    concluding = ~frame["verdict"].fillna("").isin(["", "none", "same"])
    return [
        _finding(path, "conclusion from an unstable measurement", f"{row.key}: {row.sentence}")
        for row in frame[unstable & concluding].itertuples()
    ]


def check_results(directory: str | Path) -> pd.DataFrame:
    """One row (file, rule, detail) per contradiction found in the CSVs under ``directory``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"no results folder {str(directory)!r}")
    findings = []
    for path in sorted(directory.rglob("*.csv")):
        frame = pd.read_csv(path)
        if "status" in frame:
            frame = frame[frame["status"].fillna("ok") == "ok"]
        name = path.relative_to(directory)
        findings += (_bounds(name, frame) + _preset_order(name, frame) + _roofline(name, frame)
                     + _conclusions(name, frame))  # fmt: skip
    return pd.DataFrame(findings, columns=["file", "rule", "detail"])


def checked_files(directory: str | Path) -> int:
    """How many CSV files ``check_results`` reads under ``directory``."""
    return sum(1 for _ in Path(directory).rglob("*.csv"))
