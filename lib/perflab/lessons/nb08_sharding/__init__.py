"""The front door of notebook 08, "Sharding: ZeRO-1, fully sharded data parallel, and how far each
strategy scales". The names `notebooks/08_sharding.ipynb` uses from the library, each imported from
where it lives (open that module for its source). This package also holds the experiments that this
notebook alone runs (``fsdp_timeline``).
"""

from perflab.distributed import launch
from perflab.distributed.calculators import H100_NODE, Workload, max_devices_table
from perflab.distributed.comm_accounting import (
    compute_bound_conditions,
    fsdp_memory_per_device,
    smaller_batch_options,
)
from perflab.distributed.ddp_benchmark import (
    PREFETCH_KEY,
    ZERO_KEY,
    ddp_sweep,
    prefetch_configs,
    zero_configs,
)
from perflab.distributed.ffn_calcs import TP_BACKWARD
from perflab.distributed.ffn_calcs import answers as ffn_answers
from perflab.distributed.memory_per_rank import (
    fsdp_memory,
    memory_per_rank_formula,
    zero_communication,
    zero_memory,
    zero_memory_points,
)
from perflab.distributed.parity import fsdp_parity, torch_fsdp_comparison, zero_parity_all
from perflab.distributed.toy import toy_model
from perflab.findings import distributed as say
from perflab.implementations.model import get_preset
from perflab.lessons import open_notebook
from perflab.lessons.nb08_sharding.fsdp_timeline import fsdp_forward_timeline, gather_summary
from perflab.measure.conclusions import conclude_all
from perflab.measure.device import resolve_device
from perflab.measure.paths import listing
from perflab.plots.distributed import plot_max_devices, plot_memory_per_rank, plot_rank_timelines
from perflab.tools.adapters.timing import sharding_of_yours
from perflab.tools.widgets import calculator_controls

__all__ = [
    "H100_NODE",
    "PREFETCH_KEY",
    "TP_BACKWARD",
    "Workload",
    "ZERO_KEY",
    "toy_model",
    "calculator_controls",
    "compute_bound_conditions",
    "conclude_all",
    "ddp_sweep",
    "ffn_answers",
    "fsdp_forward_timeline",
    "fsdp_memory",
    "fsdp_memory_per_device",
    "fsdp_parity",
    "gather_summary",
    "get_preset",
    "launch",
    "listing",
    "max_devices_table",
    "memory_per_rank_formula",
    "open_notebook",
    "plot_max_devices",
    "plot_memory_per_rank",
    "plot_rank_timelines",
    "prefetch_configs",
    "resolve_device",
    "say",
    "sharding_of_yours",
    "smaller_batch_options",
    "torch_fsdp_comparison",
    "zero_communication",
    "zero_configs",
    "zero_memory",
    "zero_memory_points",
    "zero_parity_all",
]
