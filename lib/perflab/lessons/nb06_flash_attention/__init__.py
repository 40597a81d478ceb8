"""The front door of notebook 06, "FlashAttention-2: attention without the quadratic memory". The
names `notebooks/06_flash_attention.ipynb` uses from the library, each imported from where it lives
(open that module for its source). This package holds no experiments of its own: its timing is
shared with notebook 05 (``bench.attention_timing``), its compile table with ``perflab kernels``
(``tools.kernels``).
"""

from perflab.bench import Sweep
from perflab.bench.attention_timing import (
    attention_configs,
    attention_peak_memory,
    flash_speed,
    host_call_table,
    measure_attention,
    ratios_to,
)
from perflab.findings import attention as say
from perflab.implementations.attention.correctness import (
    checks_line,
    implementation_checks,
    weighted_sum_line,
)
from perflab.implementations.attention.flash_configs import kept_table
from perflab.implementations.attention.flash_torch import FlashAttentionTorch
from perflab.implementations.attention.flash_triton import (
    INTERPRETED,
    SOURCES,
    FlashAttentionTriton,
)
from perflab.implementations.attention.flash_tuning import CHECK_CONFIG, pinned_config
from perflab.implementations.attention.weighted_sum import SOURCES as WEIGHTED_SUM_SOURCES
from perflab.implementations.attention.weighted_sum import WeightedSumTriton
from perflab.lessons import open_notebook
from perflab.measure.comparison import comparison_frame
from perflab.measure.conclusions import conclude_all
from perflab.measure.device import parse_dtype
from perflab.measure.paths import listing, results_elsewhere
from perflab.measure.triton_compile import kernel_source
from perflab.plots.bench import plot_attention_sweep
from perflab.tools.adapters.timing import attention_of_yours
from perflab.tools.kernels import (
    compile_line,
    compile_table,
    jobs,
    structure_cost,
    structure_findings,
    summary,
)

__all__ = [
    "CHECK_CONFIG",
    "FlashAttentionTorch",
    "FlashAttentionTriton",
    "INTERPRETED",
    "SOURCES",
    "Sweep",
    "WEIGHTED_SUM_SOURCES",
    "WeightedSumTriton",
    "attention_configs",
    "attention_of_yours",
    "attention_peak_memory",
    "checks_line",
    "comparison_frame",
    "compile_line",
    "compile_table",
    "conclude_all",
    "flash_speed",
    "host_call_table",
    "implementation_checks",
    "jobs",
    "kept_table",
    "kernel_source",
    "listing",
    "measure_attention",
    "open_notebook",
    "parse_dtype",
    "pinned_config",
    "plot_attention_sweep",
    "ratios_to",
    "results_elsewhere",
    "say",
    "structure_cost",
    "structure_findings",
    "summary",
    "weighted_sum_line",
]
