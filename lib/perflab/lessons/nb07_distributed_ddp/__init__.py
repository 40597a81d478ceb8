"""The front door of notebook 07, "Distributed communication and data-parallel training". The names
`notebooks/07_distributed_ddp.ipynb` uses from the library, each imported from where it lives (open
that module for its source). This package also holds the experiments that this notebook alone runs
(``allreduce_benchmark``, ``ring``).
"""

from perflab.distributed import RankError, launch
from perflab.distributed.ddp_benchmark import (
    ddp_comparisons,
    ddp_configs,
    ddp_findings,
    ddp_sweep,
    fit_bucket_overhead,
    relative_to_naive,
)
from perflab.distributed.ddp_timeline import ddp_timelines, overlap_table
from perflab.distributed.launch import raise_on_rank
from perflab.distributed.parity import ddp_parity_all
from perflab.findings import distributed as say
from perflab.lessons import open_notebook
from perflab.lessons.nb07_distributed_ddp.allreduce_benchmark import (
    allreduce_sweep,
    bus_factor,
    check_allreduce_rank,
)
from perflab.lessons.nb07_distributed_ddp.ring import check_ring_rank, fit_ring_model, ring_sweep
from perflab.measure.comparison import comparison_frame
from perflab.measure.conclusions import conclude_all
from perflab.measure.paths import listing
from perflab.plots.bench import plot_comparisons
from perflab.plots.distributed import (
    plot_allreduce,
    plot_bucket_sweep,
    plot_ddp_steps,
    plot_rank_timelines,
)
from perflab.tools.adapters.timing import adapters_setup, ddp_of_yours, yours_ddp_configs

__all__ = [
    "RankError",
    "adapters_setup",
    "allreduce_sweep",
    "bus_factor",
    "check_allreduce_rank",
    "check_ring_rank",
    "conclude_all",
    "comparison_frame",
    "ddp_comparisons",
    "ddp_configs",
    "ddp_findings",
    "ddp_of_yours",
    "ddp_parity_all",
    "ddp_sweep",
    "ddp_timelines",
    "fit_bucket_overhead",
    "fit_ring_model",
    "launch",
    "listing",
    "open_notebook",
    "overlap_table",
    "plot_allreduce",
    "plot_bucket_sweep",
    "plot_comparisons",
    "plot_ddp_steps",
    "plot_rank_timelines",
    "raise_on_rank",
    "relative_to_naive",
    "ring_sweep",
    "say",
    "yours_ddp_configs",
]
