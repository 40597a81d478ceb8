"""The front door of notebook 09, "The fastest training step, one measured change at a time". The
names `notebooks/09_training_step.ipynb` uses from the library, each imported from where it lives
(open that module for its source). This package also holds the experiments that this notebook alone
runs (``batching``, ``data``, ``head_memory``, ``ladder_traces``, ``sharded_step``,
``step_model``), and its own sentences, computed from their numbers (``findings``).
"""

from perflab.bench.recipe import Recipe
from perflab.bench.steps import BenchConfig
from perflab.implementations.model import build_model, get_preset
from perflab.lessons import open_notebook
from perflab.lessons.nb09_training_step import findings as say
from perflab.lessons.nb09_training_step.batching import (
    check_bucketing,
    check_loss_batching,
    compare_bucketing,
    compare_loss_batching,
    speeches,
)
from perflab.lessons.nb09_training_step.data import (
    CPU_DATA_PATHS,
    DATA_PATHS,
    ByteTokenizer,
    data_path_steps,
    read_corpus,
)
from perflab.lessons.nb09_training_step.head_memory import (
    chunk_size_sweep,
    compare_with_torch_head,
    head_peak_memory,
)
from perflab.lessons.nb09_training_step.ladder_traces import bound_sentence, greedy_bound_table
from perflab.lessons.nb09_training_step.sharded_step import sharded_step_row
from perflab.lessons.nb09_training_step.step_model import (
    B200,
    Efficiency,
    StepPlan,
    price_rungs_at,
    rung_findings,
    step_ops,
    time_by_part,
)
from perflab.measure.comparison import paired_table
from perflab.measure.conclusions import conclude, conclude_all
from perflab.measure.device import parse_dtype
from perflab.measure.hardware import HANDOUT_B200
from perflab.measure.paths import listing
from perflab.measure.peak import measure_peak_matmul
from perflab.training import default_chunk_size
from perflab.training.ladder import (
    BASELINE,
    TrainingStep,
    greedy_ladder,
    kv_heads_against_mha,
    stack_against_baseline,
)
from perflab.training.step_profile import (
    accumulation_table,
    batch_size_table,
    step_memory,
    step_phases,
)

__all__ = [
    "B200",
    "BASELINE",
    "BenchConfig",
    "ByteTokenizer",
    "CPU_DATA_PATHS",
    "DATA_PATHS",
    "Efficiency",
    "HANDOUT_B200",
    "Recipe",
    "StepPlan",
    "TrainingStep",
    "build_model",
    "accumulation_table",
    "batch_size_table",
    "bound_sentence",
    "check_bucketing",
    "check_loss_batching",
    "chunk_size_sweep",
    "compare_bucketing",
    "compare_loss_batching",
    "compare_with_torch_head",
    "conclude",
    "conclude_all",
    "data_path_steps",
    "default_chunk_size",
    "get_preset",
    "greedy_bound_table",
    "greedy_ladder",
    "head_peak_memory",
    "kv_heads_against_mha",
    "listing",
    "measure_peak_matmul",
    "open_notebook",
    "paired_table",
    "parse_dtype",
    "price_rungs_at",
    "read_corpus",
    "rung_findings",
    "say",
    "sharded_step_row",
    "speeches",
    "stack_against_baseline",
    "step_memory",
    "step_ops",
    "step_phases",
    "time_by_part",
]
