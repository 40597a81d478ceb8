"""Hotspot analysis of any Chrome/Kineto trace, and the comparison of two traces.

``kernel_hotspots`` sums the durations of device kernels (``cat == "kernel"``, ``ph == "X"``)
per name, gives each its share of the total kernel time and a category; ``compare_traces``
puts a baseline and an optimized trace side by side and computes a verdict from the numbers.
A trace without kernels (a CPU run) falls back to CPU operators' self time, labelled in the
``source`` column. Used by notebook 02 and ``perflab hotspots``.

Categories, by the first rule that matches the lower-cased kernel name:

1. **Inductor's generated kernels by their kind prefix** (``torch._inductor`` names a Triton
   kernel ``triton_<kind>_fused_<ops>_<n>``): ``triton_poi_`` (pointwise), ``triton_red_``
   (reduction), ``triton_per_`` (persistent reduction), ``triton_for_`` (foreach) are
   **memory-bound** even when the fused ops are named ``addmm`` or ``mm``: the matmul itself
   runs as an extern GEMM beside them; ``triton_tem_`` (a matmul template) is
   **compute-bound**.
2. **communication**: names of NCCL, Gloo and c10d only (``nccl``, ``gloo``, ``c10d``,
   ``record_param_comms``), so that ``aten::broadcast_to`` is not a collective.
3. **other**: ATen view operators (``aten::view``, ``aten::broadcast_to``, ``aten::t`` ...),
   which only rewrite shape and strides and launch no kernel.
4. **memory-bound**: split-K reductions of GEMM partial results (``splitKreduce``,
   ``ReduceSplitK``), though cuBLAS and CUTLASS name them.
5. **compute-bound**: dense matrix products and what is built from them: ``gemm``,
   ``matmul``, the ATen ops ``mm`` / ``bmm`` / ``addmm`` / ``baddbmm`` / ``linear`` as whole
   words, ``conv`` (not ``convert``), cuDNN's ``scudnn``, ``cutlass``, ``cublas``,
   ``xmma`` / ``wgmma`` / ``hmma``, Hopper cuBLAS's ``nvjet``, fused attention (``flash``,
   the workbook's ``_flash_*_kernel`` included, ``fmha``, ``attention``,
   ``scaled_dot_product``).
6. **memory-bound**: work that moves each byte a few times: elementwise and vectorized
   kernels, reductions, copies and fills, layout changes (``nchw``/``nhwc``, transpose,
   ``cat``), normalisation (``norm``, ``bn_``), softmax, embedding, index/gather/scatter,
   optimizer updates (``adam``, ``sgd``, ``foreach``), activations and arithmetic
   (``add``, ``mul``, ``exp``, ``sqrt`` ...), the workbook's weighted sum.
7. **other**: none of the above.

``tests/test_profiling.py`` checks the rules on kernel names gathered from public traces and
reports, each with its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perflab.measure.stats import rounded
from perflab.measure.trace import (
    DEVICE_KERNELS,
    KERNEL,
    Trace,
    load_trace,
    timed_events,
)

CATEGORIES = ("communication", "compute-bound", "memory-bound", "other")

_VIEW_OPS = (
    "view|_unsafe_view|reshape|_reshape_alias|expand|expand_as|broadcast_to|as_strided"
    "|t|transpose|permute|unsqueeze|squeeze|slice|select|split|chunk|narrow|detach"
    "|alias|flatten|unflatten|unbind"
)
_RULES = [
    ("memory-bound", r"^triton_(poi|red|per|for)_"),
    ("compute-bound", r"^triton_tem_"),
    ("communication", r"nccl|gloo|c10d|record_param_comms"),
    ("other", rf"^aten::({_VIEW_OPS})$"),
    ("memory-bound", r"split_?k_?reduce|reduce_?split_?k"),
    (
        "compute-bound",
        r"gemm|matmul|(?<![a-z])(mm|bmm|addmm|baddbmm|linear)(?![a-z])"
        r"|conv(?!ert)|scudnn|cutlass|cublas|[xwh]mma|nvjet|flash|fmha|attention"
        r"|scaled_dot_product",
    ),
    (
        "memory-bound",
        r"elementwise|vectorized|reduce|reduction|copy|memcpy|memset|fill"
        r"|nchw|nhwc|transpose|permute|contiguous|(?<![a-z])cat(?![a-z])"
        r"|norm|bn_|softmax|embedding|index|gather|scatter|adam|sgd|foreach"
        r"|relu|gelu|silu|sigmoid|tanh|threshold|clamp|dropout|where|add|mul|div"
        r"|sub|exp|log|sqrt|pow|neg|abs|sum|mean",
    ),
]
_COMPILED = [(category, re.compile(pattern)) for category, pattern in _RULES]


def classify(name: str) -> str:
    """The category of a kernel or operator name, by the rules in this module's docstring."""
    lowered = name.lower()
    for category, pattern in _COMPILED:
        if pattern.search(lowered):
            return category
    return "other"


def short_name(name: str, width: int = 90) -> str:
    """A kernel name for tables: without 'void ' and its argument list, at most ``width``."""
    name = name.removeprefix("void ")
    if name.endswith(")") and "(" in name:
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i] if i > 0 else name
                break
    return name if len(name) <= width else name[: width - 1] + "…"


def _as_trace(trace: Trace | str | Path) -> Trace:
    return trace if isinstance(trace, Trace) else load_trace(trace)


def kernel_hotspots(trace_path: Trace | str | Path, top: int | None = None) -> pd.DataFrame:
    """Per-name kernel time of a trace, largest first.

    Columns: name, category, instances, total_us, share (of the total kernel time, 0..1),
    avg_us, source. ``top`` keeps the first ``top`` rows (shares stay those of the whole).
    """
    if top is not None and top < 1:
        raise ValueError(f"top must be a positive number of rows, got {top}")
    events, source = timed_events(_as_trace(trace_path))
    grouped = events.groupby("name")["us"]
    table = pd.DataFrame({"instances": grouped.size(), "total_us": grouped.sum()}).reset_index()
    table["share"] = table["total_us"] / table["total_us"].sum()
    table["avg_us"] = table["total_us"] / table["instances"]
    table.insert(1, "category", table["name"].map(classify))
    table["source"] = source
    table = table.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    return table.head(top) if top is not None else table


def shares_by_category(names: pd.Series, durations: pd.Series) -> pd.Series:
    """Share of the total duration per category of ``names`` (all four, zeros included)."""
    totals = durations.groupby(names.map(classify).to_numpy()).sum()
    return (totals / durations.sum()).reindex(list(CATEGORIES), fill_value=0.0)


def category_shares(hotspots: pd.DataFrame) -> pd.Series:
    """Share of the total kernel time per category of a ``kernel_hotspots`` table."""
    return shares_by_category(hotspots["name"], hotspots["total_us"])


def busy_fraction(trace: Trace) -> float:
    """Share of the traced span (first kernel start to last kernel end) during which at least
    one kernel runs: the union of kernel intervals over the span. Low means the device waits
    (on the host, data loading, synchronisation) and faster kernels will not help much."""
    kernels = trace.of(KERNEL)
    if kernels.empty:
        raise ValueError(f"{trace.path.name} has no device kernels")
    starts = kernels["ts"].to_numpy()
    order = np.argsort(starts)
    starts, ends = starts[order], (kernels["ts"] + kernels["dur"]).to_numpy()[order]
    running_end = np.maximum.accumulate(ends)
    # A new busy interval starts wherever a kernel starts after every earlier kernel ended.
    gaps = np.clip(starts[1:] - running_end[:-1], 0, None).sum()
    span = running_end[-1] - starts[0]
    return float((span - gaps) / span) if span > 0 else 1.0


@dataclass(frozen=True)
class TraceComparison:
    """A baseline trace against an optimized one."""

    kernels: pd.DataFrame  # name, category, baseline_us, optimized_us, delta_us, delta_pct
    categories: pd.DataFrame  # category, baseline_us/_share, optimized_us/_share
    baseline_total_us: float
    optimized_total_us: float
    baseline_busy: float | None  # busy_fraction, device traces only
    optimized_busy: float | None
    source: str
    verdict: str

    @property
    def speedup(self) -> float:
        """Baseline kernel time over optimized kernel time."""
        return self.baseline_total_us / self.optimized_total_us


def _verdict(
    categories: pd.DataFrame,
    base_total: float,
    opt_total: float,
    base_busy: float | None,
    opt_busy: float | None,
    unit: str,
) -> str:
    change = (opt_total - base_total) / base_total
    lines = [
        f"Total {unit} time went {base_total / 1e3:.2f} ms -> {opt_total / 1e3:.2f} ms "
        f"({change:+.1%}; one trace each, so no change is established without interleaved runs)."
    ]
    by_category = categories.set_index("category")
    before = by_category["baseline_share"].idxmax()
    after = by_category["optimized_share"].idxmax()
    lines.append(
        f"{before} held the largest share before "
        f"({by_category.loc[before, 'baseline_share']:.0%}); "
        f"{after} after ({by_category.loc[after, 'optimized_share']:.0%})."
    )
    comm = by_category.loc["communication", "optimized_share"]
    if comm >= 0.2:
        lines.append(
            f"Communication holds {comm:.0%} of {unit} time after: were its time to stay, "
            f"faster compute alone could give at most {rounded(1 / comm, 1, 'up')}x (Amdahl)."
        )
    if opt_busy is not None and opt_busy < 0.8:
        lines.append(
            f"The device runs a kernel during {opt_busy:.0%} of the traced span after the change "
            f"({base_busy:.0%} before); what fills the rest (the host, data loading, "
            "synchronisation) is not told apart in a kernel trace."
        )
    return " ".join(lines)


def compare_traces(
    baseline_path: Trace | str | Path, optimized_path: Trace | str | Path
) -> TraceComparison:
    """Per-kernel and per-category deltas between two traces, and a verdict from the numbers."""
    baseline, optimized = _as_trace(baseline_path), _as_trace(optimized_path)
    base, opt = kernel_hotspots(baseline), kernel_hotspots(optimized)
    if base["source"].iloc[0] != opt["source"].iloc[0]:
        raise ValueError(
            f"cannot compare {baseline.path.name} ({base['source'].iloc[0]}) with "
            f"{optimized.path.name} ({opt['source'].iloc[0]})"
        )
    source = base["source"].iloc[0]
    kernels = pd.merge(
        base[["name", "category", "total_us"]].rename(columns={"total_us": "baseline_us"}),
        opt[["name", "category", "total_us"]].rename(columns={"total_us": "optimized_us"}),
        on=["name", "category"],
        how="outer",
    ).fillna({"baseline_us": 0.0, "optimized_us": 0.0})
    kernels["delta_us"] = kernels["optimized_us"] - kernels["baseline_us"]
    kernels["delta_pct"] = 100 * kernels["delta_us"] / kernels["baseline_us"].replace(0, np.nan)
    kernels = kernels.sort_values("delta_us", key=np.abs, ascending=False).reset_index(drop=True)

    categories = (
        pd.DataFrame(
            {
                "baseline_us": base.groupby("category")["total_us"].sum(),
                "optimized_us": opt.groupby("category")["total_us"].sum(),
            }
        )
        .reindex(list(CATEGORIES), fill_value=0.0)
        .fillna(0.0)
    )
    categories["baseline_share"] = categories["baseline_us"] / categories["baseline_us"].sum()
    categories["optimized_share"] = categories["optimized_us"] / categories["optimized_us"].sum()
    categories = categories.rename_axis("category").reset_index()

    base_total, opt_total = float(base["total_us"].sum()), float(opt["total_us"].sum())
    devices = source == DEVICE_KERNELS
    base_busy = busy_fraction(baseline) if devices else None
    opt_busy = busy_fraction(optimized) if devices else None
    unit = "kernel" if devices else "CPU operator"
    verdict = _verdict(categories, base_total, opt_total, base_busy, opt_busy, unit)
    return TraceComparison(
        kernels, categories, base_total, opt_total, base_busy, opt_busy, source, verdict
    )
