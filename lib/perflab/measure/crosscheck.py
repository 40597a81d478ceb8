"""Does the workbook's timer agree with the timers made for the job?

The same matmul is timed by ``perflab.bench.time_fn``, by ``torch.utils.benchmark`` (which
times blocks of calls and reports the median per call over blocks) and, on CUDA only, by
``triton.testing.do_bench`` (CUDA events, L2 cache flushed between calls). Used by notebook 01.
"""

from __future__ import annotations

import torch
import torch.utils.benchmark as torch_benchmark

from perflab.measure.comparison import Comparison, paired_comparison
from perflab.measure.stats import ROUNDS
from perflab.measure.timer import time_fn


def matmul_size_for(target_s: float, flops_per_s: float) -> int:
    """Side n of a square matmul that takes about ``target_s`` at ``flops_per_s``:
    2 n^3 = target_s * flops_per_s."""
    if target_s <= 0 or flops_per_s <= 0:
        raise ValueError("target_s and flops_per_s must be positive")
    return max(16, round((target_s * flops_per_s / 2) ** (1 / 3)))


def compare_timers(
    n: int,
    device: torch.device,
    warmup: int = 5,
    steps: int = 30,
    rounds: int = ROUNDS,
) -> list[Comparison]:
    """An (n x n) @ (n x n) float32 matmul timed by each other timer against the workbook's
    (a), labelled with ``n``: each timer's time over the workbook's with its interval, that
    interval's confidence and the verdict.

    The timers take turns for ``rounds`` rounds (each reports its median per round), so that
    a slow phase of a shared machine does not land on one timer only; the ratio is the paired
    comparison of the rounds (``perflab.measure.comparison.paired_comparison``).
    """
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)

    def matmul() -> torch.Tensor:
        return a @ b

    # torch.utils.benchmark runs single-threaded unless told otherwise; match ours.
    reference = torch_benchmark.Timer(
        stmt="a @ b", globals={"a": a, "b": b}, num_threads=torch.get_num_threads()
    )
    medians: dict[str, list[float]] = {}
    for _ in range(rounds):
        ours = time_fn(matmul, warmup=warmup, steps=steps, device=device)
        medians.setdefault("perflab.bench.time_fn", []).append(ours.median)
        theirs = reference.blocked_autorange(min_run_time=steps * ours.median)
        medians.setdefault("torch.utils.benchmark.Timer.blocked_autorange", []).append(
            theirs.median
        )
        if device.type == "cuda":  # GPU-only: do_bench times with CUDA events
            import triton.testing

            ms = triton.testing.do_bench(matmul, return_mode="median")
            medians.setdefault("triton.testing.do_bench", []).append(ms / 1e3)

    ours = medians.pop("perflab.bench.time_fn")
    return [
        paired_comparison(ours, values, names=("perflab.bench.time_fn", timer)).with_labels(n=n)
        for timer, values in medians.items()
    ]
