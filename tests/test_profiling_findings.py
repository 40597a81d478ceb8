"""Notebook 02's sentences (``perflab.lessons.nb02_profiling.findings``) on small tables made by
hand: each states the numbers it was given, and each branch is taken."""

from types import SimpleNamespace

import pandas as pd
import pytest

from perflab.implementations.model import get_preset
from perflab.lessons.nb02_profiling import findings as say
from perflab.measure.hotspots import TraceComparison
from perflab.measure.summary import KernelSummary, summarize_durations

TINY = get_preset("cpu-tiny")


def summary(times_ns: dict[str, list[int]]) -> KernelSummary:
    names = pd.Series([name for name, times in times_ns.items() for _ in times])
    durations = pd.Series([t for times in times_ns.values() for t in times])
    return KernelSummary(summarize_durations(names, durations), "cpu operators", None)


@pytest.mark.parametrize("profiled_us, inside", [(10_500, True), (14_000, False)])
def test_timer_line_says_whether_the_profile_lies_in_the_interval(profiled_us, inside):
    forward = SimpleNamespace(total_us=2 * profiled_us, instances=2)
    timer = {
        "median_s": 0.010,
        "median_ci_low_s": 0.009,
        "median_ci_high_s": 0.011,
        "median_ci_level": 0.968,
    }
    line = say.timer_line(forward, timer)
    assert line.startswith(f"forward per step: profiler {profiled_us / 1e3:.1f} ms (2 ranges)")
    assert ("inside the timer's interval" in line) == inside
    assert inside or "the profiler's figure is 1.40x the timer's (one profiled figure" in line
    assert line.endswith("the profiler's own cost and the machine's noise are not told apart)")


def test_kernel_summary_lines():
    forward = summary({"aten::mm": [500] * 6, "aten::softmax": [300] * 2, "aten::add": [10]})
    step = summary({"aten::mm": [500] * 12, "aten::_foreach_mul_": [900] * 2})
    line = say.dominant_line(forward, 2, TINY)
    assert line.startswith("aten::mm dominates the forward pass: ")
    assert "in 6 calls over 2 steps (3 per step" in line
    assert f"= {TINY.num_layers * 5 + 1}, plus the two" in line
    assert say.training_only_line(forward, step).startswith(
        "only in the training step: aten::_foreach_mul_"
    )
    assert say.training_only_line(forward, forward) == "only in the training step: nothing above 1%"
    shares = say.category_frame(forward, step)
    assert "matmuls (compute-bound) hold" in say.matmul_share_line(shares)


@pytest.mark.parametrize("softmax_us", [10.0, 1000.0])
def test_softmax_lines_place_it_against_the_copy_bandwidth_and_claim_no_bound(softmax_us):
    attention = pd.DataFrame(
        {
            "range": ["attention/scores", "attention/softmax", "attention/weighted_sum"],
            "total_us": [100.0, softmax_us, 100.0],
            "flops": [1e9, 1e7, 1e9],
            "instances": [1, 1, 1],
        }
    )
    copy = SimpleNamespace(bytes_per_s=1e11, median_bytes_per_s=9e10, steps=5)
    ratio, bandwidth = say.softmax_lines(attention, copy, score_bytes=1e6)
    assert ratio.startswith(f"softmax takes {softmax_us / 200:.2f}x the time")
    rate = 1e6 / (softmax_us * 1e-6)
    assert bandwidth.startswith(f"softmax moves {rate / 1e9:.1f} GB/s, {rate / 1e11:.0%} of the")
    assert "not measured" in bandwidth and " so " not in bandwidth


def comparison(baseline_total, optimized_total):
    kernels = pd.DataFrame(
        {
            "name": ["aten::mm", "aten::softmax", "flash"],
            "baseline_us": [600.0, 400.0, 0.0],
            "optimized_us": [612.0, 0.0, 300.0],
            "delta_pct": [2.0, -100.0, float("inf")],
        }
    )
    return TraceComparison(
        kernels,
        pd.DataFrame(),
        baseline_total,
        optimized_total,
        None,
        None,
        "cpu",
        "Faster. Memory-bound time fell.",
    )


def test_trace_change_lines_claim_no_change_from_one_pair_of_traces():
    same, rest, noise = say.trace_change_lines(comparison(1000.0, 1010.0))
    assert same.startswith("The total time went 1.00 ms -> 1.01 ms (+1.0%) in this one pair")
    assert rest == "Memory-bound time fell."
    assert noise.startswith("aten::mm, the largest kernel in both traces, moved by +2.0%")
    fell = say.trace_change_lines(comparison(1000.0, 800.0))[0]
    assert fell.startswith("The total time went 1.00 ms -> 0.80 ms (-20.0%)")
    assert "no change is established" in fell and "fell" not in fell
    apart = comparison(1000.0, 800.0)
    apart.kernels["optimized_us"] = [0.0, 0.0, 300.0]  # no kernel in both traces
    assert len(say.trace_change_lines(apart)) == 2


def test_layer_norm_lines():
    exact = pd.DataFrame(
        {
            "way": ["ours", "ours, fused", "F.layer_norm"],
            "output_error": [1e-15, 1e-14, 0.0],
            "grad_x_error": [1e-15, 2e-13, 0.0],
            "grad_weight_error": [0.0, 0.0, 0.0],
            "grad_bias_error": [0.0, 0.0, 0.0],
            "out_dtype": ["float64", "float64", "float64"],
        }
    )
    assert say.layer_norm_exact_line(exact, ["ours", "ours, fused"]).endswith(
        "(output and the gradients of x, weight and bias): True; outputs float64: True"
    )
    off = exact.assign(grad_x_error=[1e-15, 1e-9, 0.0], out_dtype=["float64", "float32", "x"])
    assert say.layer_norm_exact_line(off, ["ours", "ours, fused"]).endswith(
        ": False; outputs float64: False"
    )
    counts = pd.DataFrame(
        {
            "way": ["mean, then var", "var_mean", "var_mean, own backward", "F.layer_norm"],
            "reduction_calls": [6, 5, 5, 2],
            "operator_calls": [40, 38, 20, 4],
        }
    )
    assert say.reduction_line(counts) == (
        "one pass: 1 reduction fewer; the hand-written backward: 18 of 38 operator calls "
        "fewer; F.layer_norm: 4 calls in all"
    )
    stats = pd.DataFrame(
        {
            "statistic": ["mean", "var", "var_mean"],
            "median_s": [0.001, 0.003, 0.0033],
            "unstable": [False, False, False],
        }
    )
    line = say.statistics_line(stats, 4096, 1024, "cpu")
    assert "x.var's median is 3.0x x.mean's and var_mean's 1.10x x.var's" in line
    assert "x.mean 1.00 ms and x.var 3.00 ms of the 4.00 ms they take apart" in line
    assert line.endswith(
        "whether one statistic costs more than another, and why, is not tested here."
    )
    assert "arithmetic" not in line and "cheaper" not in line
    unstable = say.statistics_line(stats.assign(unstable=[False, True, False]), 4096, 1024, "cpu")
    assert unstable == "a statistic's timing is unstable: no share is drawn from it"


def test_mask_copy_sentence_counts_the_forwards_masked_fill_only():
    copies = pd.DataFrame(
        {
            "made_by": ["aten::masked_fill", "aten::masked_fill", "aten::contiguous"],
            "phase": ["forward", "backward", "optimizer"],
            "time_ms": [1.0, 2.0, 0.5],
            "share_of_step": [0.1, 0.2, 0.05],
            "calls": [2, 2, 1],
        }
    )
    sentence = say.mask_copy_sentence(copies, {"same_loss_and_gradients": True}, "same time")
    assert sentence.startswith("all copies: 3.5 ms, 35.0% of the step's operator time, in 5 calls")
    assert (
        "forward pass: 1.00 ms (10.0%, 2 calls; one profiled step)" in sentence
        and "either way: 2 more calls" in sentence
    )
    assert sentence.endswith("in place: True. Measured: same time")
    no_forward = say.mask_copy_sentence(copies.iloc[1:], {"same_loss_and_gradients": True}, "x")
    assert "forward pass: 0.00 ms (0.0%, 0 calls; one profiled step)" in no_forward
