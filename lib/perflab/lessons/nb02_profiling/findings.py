"""What notebook 02's profiles say, as sentences computed from their numbers.

Each function reads what ``perflab.profiling`` returned (kernel summaries, range totals, the
attention's time against its FLOPs, a real trace, a pair of traces, LayerNorm's counts and
times, the copies of a step) and returns the lines the notebook prints; they are tested
on small frames (``tests/test_profiling_findings.py``).
"""

from __future__ import annotations

import pandas as pd

from perflab.implementations.model import ModelConfig
from perflab.measure.hotspots import TraceComparison, short_name
from perflab.measure.stats import level_text
from perflab.measure.summary import KernelSummary


def timer_line(forward_range, timer_row: dict) -> str:
    """The profiler's forward time per step (``range_totals`` of the ``forward`` ranges)
    against the timer's median and its interval."""
    profiled_ms = forward_range.total_us / forward_range.instances / 1e3
    median_ms = timer_row["median_s"] * 1e3
    low, high = timer_row["median_ci_low_s"] * 1e3, timer_row["median_ci_high_s"] * 1e3
    return (
        f"forward per step: profiler {profiled_ms:.1f} ms ({forward_range.instances} ranges), "
        f"timer {median_ms:.1f} ms ({level_text(timer_row['median_ci_level'])} CI "
        f"{low:.1f}–{high:.1f} ms): "
        + (
            "the profiler's figure lies inside the timer's interval"
            if low <= profiled_ms <= high
            else f"the profiler's figure is {profiled_ms / median_ms:.2f}x the timer's"
        )
        + " (one profiled figure against a median's interval: the profiler's own cost and the "
        "machine's noise are not told apart)"
    )


def dominant_line(forward: KernelSummary, steps: int, config: ModelConfig) -> str:
    """The forward's top kernel, its share and its calls per step, against the model's count of
    weight matmuls."""
    first = forward.table.iloc[0]
    weights = config.num_layers * 5 + 1
    return (
        f"{first['Name']} dominates the forward pass: {first['Time (%)']:.1f}% of its time in "
        f"{first['Instances']} calls over {steps} steps ({first['Instances'] / steps:.0f} per "
        f"step; the model's forward has {config.num_layers} layers x 5 weight matmuls (fused "
        f"QKV, output, three SwiGLU) + 1 LM head = {weights}, plus the two attention products "
        "per layer)"
    )


def training_only_line(forward: KernelSummary, step: KernelSummary) -> str:
    """The non-matmul kernels of at least 1% that only the training step has."""
    seen = set(forward.not_matmul(at_least=1.0)["Name"])
    added = step.not_matmul(at_least=1.0)
    added = added[~added["Name"].isin(seen)]
    listed = ", ".join(
        f"{name} {share:.1f}%" for name, share in zip(added["Name"], added["Time (%)"], strict=True)
    )
    return "only in the training step: " + (listed or "nothing above 1%")


def category_frame(forward: KernelSummary, step: KernelSummary) -> pd.DataFrame:
    """The share of each category in the forward pass and in the training step."""
    return pd.DataFrame(
        {"forward": forward.category_shares(), "training step": step.category_shares()}
    )


def matmul_share_line(shares: pd.DataFrame) -> str:
    """The compute-bound share of the forward and of the training step."""
    return (
        f"matmuls (compute-bound) hold {shares.loc['compute-bound', 'forward']:.1%} of the "
        f"forward pass and {shares.loc['compute-bound', 'training step']:.1%} of the training step"
    )


def softmax_lines(attention: pd.DataFrame, copy, score_bytes: float) -> list[str]:
    """Softmax against the attention matmuls (``attention_time_vs_flops``): time against FLOPs,
    then its bytes per second (``score_bytes`` a call: the scores read, the probabilities
    written) against the copy bandwidth; what sets its time is not measured, and not claimed."""
    by = attention.set_index("range")
    soft = by.loc["attention/softmax"]
    matmul = by.loc[["attention/scores", "attention/weighted_sum"]]
    time_ratio = soft["total_us"] / matmul["total_us"].sum()
    flop_ratio = soft["flops"] / matmul["flops"].sum()
    per_flop = time_ratio / flop_ratio
    rate = score_bytes * soft["instances"] / (soft["total_us"] * 1e-6)
    fraction = rate / copy.bytes_per_s
    bound = (
        "a kernel bound by memory traffic alone would move about as much as the copy; what "
        "sets softmax's time here (its passes over the scores, its per-operator overhead) is "
        "not measured (one profiled run)"
    )
    return [
        f"softmax takes {time_ratio:.2f}x the time of the two attention matmuls for "
        f"{flop_ratio:.3f}x their FLOPs: per FLOP it takes {per_flop:.0f}x their time (one "
        "profiled run)",
        f"softmax moves {rate / 1e9:.1f} GB/s, {fraction:.0%} of the copy bandwidth "
        f"({copy.bytes_per_s / 1e9:.1f} GB/s, the best of {copy.steps} copies; the median copy "
        f"{copy.median_bytes_per_s / 1e9:.1f} GB/s): {bound}",
    ]


def real_trace_lines(real: pd.DataFrame, shares: pd.Series, busy: float) -> list[str]:
    """A real trace's hotspots (``kernel_hotspots``): names, launches and time, its top
    kernel, the categories' shares and the time the GPU is busy."""
    return [
        f"{len(real)} kernel names, {real['instances'].sum()} launches, "
        f"{real['total_us'].sum() / 1e3:.1f} ms of kernel time",
        f"top kernel: {short_name(real['name'].iloc[0])} ({real['share'].iloc[0]:.1%})",
        ", ".join(f"{c} {s:.1%}" for c, s in shares.items()),
        f"the GPU runs a kernel during {busy:.1%} of the traced span",
    ]


def trace_change_lines(comparison: TraceComparison) -> list[str]:
    """One pair of traces (``compare_traces``): the totals (one trace each: no change claimed),
    the rest of the verdict, and the move of the largest kernel in both traces (where the
    change leaves its work the same, the yardstick of run-to-run noise)."""
    change = comparison.optimized_total_us / comparison.baseline_total_us - 1
    totals = (
        f"{comparison.baseline_total_us / 1e3:.2f} ms -> "
        f"{comparison.optimized_total_us / 1e3:.2f} ms"
    )
    total = (
        f"The total time went {totals} ({change:+.1%}) in this one pair of traces: one trace "
        "each, not interleaved rounds, so no change is established from it (an interleaved "
        "comparison of the two would say whether one is faster)."
    )
    kernels = comparison.kernels
    both = kernels[(kernels["baseline_us"] > 0) & (kernels["optimized_us"] > 0)]
    lines = [total, comparison.verdict.partition(". ")[2]]
    if len(both):
        largest = both.loc[both["baseline_us"].idxmax()]
        lines.append(
            f"{short_name(largest['name'])}, the largest kernel in both traces, moved by "
            f"{largest['delta_pct']:+.1f}%: where the change leaves its work the same, a delta "
            "of this size can come from run-to-run noise alone; with one trace each, no delta in "
            "this table, larger or smaller, is a tested change"
        )
    return lines


def layer_norm_exact_line(exact: pd.DataFrame, ways) -> str:
    """Whether every way of ``ways`` matched ``F.layer_norm`` in float64 to 1e-12 and stayed
    float64 (``check_layer_norms``)."""
    ours = exact[exact["way"].isin(list(ways))]
    columns = ["output_error", "grad_x_error", "grad_weight_error", "grad_bias_error"]
    worst = ours[columns].max().max()
    return (
        "every way within 1e-12 of F.layer_norm in float64 (output and the gradients of x, "
        f"weight and bias): {bool(worst <= 1e-12)}; outputs float64: "
        f"{set(ours['out_dtype']) == {'float64'}}"
    )


def reduction_line(counts: pd.DataFrame) -> str:
    """What one pass and the hand-written backward remove (``reduction_counts``)."""
    by = counts.set_index("way")
    fewer = by.loc["mean, then var", "reduction_calls"] - by.loc["var_mean", "reduction_calls"]
    calls = by.loc["var_mean", "operator_calls"]
    saved = calls - by.loc["var_mean, own backward", "operator_calls"]
    return (
        f"one pass: {fewer} reduction fewer; the hand-written backward: {saved} of {calls} "
        f"operator calls fewer; F.layer_norm: {by.loc['F.layer_norm', 'operator_calls']} calls "
        "in all"
    )


def statistics_line(stats: pd.DataFrame, tokens: int, width: int, device_type: str) -> str:
    """The statistics' times (``statistics_times``): the variance's median against the mean's
    and var_mean's against the variance's (all three read the same bytes), and the two
    statistics' medians apart, of which one pass merges one. Separate medians, not interleaved:
    no difference and no cause is claimed; nothing where a timing is unstable."""
    if stats["unstable"].any():
        return "a statistic's timing is unstable: no share is drawn from it"
    median = stats.set_index("statistic")["median_s"]
    ratio = median["var"] / median["mean"]
    both = median["mean"] + median["var"]
    return (
        f"{tokens} x {width} float32 on {device_type}: x.var's median is {ratio:.1f}x x.mean's "
        f"and var_mean's {median['var_mean'] / median['var']:.2f}x x.var's, though all three "
        f"read the same bytes. One pass merges one of the two reductions: x.mean "
        f"{median['mean'] * 1e3:.2f} ms and x.var {median['var'] * 1e3:.2f} ms of the "
        f"{both * 1e3:.2f} ms they take apart. Separate medians, not interleaved: whether one "
        "statistic costs more than another, and why, is not tested here."
    )


def mask_copy_sentence(copies: pd.DataFrame, mask_row: dict, sentence: str) -> str:
    """All copies of the step (``copy_sites``), masked_fill's in the forward (the most writing
    the mask in place can save), and the in-place step's check and timed ``sentence``."""
    masked = copies[copies["made_by"].str.contains("masked_fill")].set_index("phase")
    forward = masked.loc[["forward"]] if "forward" in masked.index else masked.iloc[:0]
    backward_calls = int(masked.loc[masked.index != "forward", "calls"].sum())
    return (
        f"all copies: {copies['time_ms'].sum():.1f} ms, {copies['share_of_step'].sum():.1%} of "
        f"the step's operator time, in {copies['calls'].sum()} calls; masked_fill's in the "
        f"forward pass: {forward['time_ms'].sum():.2f} ms ({forward['share_of_step'].sum():.1%}, "
        f"{int(forward['calls'].sum())} calls; one profiled step), about what writing the mask "
        "in place could save in it (its backward masks the gradient out of place either way: "
        f"{backward_calls} more calls). "
        f"The same loss and gradients in place: {mask_row['same_loss_and_gradients']}. "
        f"Measured: {sentence}"
    )
