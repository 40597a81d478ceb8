"""Timing a training step, a script's front door: the steps notebook 01 times (``steps``, with
their ``recipe``s) and the shared attention timings of notebooks 05 and 06, beside the
measuring core's timer, sweep runner and ``compare`` (two callables timed interleaved, with a
verdict), which live in ``perflab.measure`` and are named here for scripts."""

from perflab.bench.steps import MODES, BenchConfig, make_step, random_batch, run_benchmark
from perflab.measure.comparison import Comparison, compare, paired_comparison
from perflab.measure.sweep import Sweep, is_out_of_memory
from perflab.measure.timer import STATISTICS, TIMING_METHOD, Timing, time_fn

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
    "paired_comparison",
    "random_batch",
    "run_benchmark",
    "time_fn",
]
