"""The front door of notebook 05, "Attention and torch.compile: where naive attention runs out, and
what compiling buys". The names `notebooks/05_attention_compile.ipynb` uses from the library, each
imported from where it lives (open that module for its source). This package also holds the
experiments that this notebook alone runs (``compiled``).
"""

from perflab.bench import Sweep
from perflab.bench.attention_timing import attention_configs, measure_attention, naive_memory_check
from perflab.findings import attention as say
from perflab.lessons import open_notebook
from perflab.lessons.nb05_attention_compile.compiled import compile_findings, compile_vs_eager
from perflab.measure.comparison import comparison_frame
from perflab.measure.conclusions import conclude_all
from perflab.measure.device import gpu_memory_gib as gpu_memory_gib_of
from perflab.measure.paths import listing
from perflab.plots.bench import plot_attention_sweep, plot_comparisons
from perflab.tools.adapters.timing import attention_of_yours

__all__ = [
    "Sweep",
    "attention_configs",
    "attention_of_yours",
    "comparison_frame",
    "compile_findings",
    "compile_vs_eager",
    "conclude_all",
    "gpu_memory_gib_of",
    "listing",
    "measure_attention",
    "naive_memory_check",
    "open_notebook",
    "plot_attention_sweep",
    "plot_comparisons",
    "say",
]
