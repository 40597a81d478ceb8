"""Which bound dominates each rung of the ladder, from a profiler trace of each rung's step.

``greedy_ladder`` records a ``torch.profiler`` trace of a few training steps of every rung it
tries; ``greedy_bound_table`` compares each rung's trace with the trace of the stack it was
tried on (``compare_traces``, the hotspot tools of notebook 02): the category that holds most
of the operator (on a GPU: kernel) time, the hotspot whose time moved most, and what that
change alone would do to the step, by Amdahl's law: a part holding a share s of the time, made
r times as long, makes the whole 1 - s + s r times as long. Set against the whole operator time
and the measured step, it says why the step changed less (the hotspot held little of it) or
more (other operators, or time outside them, moved too) than its hotspot.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from perflab.measure.comparison import band_edges
from perflab.measure.hotspots import compare_traces, kernel_hotspots, short_name
from perflab.measure.stats import level_text, outward_places, rounded, with_estimate
from perflab.measure.trace import load_trace


def greedy_bound_table(greedy: pd.DataFrame, steps: int) -> pd.DataFrame:
    """``bound_rows`` for ``greedy_ladder``'s rungs that were timed, each against the stack it
    was tried on, with the measured step's ratio to that stack as ``vs_previous`` (its
    interval, confidence and verdict beside it)."""
    timed = greedy[greedy["trace"].fillna("").astype(str) != ""]
    if timed.empty:
        return pd.DataFrame(columns=["rung", "dominant", "dominant_share", "vs_previous"])
    pairs = []
    for row in timed.itertuples():
        base = row.trace_base if isinstance(row.trace_base, str) and row.trace_base else None
        pairs.append((row.rung, Path(row.trace), Path(base) if base else None))
    table = bound_rows(pairs, steps)
    columns = {
        "vs_best": "vs_previous",
        "ci_low": "ci_low",
        "ci_high": "ci_high",
        "confidence": "confidence",
        "verdict": "verdict",
    }
    for source, column in columns.items():
        table[column] = list(timed[source])
    return table


def bound_rows(pairs: list[tuple[str, Path, Path | None]], steps: int) -> pd.DataFrame:
    """One row per (rung, its trace, the trace it is compared with or None): its operator time
    per step, the dominant category and its share, and, against the other trace, the hotspot
    that moved most (its milliseconds per step before and after, its share of the time before),
    ``hotspot_alone`` (the step's ratio if only the hotspot had changed), ``operators_ratio``
    (all operators), ``device_busy`` (a GPU trace: the share of the traced span in which a
    kernel runs; low means the step waits on the host, whatever the kernels' category).
    ``steps`` is the number of profiled steps in each trace. Categories come from operator or
    kernel names (``perflab.measure.hotspots.classify``), not from a roofline; operator times
    are summed self times, not the step's wall time."""
    rows, loaded = [], {}

    def load(path: Path):
        if path not in loaded:
            loaded[path] = load_trace(path)
        return loaded[path]

    for name, path, base in pairs:
        hotspots = kernel_hotspots(load(path))
        shares = hotspots.groupby("category")["total_us"].sum() / hotspots["total_us"].sum()
        row = {
            "rung": name,
            "source": hotspots["source"].iloc[0],
            "operators_ms": hotspots["total_us"].sum() / steps / 1e3,
            "dominant": shares.idxmax(),
            "dominant_share": float(shares.max()),
        }
        if base is not None:
            comparison = compare_traces(load(base), load(path))
            top = comparison.kernels.iloc[0]
            share = top["baseline_us"] / comparison.baseline_total_us
            change = top["optimized_us"] / top["baseline_us"] if top["baseline_us"] else math.inf
            row.update(
                hotspot=short_name(top["name"], 40),
                hotspot_before_ms=top["baseline_us"] / steps / 1e3,
                hotspot_after_ms=top["optimized_us"] / steps / 1e3,
                hotspot_share_before=share,
                hotspot_change=change,
                hotspot_alone=1 + top["delta_us"] / comparison.baseline_total_us,
                operators_ratio=comparison.optimized_total_us / comparison.baseline_total_us,
                device_busy=comparison.optimized_busy,
            )
        rows.append(row)
    return pd.DataFrame(rows)


def _edges(row) -> tuple[float, ...]:
    """What the step's printed interval must not reach unless it does: the noise band's edges
    and the hotspot's prediction (where there is one)."""
    alone = row.get("hotspot_alone")
    return (*band_edges(), *([] if alone is None or pd.isna(alone) else [alone]))


def _ends(row) -> tuple[float, float, float]:
    """The measured step's ratio and its interval (the ratio itself where none was kept)."""
    step = row.get("vs_previous")
    return step, row.get("ci_low", step), row.get("ci_high", step)


def _measured(row) -> str:
    """'0.62x (96.8% CI 0.60–0.64': the measured step and its interval (``with_estimate``,
    off the band's edges and the prediction)."""
    step, low, high = _ends(row)
    shown, interval = with_estimate(step, low, high, edges=_edges(row))
    return f"{shown}x ({level_text(row.get('confidence', float('nan')))} CI {interval}"


def _prediction(row) -> str:
    """The hotspot's prediction at the places of the step's interval, rounded away from it when
    outside it: printed inside or outside the printed interval as it lies."""
    alone = row["hotspot_alone"]
    step, low, high = _ends(row)
    if any(x is None or pd.isna(x) for x in (step, low, high)) or step <= 0:  # no interval shown
        return f"{alone:.2f}"
    places = outward_places(low, high, edges=_edges(row))
    if places is None:  # closer to an end than six places show: every digit, as the interval
        return repr(float(alone))
    return rounded(alone, places, "up" if alone > high else "down" if alone < low else "nearest")


def bound_sentence(row: pd.Series) -> str:
    """What a ``greedy_bound_table`` row says, in a sentence computed from its numbers."""
    text = (
        f"{row['rung']}: {row['dominant']} operators hold the largest share "
        f"({row['dominant_share']:.0%} of {row['operators_ms']:.2f} ms)"
    )
    if pd.isna(row.get("hotspot")):
        return text + "."
    before, after = row["hotspot_before_ms"], row["hotspot_after_ms"]
    if before == 0:
        moved = f"is new ({after:.2f} ms a step)"
    elif after == 0:
        moved = f"is gone (was {before:.2f} ms a step, {row['hotspot_share_before']:.0%})"
    else:
        moved = (
            f"went from {before:.2f} to {after:.2f} ms a step in one trace each "
            f"({row['hotspot_share_before']:.0%} of the time before)"
        )
    replaced = before == 0 or after == 0  # it stands in for other operators, or they for it
    text += (
        f"; the hotspot that moved most, {row['hotspot']}, {moved}"
        + (
            " (an operator that appears or disappears stands in for others: its change alone "
            "predicts nothing of the step)"
            if replaced
            else f": alone it would make the step take {_prediction(row)}x as long"
        )
        + f"; all operators take {row['operators_ratio']:.2f}x"
    )
    busy = row.get("device_busy")
    if busy is not None and not pd.isna(busy) and busy < 0.8:
        text += (
            f"; the GPU runs a kernel during only {busy:.0%} of the step (what fills the rest "
            "is not told apart in a kernel trace)"
        )
    step, alone = row.get("vs_previous"), row.get("hotspot_alone")
    if step is None or pd.isna(step) or step <= 0:
        return text + "."
    if replaced or pd.isna(alone) or alone <= 0:
        return f"{text}, the measured step {_measured(row)}, {row['verdict']})."
    _, low, high = _ends(row)
    inside = low <= alone <= high
    if row["verdict"] == "same":
        why = (
            "consistent with what the hotspot alone predicts, within the step's interval (one "
            "trace each, so the prediction has no interval: not shown to be the cause)"
            if inside
            else "the hotspot alone predicts a change outside the step's interval: it does not "
            "account for the measured step alone (other operators or time outside them: not "
            "told apart here)"
        )
        return (
            f"{text}, the measured step the same within the noise band ({_measured(row)}): {why}."
        )
    text += f", the measured step {_measured(row)}, {row['verdict']})"
    change = row["hotspot_change"]
    if inside:
        why = (
            "consistent with what the hotspot alone would give (one trace each, so the "
            "prediction has no interval: not shown to be the cause)"
        )
        if 0 < change < math.inf and abs(math.log(alone)) < abs(math.log(change)):
            why += (
                f", less than the hotspot's own change ({change:.2f}x): it held "
                f"{row['hotspot_share_before']:.0%} of the time"
            )
    elif (step - 1) * (alone - 1) < 0:
        why = "the other way from the hotspot alone"
    elif abs(math.log(step)) > abs(math.log(alone)):
        why = "more than the hotspot alone"
    else:
        why = "less than the hotspot alone"
    if not inside:
        why += (
            ": the hotspot does not account for the measured step alone (one trace each, so "
            "the prediction has no interval; other operators or time outside them: not told "
            "apart here)"
        )
    return f"{text}: {why}."
