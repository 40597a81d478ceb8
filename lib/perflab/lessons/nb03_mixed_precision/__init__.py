"""The front door of notebook 03, "Mixed precision: what low precision costs, and what it buys". The
names `notebooks/03_mixed_precision.ipynb` uses from the library, each imported from where it lives
(open that module for its source). This package also holds the experiments that this notebook alone
runs (``loss_scaling``, ``precision``).
"""

from perflab.bench.steps import bf16_against_fp32
from perflab.implementations.model import get_preset
from perflab.lessons import open_notebook
from perflab.lessons.nb03_mixed_precision.loss_scaling import (
    byte_vocabulary,
    scaler_lines,
    train_with_scaler,
    underflow_lines,
    underflow_table,
)
from perflab.lessons.nb03_mixed_precision.precision import (
    ToyModel,
    accumulation_experiment,
    accumulation_sentence,
    audit_lines,
    dtype_audit,
    layernorm_sensitivity,
    sensitivity_line,
)
from perflab.measure.comparison import comparison_frame
from perflab.measure.conclusions import Finding, conclude_all
from perflab.measure.paths import listing
from perflab.plots.bench import plot_comparisons

__all__ = [
    "Finding",
    "ToyModel",
    "accumulation_experiment",
    "accumulation_sentence",
    "audit_lines",
    "bf16_against_fp32",
    "byte_vocabulary",
    "comparison_frame",
    "conclude_all",
    "dtype_audit",
    "get_preset",
    "layernorm_sensitivity",
    "listing",
    "open_notebook",
    "plot_comparisons",
    "scaler_lines",
    "sensitivity_line",
    "train_with_scaler",
    "underflow_lines",
    "underflow_table",
]
