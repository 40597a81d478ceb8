"""The front door of notebook 04, "Memory: what a training step keeps, and how to keep less". The
names `notebooks/04_memory.ipynb` uses from the library, each imported from where it lives (open
that module for its source). This package also holds the experiments that this notebook alone runs
(``at_scale``, ``checkpoint_study``, ``measure``), and its own sentences, computed from their
numbers (``findings``).
"""

from perflab.bench import BenchConfig
from perflab.implementations.checkpointing import run_nested
from perflab.implementations.model import get_preset
from perflab.lessons import open_notebook
from perflab.lessons.nb04_memory import findings as say
from perflab.lessons.nb04_memory.at_scale import (
    handout_example,
    handout_sizes,
    model_saved_tensors,
    modelled_step_peaks,
    whole_step_table,
)
from perflab.lessons.nb04_memory.checkpoint_study import (
    best_group_size,
    checkpointing_costs,
    depth_sweep,
    group_size_sweep,
)
from perflab.lessons.nb04_memory.step_memory import (
    block_saved_tensors,
    compile_backend,
    full_step_peak,
    gradient_memory,
    measured_residual_bytes,
    peak_configs,
    residual_stream_bytes,
    rmsnorm_saved_tensors,
    step_peak_memory,
    step_timelines,
)
from perflab.measure.conclusions import conclude
from perflab.measure.device import gpu_memory_gib as gpu_memory_gib_of
from perflab.measure.paths import listing
from perflab.memory.saved import saved_by_module, saved_by_producer, saved_bytes
from perflab.plots.memory import plot_depth, plot_group_sweep, plot_timelines

__all__ = [
    "BenchConfig",
    "best_group_size",
    "block_saved_tensors",
    "checkpointing_costs",
    "compile_backend",
    "conclude",
    "depth_sweep",
    "full_step_peak",
    "get_preset",
    "gpu_memory_gib_of",
    "gradient_memory",
    "group_size_sweep",
    "handout_example",
    "handout_sizes",
    "listing",
    "measured_residual_bytes",
    "model_saved_tensors",
    "modelled_step_peaks",
    "open_notebook",
    "peak_configs",
    "plot_depth",
    "plot_group_sweep",
    "plot_timelines",
    "residual_stream_bytes",
    "rmsnorm_saved_tensors",
    "run_nested",
    "saved_by_module",
    "saved_by_producer",
    "saved_bytes",
    "say",
    "step_peak_memory",
    "step_timelines",
    "whole_step_table",
]
