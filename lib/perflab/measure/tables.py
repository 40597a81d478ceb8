"""Tables notebook 01 reads: time per phase of a training step, throughput against peak, and
timing rows with their intervals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from perflab.measure.conclusions import Finding
from perflab.measure.stats import level_text, median_interval, with_estimate


def phase_breakdown(results: pd.DataFrame) -> pd.DataFrame:
    """Per preset, the phases of the training step measured inside each timed step (the
    device synchronised at every phase boundary, ``perflab.measure.timer.PhaseClock``): mean
    seconds of forward, backward and optimizer, which are non-negative and add up to the
    clocked step by construction; their shares; backward / forward as the median of the
    per-step ratios with its order-statistic interval and that interval's level.

    For comparison, ``*_by_subtraction_s``: the same phases as differences of the medians of
    the separately timed modes (forward-backward - forward, train-step - forward-backward),
    which noise can make negative.
    """
    ok = results[results["status"] == "ok"]
    train = ok[ok["mode"] == "train-step"].set_index("preset")
    median = ok.pivot_table(index="preset", columns="mode", values="median_s", sort=False)
    rows = []
    for preset, row in train.iterrows():
        phases = json.loads(row["phase_samples_s"])
        ratios = np.asarray(phases["backward"]) / np.asarray(phases["forward"])
        interval = median_interval(ratios)
        step = sum(row[f"{p}_phase_s"] for p in ("forward", "backward", "optimizer"))
        rows.append(
            {
                "preset": preset,
                "forward_s": row["forward_phase_s"],
                "backward_s": row["backward_phase_s"],
                "optimizer_s": row["optimizer_phase_s"],
                "step_s": step,
                "forward_share": row["forward_phase_s"] / step,
                "backward_share": row["backward_phase_s"] / step,
                "optimizer_share": row["optimizer_phase_s"] / step,
                "backward_over_forward": float(np.median(ratios)),
                "backward_over_forward_ci_low": interval.low,
                "backward_over_forward_ci_high": interval.high,
                "backward_over_forward_ci_level": interval.level,
                "unstable": bool(row["unstable"]),
                "backward_by_subtraction_s": (
                    median.loc[preset, "forward-backward"] - median.loc[preset, "forward"]
                ),
                "optimizer_by_subtraction_s": (
                    median.loc[preset, "train-step"] - median.loc[preset, "forward-backward"]
                ),
            }
        )
    return pd.DataFrame(rows)


def phase_findings(breakdown: pd.DataFrame) -> list[Finding]:
    """Per preset of ``phase_breakdown``: backward / forward with its interval against the
    FLOP model's 2 (consistent with it, above or below; nothing concluded from an interval
    under 95%), and the phases' shares of the step."""
    findings = []
    for row in breakdown.itertuples():
        low, high = row.backward_over_forward_ci_low, row.backward_over_forward_ci_high
        level = row.backward_over_forward_ci_level
        where = "consistent with" if low <= 2 <= high else "above" if low > 2 else "below"
        if level < 0.95:
            where = "too few steps to compare with"
        ratio, interval = with_estimate(row.backward_over_forward, low, high, edges=(2.0,))
        sentence = (
            f"{row.preset}: backward takes {ratio}x the forward "
            f"({level_text(level)} CI {interval}), {where} the FLOP model's 2x; "
            f"forward {row.forward_share:.0%}, backward {row.backward_share:.0%}, optimizer "
            f"{row.optimizer_share:.0%} of the step"
        )
        findings.append(
            Finding(
                f"backward/forward {row.preset}",
                sentence,
                unstable=bool(row.unstable),
                verdict_text=where,
                interval=(low, high, level),
            )
        )
    return findings


def throughput(results: pd.DataFrame, peak_flops_per_s: float) -> pd.DataFrame:
    """Tokens/s and model FLOPs utilisation per preset and mode.

    MFU = (model FLOPs per step / median step time) / measured peak matmul rate
    (Chowdhery et al. 2022, PaLM, appendix B, with a measured rather than a datasheet peak).
    """
    if peak_flops_per_s <= 0:
        raise ValueError(f"peak_flops_per_s must be positive, got {peak_flops_per_s}")
    ok = results[results["status"] == "ok"]
    columns = ["preset", "mode", "median_s", "tokens_per_s", "achieved_flops_per_s"]
    table = ok[columns + (["unstable"] if "unstable" in ok else [])].copy()
    table["achieved_tflops"] = table.pop("achieved_flops_per_s") / 1e12
    table["mfu"] = table["achieved_tflops"] * 1e12 / peak_flops_per_s
    return table.reset_index(drop=True)


def mfu_lines(rates: pd.DataFrame, presets) -> list[str]:
    """From ``throughput``: the best and worst MFU among the stable rows (all rows, said so,
    where none is stable), the training step's MFU per preset of ``presets`` and those without
    one. Separate medians without an interval: figures, no difference between presets claimed."""
    stable = rates[~rates["unstable"].astype(bool)] if "unstable" in rates else rates
    pool, which = (stable, "stable rows") if len(stable) else (rates, "all rows, none stable")
    best = pool.loc[pool["mfu"].idxmax()]
    lines = [
        f"best MFU ({which}): {best.mfu:.1%} ({best.preset}, {best['mode']}); worst: "
        f"{pool['mfu'].min():.1%}"
    ]
    train = rates[rates["mode"] == "train-step"].set_index("preset")
    lines.append(
        "training-step MFU by preset: "
        + ", ".join(
            f"{p} {r.mfu:.1%}" + (" (unstable)" if r.get("unstable", False) else "")
            for p, r in train.iterrows()
        )
        + " (separate medians, no interval: figures, not a tested difference)"
    )
    missing = [p for p in presets if p not in train.index]
    if missing:
        lines.append("no training step (out of memory or failed): " + ", ".join(missing))
    return lines


def timing_table(results: pd.DataFrame, keys=("preset", "mode")) -> pd.DataFrame:
    """Per row: the median in ms with its interval and that interval's confidence (``ci``, e.g.
    '12.1–13.4 (96.8%)'), the IQR as a share of the median and the ``unstable`` flag
    (``perflab.measure.stats``); rows that did not run keep their status."""
    table = results[[*keys, "status"]].copy()
    ok = results["status"] == "ok"
    table["median_ms"] = (results["median_s"] * 1e3).where(ok)
    levels = results.get("median_ci_level", pd.Series(float("nan"), index=results.index))
    table["ci_ms"] = [
        f"{low * 1e3:.3g}–{high * 1e3:.3g} ({level_text(level)})" if good else ""
        for low, high, level, good in zip(
            results["median_ci_low_s"], results["median_ci_high_s"], levels, ok, strict=True
        )
    ]
    table["iqr_%"] = (100 * results["iqr_s"] / results["median_s"]).where(ok)
    table["unstable"] = results["unstable"].where(ok)
    return table
