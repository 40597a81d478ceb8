"""Timing: the one timer, the steps notebook 01 times, the sweep runner, and ``compare``
(two callables timed interleaved, with a verdict)."""

from perflab.bench.comparison import Comparison, compare
from perflab.bench.steps import MODES, BenchConfig, make_step, random_batch, run_benchmark
from perflab.bench.sweep import Sweep, is_out_of_memory
from perflab.bench.timer import STATISTICS, TIMING_METHOD, Timing, time_fn

__all__ = [
    "MODES",
    "STATISTICS",
    "TIMING_METHOD",
    "BenchConfig",
    "Comparison",
    "Sweep",
    "Timing",
    "compare",
    "is_out_of_memory",
    "make_step",
    "random_batch",
    "run_benchmark",
    "time_fn",
]
