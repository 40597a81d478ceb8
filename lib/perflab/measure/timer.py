"""The workbook's one timer: warm up, synchronise around every step, keep every sample.

Each measured step is ``synchronize(); t0 = perf_counter(); fn(); synchronize(); t1`` so that
queued GPU work is neither charged to the step nor left out of it. Statistics are computed
from the samples; the median with the 20th and 80th percentiles is the robust summary
(Triton's ``do_bench`` reports the same quantiles), and every summary carries the IQR, the
median's distribution-free interval with the confidence it really has (``median_ci_level``: 95%
or more from 6 samples, less with fewer) and the ``unstable`` flag (``perflab.measure.stats``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from perflab.measure.device import synchronize
from perflab.measure.ranges import TIMED_RANGE, annotate
from perflab.measure.stats import Interval, iqr, is_unstable, median_interval

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

    @property
    def iqr(self) -> float:
        return iqr(self.samples)

    @property
    def median_ci(self) -> Interval:
        """The median's order-statistic interval at 95%, or the level the samples can give
        (``perflab.measure.stats.median_interval``)."""
        return median_interval(self.samples)

    @property
    def unstable(self) -> bool:
        """Too spread to conclude from (the rule is in ``perflab.measure.stats``)."""
        return is_unstable(self.samples)

    def summary(self) -> dict[str, float | int | str]:
        """The statistics as a flat dict (seconds), ready to be a result row."""
        stats = {f"{name}_s": getattr(self, name) for name in STATISTICS}
        interval = self.median_ci
        return {
            "warmup": self.warmup,
            "steps": len(self.samples),
            **stats,
            "median_ci_low_s": interval.low,
            "median_ci_high_s": interval.high,
            "median_ci_level": interval.level,
            "unstable": self.unstable,
            "timing_method": self.method,
        }


STATISTICS = ("mean", "std", "median", "min", "max", "p20", "p80", "iqr")


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

    ``sync`` waits for the device (default: ``perflab.measure.device.synchronize(device)``).
    The timed steps run inside the range "timed", the capture range with which nsys skips the
    warm-up.
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


class PhaseClock:
    """Device-synchronised times of the phases inside each step (forward, backward, optimizer).

    ``start()`` at the top of a step, ``mark(phase)`` at the end of each phase, ``finish()``
    at its end: each phase's time is from the previous mark, so the phases of a step are
    non-negative and add up to the step by construction. The synchronisation at each boundary
    costs a little on a GPU (the next phase's first kernel cannot be queued early).
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.steps: list[dict[str, float]] = []
        self._current: dict[str, float] = {}
        self._last = 0.0

    def start(self) -> None:
        synchronize(self.device)
        self._current = {}
        self._last = time.perf_counter()

    def mark(self, phase: str) -> None:
        synchronize(self.device)
        now = time.perf_counter()
        self._current[phase] = self._current.get(phase, 0.0) + now - self._last
        self._last = now

    def finish(self) -> None:
        self.steps.append(self._current)

    def last(self, steps: int) -> list[dict[str, float]]:
        """The phase times of the last ``steps`` steps (the timed ones after a warm-up)."""
        return self.steps[-steps:] if steps else []
