"""Tables notebook 01 reads: time per phase of a training step, and throughput against peak."""

from __future__ import annotations

import pandas as pd


def phase_breakdown(results: pd.DataFrame) -> pd.DataFrame:
    """Mean seconds per phase and preset from a sweep over the three modes.

    forward = forward mode; backward = forward-backward - forward;
    optimizer = train-step - forward-backward; step = train-step. Differences of means from
    separate runs, so a phase smaller than the noise can come out slightly negative.
    The std columns are those of the measured modes.
    """
    ok = results[results["status"] == "ok"]
    mean = ok.pivot_table(index="preset", columns="mode", values="mean_s", sort=False)
    std = ok.pivot_table(index="preset", columns="mode", values="std_s", sort=False)
    table = pd.DataFrame(
        {
            "forward_s": mean["forward"],
            "backward_s": mean["forward-backward"] - mean["forward"],
            "optimizer_s": mean["train-step"] - mean["forward-backward"],
            "step_s": mean["train-step"],
            "forward_std_s": std["forward"],
            "forward_backward_std_s": std["forward-backward"],
            "step_std_s": std["train-step"],
        }
    )
    return table.reset_index()


def throughput(results: pd.DataFrame, peak_flops_per_s: float) -> pd.DataFrame:
    """Tokens/s and model FLOPs utilisation per preset and mode.

    MFU = (model FLOPs per step / median step time) / measured peak matmul rate
    (Chowdhery et al. 2022, PaLM, appendix B, with a measured rather than a datasheet peak).
    """
    if peak_flops_per_s <= 0:
        raise ValueError(f"peak_flops_per_s must be positive, got {peak_flops_per_s}")
    ok = results[results["status"] == "ok"]
    table = ok[["preset", "mode", "median_s", "tokens_per_s", "achieved_flops_per_s"]].copy()
    table["achieved_tflops"] = table.pop("achieved_flops_per_s") / 1e12
    table["mfu"] = table["achieved_tflops"] * 1e12 / peak_flops_per_s
    return table.reset_index(drop=True)


def dtype_speedup(results: pd.DataFrame, baseline: str = "float32") -> pd.DataFrame:
    """Median seconds per preset and mode for each dtype, and each dtype's speedup over
    ``baseline`` (baseline median / its median; above 1 is faster)."""
    ok = results[results["status"] == "ok"]
    table = ok.pivot_table(index=["preset", "mode"], columns="dtype", values="median_s",
                           sort=False)  # fmt: skip
    if baseline not in table.columns:
        raise ValueError(f"no {baseline} rows to compare with; dtypes: {list(table.columns)}")
    for dtype in [c for c in table.columns if c != baseline]:
        table[f"speedup_{dtype}"] = table[baseline] / table[dtype]
    table.columns.name = None
    return table.reset_index()
