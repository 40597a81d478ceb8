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

import numpy as np
import pandas as pd

from perflab.bench.steps import BenchConfig
from perflab.measure.conclusions import Finding
from perflab.measure.stats import ALPHA, median_interval


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


def _missing(samples_s) -> bool:
    """Whether a row has no samples: a failed run's row holds a missing value (NaN or None)."""
    return samples_s is None or (isinstance(samples_s, float) and np.isnan(samples_s))


def _samples(samples_s) -> list:
    """A row's timed steps: ``samples_s`` as saved (JSON text) or as measured (a list)."""
    return json.loads(samples_s) if isinstance(samples_s, str) else samples_s


def warmup_samples(study: pd.DataFrame) -> pd.DataFrame:
    """Long form of a warm-up study: one row per (warmup, timed step index, seconds)."""
    samples = study["samples_s"].map(_samples)
    long = study[["warmup"]].assign(samples_s=samples).explode("samples_s")
    long["step"] = long.groupby("warmup").cumcount()
    return long.rename(columns={"samples_s": "seconds"}).astype({"seconds": float})


def first_step_p_value(samples) -> float:
    """The exact p-value of "the first timed step is slower than the steps after it": with no
    one-off cost the n timed steps are exchangeable, so the first is among the k slowest with
    probability k / n (k counts the steps at least as slow as the first, ties against the
    claim). It needs at least 1 / ``ALPHA`` = 20 steps to reach 5%."""
    seconds = np.asarray(samples, dtype=float)
    return float((seconds >= seconds[0]).sum() / len(seconds))


#: ``warmup_effect``'s columns, whichever settings ran.
EFFECT_COLUMNS = [
    "warmup",
    "steps",
    "median_s",
    "median_ci_low_s",
    "median_ci_high_s",
    "median_ci_level",
    "first_over_rest_median",
    "first_rank",
    "first_p_value",
    "first_slower",
    "mean_with_first_over_without",
    "std_with_first_over_without",
    "median_with_first_over_without",
]


def warmup_effect(study: pd.DataFrame) -> pd.DataFrame:
    """Per warm-up setting (ascending): its timed steps, the first step over the median of
    the steps after it, how many steps were at least as slow as the first (``first_rank``) and
    the exact p-value of "the first step is slower" (``first_step_p_value``); whether the first
    step is slower at ``ALPHA`` (``first_slower``), tested in order of warm-up (a fixed
    sequence: a setting is tested only when every setting with fewer warm-up steps was found
    slower, which keeps the chance of any false claim at ``ALPHA``; None for a setting not
    tested, whatever its p-value); and what the first step does to that setting's own mean,
    standard deviation and median (the same steps with and without it: arithmetic, no test
    needed). The median's order-statistic interval (and its level) is kept for the table;
    medians of different settings ran in different processes and are not compared. A setting
    whose run failed (no samples: NaN, None or an empty list) is a row of 0 steps, not
    tested, and ends the sequence."""
    by_setting: dict = {}  # each setting's timed steps in order (rows of one setting joined)
    for warmup, samples in zip(study["warmup"], study["samples_s"], strict=True):
        steps = by_setting.setdefault(warmup, [])
        steps += [] if _missing(samples) else list(_samples(samples))  # a failed run: none
    rows = []
    earlier_slower = True
    for warmup in sorted(by_setting):
        if not by_setting[warmup]:
            rows.append({"warmup": warmup, "steps": 0, "first_slower": None})
            earlier_slower = False
            continue
        seconds = np.asarray(by_setting[warmup], dtype=float)
        rest = seconds[1:]
        p_value = first_step_p_value(seconds)
        # a setting the fixed sequence never reached is not tested: None, not "not slower"
        slower = (p_value <= ALPHA) if earlier_slower else None
        earlier_slower = bool(slower)
        interval = median_interval(seconds)
        rows.append(
            {
                "warmup": warmup,
                "steps": len(seconds),
                "median_s": float(np.median(seconds)),
                "median_ci_low_s": interval.low,
                "median_ci_high_s": interval.high,
                "median_ci_level": interval.level,
                "first_over_rest_median": seconds[0] / np.median(rest) if len(rest) else np.nan,
                "first_rank": round(p_value * len(seconds)),  # the k of first_step_p_value
                "first_p_value": p_value,
                "first_slower": slower,
                "mean_with_first_over_without": seconds.mean() / rest.mean()
                if len(rest)
                else np.nan,
                "std_with_first_over_without": seconds.std(ddof=1) / rest.std(ddof=1)
                if len(rest) > 2 and rest.std(ddof=1) > 0
                else np.nan,
                "median_with_first_over_without": float(np.median(seconds) / np.median(rest))
                if len(rest)
                else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=EFFECT_COLUMNS)


def _without_warmup(effect: pd.DataFrame):
    """The row of the setting without warm-up, None where the study has none."""
    rows = effect[effect["warmup"] == 0]
    return rows.iloc[0] if len(rows) else None


def warmup_conclusion(effect: pd.DataFrame) -> str:
    """What the warm-up study shows, in words computed from ``warmup_effect``: for the setting
    without warm-up, and then for each next setting while every earlier one was found slower,
    whether its first timed step was slower than the steps after it (exact test at ``ALPHA``)
    or cannot be told from them; and, where the first step was found slower without warm-up,
    what it does to that setting's mean, standard deviation and median."""
    if _without_warmup(effect) is None:
        return "The study has no setting without warm-up, so it shows no one-off cost."
    sentences = []
    for row in effect.itertuples():
        plural = "s" if row.warmup != 1 else ""
        steps = (
            "Without warm-up" if row.warmup == 0 else f"After {row.warmup:.0f} warm-up step{plural}"
        )
        if row.steps == 0:
            sentences.append(f"{steps} the run failed (no timed steps): nothing is shown for it.")
            break  # and the fixed sequence ends there
        rank = "the slowest" if row.first_rank == 1 else f"among the {row.first_rank} slowest"
        text = (
            f"{steps} the first timed step took {row.first_over_rest_median:.2f}x the median of "
            f"the {row.steps - 1} steps after it and was {rank} of {row.steps} (with no one-off "
            f"cost: probability {row.first_p_value:.0%}): "
        )
        if row.first_slower:
            sentences.append(text + "it paid a one-off cost the later steps did not.")
            continue
        if row.steps < 1 / ALPHA:
            text += (
                f"{row.steps} steps cannot show a slower first step at {1 - ALPHA:.0%} (at "
                f"least {1 / ALPHA:.0f} are needed), so no cost is claimed"
            )
        else:
            text += "not told from the steps after it, so no one-off cost is shown"
        sentences.append(text + ("." if row.warmup == 0 else " after that many warm-up steps."))
        break  # the fixed sequence stops at the first setting not found slower
    cold = _without_warmup(effect)
    if cold.first_slower:
        sentences.append(
            f"Without warm-up that one step makes the setting's mean "
            f"{cold.mean_with_first_over_without:.2f}x and its standard deviation "
            f"{cold.std_with_first_over_without:.1f}x what the same steps give without it, "
            f"its median {cold.median_with_first_over_without:.2f}x."
        )
    return " ".join(sentences)


def warmup_finding(effect: pd.DataFrame) -> Finding:
    """``warmup_conclusion`` as a finding; its verdict is "slower" when the first timed step
    without warm-up was found slower than the steps after it, else "inconclusive" (also where
    that run failed or the study has no such setting)."""
    cold = _without_warmup(effect)
    found = cold is not None and cold["first_slower"] is not None and bool(cold["first_slower"])
    verdict = "slower" if found else "inconclusive"
    return Finding("warm-up", warmup_conclusion(effect), verdict_text=verdict)
