"""The handout's profiling questions (nsys_profile a-e) answered for each model size and context.

Notebook 02 answers them from one trace; the handout asks for them per model size and context,
so ``profile_grid`` records one trace per configuration (the annotated attention, so softmax
and the two attention matmuls are ranges of their own) and ``profile_answers`` reads the same
answers from each: the forward pass's time as the profiler and the timer see it (a), the
kernel (on a CPU, the operator) that dominates the forward pass and whether it also dominates
the training step (b), what else takes 1% or more of the forward pass (c), the matmul share of
both (d), and softmax's time against its FLOPs (e). On a GPU the
names are CUDA kernels and the times their device time; on a CPU, operators and their spans.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

from perflab.bench.steps import BenchConfig, run_benchmark
from perflab.lessons.nb02_profiling.step_trace import attention_time_vs_flops, record_step_trace
from perflab.measure.progress import progress
from perflab.measure.summary import kernel_summary, range_totals
from perflab.measure.trace import Trace, load_trace


def profile_answers(trace: Trace, config: BenchConfig) -> dict:
    """The questions of notebook 02's section 3, read from a trace of ``config.steps`` training
    steps of ``config`` (recorded with the annotated attention)."""
    model = config.model_config()
    forward, step = kernel_summary(trace, "forward"), kernel_summary(trace, "step")
    forward_range = range_totals(trace, ["forward"]).iloc[0]
    top_forward, top_step = forward.table.iloc[0], step.table.iloc[0]
    attention = attention_time_vs_flops(
        trace, config.batch_size, model.num_heads, config.context_length, model.head_dim
    ).set_index("range")
    others = forward.not_matmul()
    softmax = attention.loc["attention/softmax"]
    matmuls = attention.loc[["attention/scores", "attention/weighted_sum"]]
    return {
        "source": forward.source,
        "forward_profiler_ms": forward_range.total_us / forward_range.instances / 1e3,
        "top_forward": top_forward["Name"],
        "top_forward_share": top_forward["Time (%)"] / 100,
        "top_forward_calls_per_step": top_forward["Instances"] / config.steps,
        "top_step": top_step["Name"],
        "top_step_share": top_step["Time (%)"] / 100,
        "same_top": top_forward["Name"] == top_step["Name"],
        "others_forward": "; ".join(
            f"{name} {share:.1f}%"
            for name, share in zip(others["Name"], others["Time (%)"], strict=True)
        ),
        "others_count": len(others),
        "matmul_share_forward": forward.category_shares()["compute-bound"],
        "matmul_share_step": step.category_shares()["compute-bound"],
        "softmax_over_matmul_time": softmax["total_us"] / matmuls["total_us"].sum(),
        "softmax_over_matmul_flops": softmax["flops"] / matmuls["flops"].sum(),
    }


def profile_grid(
    presets: list[str],
    seq_lens: list[int],
    batch_size: int = 4,
    warmup: int = 2,
    steps: int = 2,
    timer_steps: int = 6,
    device: str = "cpu",
) -> pd.DataFrame:
    """One row of ``profile_answers`` per preset and context, beside the timer's median of
    ``timer_steps`` forward passes of the same model (with its interval and stability flag).
    The traces are written to a temporary directory and not kept."""
    if not presets or not seq_lens:
        raise ValueError("profile_grid needs at least one preset and one sequence length")
    rows = []
    configs = [(p, n) for p in presets for n in seq_lens]
    with tempfile.TemporaryDirectory() as tmp:
        for preset, seq_len in progress(configs, desc="profiled configurations"):
            config = BenchConfig(
                preset=preset,
                context_length=seq_len,
                mode="train-step",
                batch_size=batch_size,
                warmup=warmup,
                steps=steps,
                device=device,
            )
            path = record_step_trace(Path(tmp) / f"{preset}-{seq_len}.json", config, "annotated")
            answers = profile_answers(load_trace(path), config)
            timer, _ = run_benchmark(replace(config, mode="forward", steps=timer_steps))
            rows.append(
                {
                    "preset": preset,
                    "seq_len": seq_len,
                    "batch_size": batch_size,
                    **answers,
                    "forward_timer_ms": timer["median_s"] * 1e3,
                    "forward_timer_ci_low_ms": timer["median_ci_low_s"] * 1e3,
                    "forward_timer_ci_high_ms": timer["median_ci_high_s"] * 1e3,
                    "forward_timer_ci_level": timer["median_ci_level"],
                    "forward_timer_unstable": timer["unstable"],
                }
            )
    return pd.DataFrame(rows)


def _span(values: pd.Series, digits: int = 2) -> str:
    low, high = f"{values.min():.{digits}f}", f"{values.max():.{digits}f}"
    return f"{low}x" if low == high else f"{low}x to {high}x"


def grid_answers(grid: pd.DataFrame) -> list[str]:
    """Notebook 02's answers (a) to (e), read from ``profile_grid``'s rows: (a) the
    profiler's forward time against the timer's median (and how often it lies inside the
    timer's interval: a count, not a test; one profiled figure, measured apart from the timer,
    tells neither a profiler's cost nor the machine's noise), (b) the top operator and whether
    it also tops the step, (c) the other operators above 1%, (d) the matmul share of forward
    and step (one profile each: no direction tested), (e) softmax's time against its FLOPs."""
    low, high = grid["forward_timer_ci_low_ms"], grid["forward_timer_ci_high_ms"]
    profiled = grid["forward_profiler_ms"]
    inside = (profiled >= low) & (profiled <= high)
    ratio = profiled / grid["forward_timer_ms"]
    answers = [
        f"(a) the profiler's forward time is {_span(ratio)} the timer's median, inside the "
        f"timer's interval in {inside.sum()} of {len(grid)} configurations; each is one "
        "profiled figure measured apart from the timer, so whether profiling changes the time "
        "is not tested here (the profiler's cost and the machine's noise between the two are "
        "not told apart)"
    ]
    tops = grid.groupby("top_forward").size().sort_values(ascending=False)
    answers.append(
        "(b) the forward pass's top operator: "
        + ", ".join(f"{name} in {count}" for name, count in tops.items())
        + f" of {len(grid)}; the same one tops the training step in "
        f"{grid['same_top'].sum()}"
    )
    common = pd.Series(
        [
            name.rsplit(" ", 1)[0]
            for names in grid["others_forward"]
            for name in names.split("; ")
            if name
        ]
    ).value_counts()
    answers.append(
        f"(c) besides matmuls, {grid['others_count'].min()} to "
        f"{grid['others_count'].max()} operators take 1% or more of the forward pass "
        "per configuration; the most common: "
        + (", ".join(f"{name} (in {count})" for name, count in common.head(4).items()) or "none")
    )
    lower = grid["matmul_share_step"] < grid["matmul_share_forward"]
    answers.append(
        f"(d) matmuls hold {grid['matmul_share_forward'].min():.0%}-"
        f"{grid['matmul_share_forward'].max():.0%} of the forward pass and "
        f"{grid['matmul_share_step'].min():.0%}-{grid['matmul_share_step'].max():.0%} "
        f"of the training step across configurations, less of the step in {lower.sum()} of "
        f"{len(grid)}; one profile of each, no interval: a direction seen, not a tested one"
    )
    per_flop = grid["softmax_over_matmul_time"] / grid["softmax_over_matmul_flops"]
    answers.append(
        f"(e) softmax takes {_span(grid['softmax_over_matmul_time'])} the attention "
        f"matmuls' time for {_span(grid['softmax_over_matmul_flops'], 3)} their FLOPs "
        f"(5 / 4d, d the head dimension): per FLOP it takes {_span(per_flop, 0)} the matmuls' "
        "time (one profile of each)"
    )
    return answers
