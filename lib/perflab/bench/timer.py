"""The workbook's one timer: warm up, synchronise around every step, keep every sample.

Each measured step is ``synchronize(); t0 = perf_counter(); fn(); synchronize(); t1`` so that
queued GPU work is neither charged to the step nor left out of it. Statistics are computed
from the samples; the median with the 20th and 80th percentiles is the robust summary
(Triton's ``do_bench`` reports the same quantiles).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from perflab.device import synchronize
from perflab.ranges import TIMED_RANGE, annotate

TIMING_METHOD = "perflab.bench.time_fn: perf_counter per step, device synchronised before and after"


@dataclass(frozen=True)
class Timing:
    """Per-step wall-clock samples in seconds, and their statistics."""

    samples: tuple[float, ...]
    warmup: int
    method: str = TIMING_METHOD

    @property
    def mean(self) -> float:
        return float(np.mean(self.samples))

    @property
    def std(self) -> float:
        """Sample standard deviation (ddof=1); 0 for a single sample."""
        return float(np.std(self.samples, ddof=1)) if len(self.samples) > 1 else 0.0

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def min(self) -> float:
        return float(np.min(self.samples))

    @property
    def max(self) -> float:
        return float(np.max(self.samples))

    @property
    def p20(self) -> float:
        return float(np.percentile(self.samples, 20))

    @property
    def p80(self) -> float:
        return float(np.percentile(self.samples, 80))

    def summary(self) -> dict[str, float | int | str]:
        """The statistics as a flat dict (seconds), ready to be a result row."""
        stats = {f"{name}_s": getattr(self, name) for name in STATISTICS}
        return {
            "warmup": self.warmup,
            "steps": len(self.samples),
            **stats,
            "timing_method": self.method,
        }


STATISTICS = ("mean", "std", "median", "min", "max", "p20", "p80")


def _check_count(name: str, value: int, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def time_fn(
    fn: Callable[[], object],
    *,
    warmup: int,
    steps: int,
    device: torch.device | str = "cpu",
    sync: Callable[[], None] | None = None,
) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``steps`` times timed; return the samples.

    ``sync`` waits for the device (default: ``perflab.device.synchronize(device)``). The timed
    steps run inside the range "timed", the capture range with which nsys skips the warm-up.
    """
    _check_count("warmup", warmup, 0)
    _check_count("steps", steps, 1)
    if sync is None:
        device = torch.device(device)

        def sync() -> None:
            synchronize(device)

    for _ in range(warmup):
        fn()
    samples = []
    with annotate(TIMED_RANGE):
        for _ in range(steps):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            samples.append(time.perf_counter() - start)
    return Timing(tuple(samples), warmup)
