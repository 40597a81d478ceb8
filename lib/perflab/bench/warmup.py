"""Why warm-up steps matter: each setting measured in a fresh Python process.

A step run for the first time in a process pays one-off costs: memory pages touched for the
first time, allocator caches filling, kernel libraries picking algorithms (oneDNN primitives on
CPU; CUDA context, cuBLAS handles and autotuning on GPU), the optimizer allocating its state.
Only a fresh process shows them honestly, so each warm-up setting runs
``python -m perflab bench`` as a subprocess. Used by notebook 01.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

import pandas as pd

from perflab.bench.conclusions import Finding
from perflab.bench.stats import level_text, median_interval
from perflab.bench.steps import BenchConfig


def measure_in_fresh_process(config: dict, timeout_s: float = 1800) -> dict:
    """Sweep measure function: one benchmark in a new interpreter; its result row with the
    samples as JSON text in ``samples_s``."""
    config = BenchConfig(**config)
    command = [sys.executable, "-m", "perflab", "bench", *config.command_line(), "--format", "json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        raise RuntimeError(f"benchmark subprocess failed (exit {done.returncode}):\n{tail}")
    row = json.loads(done.stdout)
    return {**row, "samples_s": json.dumps(row["samples_s"])}


def warmup_configs(base: BenchConfig, warmups: Sequence[int] = (0, 1, 2, 5)) -> list[BenchConfig]:
    """``base`` with each of ``warmups``: the configurations of a warm-up study."""
    return [BenchConfig(**{**base.as_dict(), "warmup": w}) for w in warmups]


def warmup_samples(study: pd.DataFrame) -> pd.DataFrame:
    """Long form of a warm-up study: one row per (warmup, timed step index, seconds)."""
    samples = study["samples_s"].map(lambda s: json.loads(s) if isinstance(s, str) else s)
    long = study[["warmup"]].assign(samples_s=samples).explode("samples_s")
    long["step"] = long.groupby("warmup").cumcount()
    return long.rename(columns={"samples_s": "seconds"}).astype({"seconds": float})


def warmup_effect(study: pd.DataFrame) -> pd.DataFrame:
    """Per warm-up setting, against the most warmed-up one (the settled state): the first
    timed step over the settled median; the median with its order-statistic interval (and
    that interval's level: 4 steps give 87.5%) and whether it overlaps the settled one; mean
    and std over the settled ones (1.0: warm-up made no difference)."""
    samples = warmup_samples(study)
    stats = samples.groupby("warmup")["seconds"].agg(["mean", "std", "median", "first"])
    intervals = samples.groupby("warmup")["seconds"].agg(lambda s: median_interval(s.to_numpy()))
    stats["median_ci_low_s"] = [i.low for i in intervals]
    stats["median_ci_high_s"] = [i.high for i in intervals]
    stats["median_ci_level"] = [i.level for i in intervals]
    settled = stats.loc[stats.index.max()]
    return pd.DataFrame(
        {
            "median_s": stats["median"],
            "median_ci_low_s": stats["median_ci_low_s"],
            "median_ci_high_s": stats["median_ci_high_s"],
            "median_ci_level": stats["median_ci_level"],
            "overlaps_settled": (stats["median_ci_low_s"] <= settled["median_ci_high_s"])
            & (stats["median_ci_high_s"] >= settled["median_ci_low_s"]),
            "first_over_settled_median": stats["first"] / settled["median"],
            "median_over_settled": stats["median"] / settled["median"],
            "mean_over_settled": stats["mean"] / settled["mean"],
            "std_over_settled": stats["std"] / settled["std"],
        }
    ).reset_index()


def warmup_conclusion(effect: pd.DataFrame) -> str:
    """What the warm-up study shows, in words computed from ``warmup_effect``: only claims
    that the intervals support; then, for each setting between none and the most, whether its
    first timed step and its median are the settled ones (``between_settings``)."""
    return _cold_against_settled(effect) + between_settings(effect)


def warmup_finding(effect: pd.DataFrame) -> Finding:
    """``warmup_conclusion`` as a finding, with the settled median's interval it states
    (seconds, and that interval's level), so that ``conclude`` records it."""
    settled = effect.iloc[-1]
    interval = (settled.median_ci_low_s, settled.median_ci_high_s, settled.median_ci_level)
    return Finding("warm-up", warmup_conclusion(effect), interval=interval)


def _cold_against_settled(effect: pd.DataFrame) -> str:
    cold, settled = effect.iloc[0], effect.iloc[-1]
    first_s = cold.first_over_settled_median * settled.median_s
    slow_first = first_s > settled.median_ci_high_s
    text = (
        f"Without warm-up the first timed step took {cold.first_over_settled_median:.2f}x the "
        f"settled median (after {settled.warmup:.0f} warm-up steps), "
        + ("above" if slow_first else "not above")
        + f" the settled median's {level_text(settled.median_ci_level)} interval. "
    )
    if cold.overlaps_settled and not slow_first:
        return text + (
            "The median without warm-up is the same within its interval: on this device and "
            "model no one-off cost shows in the timed steps."
        )
    if cold.overlaps_settled:
        return text + (
            "The median of the timed steps is the same within its interval: the slow first "
            f"step moves the mean ({cold.mean_over_settled:.2f}x) and the standard deviation "
            f"({cold.std_over_settled:.1f}x), not the median."
        )
    overlapping = effect[effect["overlaps_settled"]]["warmup"]
    return text + (
        f"Even the median is {cold.median_over_settled:.2f}x the settled one (the "
        f"{level_text(min(cold.median_ci_level, settled.median_ci_level))} intervals do not "
        f"overlap); it agrees with the settled median from {overlapping.min():.0f} "
        "warm-up steps on."
    )


def between_settings(effect: pd.DataFrame) -> str:
    """For each warm-up setting between the first and the last (1 step, say, between 0 and 2):
    its first timed step against the settled median's interval, and its median against the
    settled one, with what that says: one-off costs left for the timed steps, or paid by the
    warm-up (when the run without warm-up showed some), or a difference within the intervals,
    which is the machine's noise, not warm-up."""
    settled, cold = effect.iloc[-1], effect.iloc[0]
    cold_pays = (
        cold.first_over_settled_median * settled.median_s > settled.median_ci_high_s
        or not cold.overlaps_settled
    )
    sentences = []
    for row in effect.iloc[1:-1].itertuples():
        first_s = row.first_over_settled_median * settled.median_s
        slow_first = first_s > settled.median_ci_high_s
        steps = f"{row.warmup:.0f} warm-up step" + ("s" if row.warmup != 1 else "")
        text = (
            f" After {steps} the first timed step took {row.first_over_settled_median:.2f}x "
            f"the settled median ({'above' if slow_first else 'within or below'} its "
            f"interval) and the median {row.median_over_settled:.2f}x "
            f"({'overlapping' if row.overlaps_settled else 'outside'} the settled "
            "interval): "
        )
        if slow_first or not row.overlaps_settled:
            text += f"{steps} did not pay every one-off cost here; some fell on the timed steps."
        elif cold_pays:
            text += (
                f"{steps} paid the one-off costs here; what still differs from "
                f"{settled.warmup:.0f} lies within the intervals, the machine's noise "
                "between two processes."
            )
        else:
            text += (
                "as without warm-up, nothing left to pay shows; what differs from "
                f"{settled.warmup:.0f} lies within the intervals, the machine's noise "
                "between two processes."
            )
        sentences.append(text)
    return "".join(sentences)
