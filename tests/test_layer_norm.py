"""LayerNorm four ways (perflab.implementations.layer_norm,
perflab.lessons.nb02_profiling.layer_norm_study): each equals F.layer_norm in float64, the
hand-written backward passes gradcheck, the textbook one pass is caught cancelling, and the profile
counts the reductions that one pass removes."""

import pytest
import torch

from perflab.implementations.layer_norm import LAYER_NORMS, own_backward
from perflab.lessons.nb02_profiling.layer_norm_study import (
    check_layer_norms,
    compare_layer_norms,
    reduction_counts,
    statistics_times,
)


@pytest.mark.parametrize("tokens, width", [(1, 2), (37, 129), (5, 1000)])
def test_every_way_equals_torch_in_float64(tokens, width):
    table = check_layer_norms(tokens, width, mean=3.0, seed=tokens).set_index("way")
    ours = table.loc[list(LAYER_NORMS)]
    errors = ours[["output_error", "grad_x_error", "grad_weight_error", "grad_bias_error"]]
    assert (errors <= 1e-12).all().all(), errors
    assert (ours["out_dtype"] == "float64").all()


def test_the_hand_written_backward_passes_gradcheck():
    generator = torch.Generator().manual_seed(0)
    shapes = ((3, 4, 7), (7,), (7,))
    x, weight, bias = (
        torch.randn(*shape, generator=generator, dtype=torch.float64, requires_grad=True)
        for shape in shapes
    )
    assert torch.autograd.gradcheck(own_backward, (x, weight, bias))


def test_the_textbook_one_pass_cancels_where_var_mean_does_not():
    # float32, mean 1000 and spread 1: E[x²] and mean² agree in their first 6-7 digits, so
    # their difference keeps almost none of the variance; var_mean keeps it (errors against
    # F.layer_norm in float64).
    table = check_layer_norms(dtype=torch.float32, mean=1000.0).set_index("way")
    assert table.loc["E[x²] - mean² (textbook one pass)", "output_error"] > 0.05
    assert table.loc["var_mean", "output_error"] < 1e-3


def test_one_pass_removes_a_reduction_and_the_fused_kernel_does_its_own():
    counts = reduction_counts().set_index("way")
    calls = counts["reduction_calls"]
    assert calls["var_mean"] == calls["mean, then var"] - 1
    assert "var_mean x1" in counts.loc["var_mean", "which"]
    assert calls["F.layer_norm"] == 2  # native_layer_norm and its backward
    assert (
        counts.loc["var_mean, own backward", "operator_calls"]
        < counts.loc["var_mean", "operator_calls"]
    )


def test_the_comparisons_chain_the_ways_and_the_statistics_are_timed():
    results = compare_layer_norms(8, 16, rounds=2, warmup=0)
    names = list(LAYER_NORMS)
    assert [(r.name_a, r.name_b) for r in results] == list(zip(names, names[1:], strict=False))
    stats = statistics_times(8, 16, steps=3, warmup=0)
    assert list(stats["statistic"]) == ["mean", "var", "var_mean"]
    assert stats["unstable"].dtype == bool
    # three steps each: the median's distribution-free interval is [min, max], at 1 - 2/8
    assert (stats["steps"] == 3).all() and (stats["median_ci_level"] == 0.75).all()
    assert (stats["median_ci_low_s"] == stats["min_s"]).all()
    assert (stats["median_ci_high_s"] == stats["max_s"]).all()
    with pytest.raises(ValueError, match="need tokens >= 1 and width >= 2"):
        statistics_times(0, 16)
