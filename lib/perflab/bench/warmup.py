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
    """Each warm-up setting's statistics divided by those of the most warmed-up setting, and
    its first timed step divided by that setting's median: 1.0 means warm-up made no difference.
    """
    samples = warmup_samples(study)
    stats = samples.groupby("warmup")["seconds"].agg(["mean", "std", "median", "first"])
    warm = stats.loc[stats.index.max()]
    return pd.DataFrame(
        {
            "first_over_warm_median": stats["first"] / warm["median"],
            "mean_over_warm": stats["mean"] / warm["mean"],
            "std_over_warm": stats["std"] / warm["std"],
            "median_over_warm": stats["median"] / warm["median"],
        }
    ).reset_index()
