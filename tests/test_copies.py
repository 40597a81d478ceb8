"""Finding a step's copies (perflab.profiling.copies) and the mask written in place
(perflab.training.step_profile): each copy named after the operator that asked for it, and the
in-place mask the same numbers as the reference."""

import torch
from torch.profiler import ProfilerActivity

from perflab.implementations.attention import naive_attention
from perflab.implementations.model import ModelConfig
from perflab.measure.capture import profiling
from perflab.profiling.copies import copy_sites
from perflab.training.step_profile import attention_masking_in_place, compare_mask_copy


def test_each_copy_is_named_after_the_operator_that_asked_for_it():
    x = torch.randn(64, 64)
    mask = torch.rand(64, 64) > 0.5
    with profiling(activities=[ProfilerActivity.CPU]) as profile:
        x.masked_fill(mask, 0.0)
        x.t().contiguous()
        x.to(torch.float64)
        x.t().reshape(-1)
    sites = copy_sites(profile).set_index("made_by")
    assert sites.loc["aten::masked_fill", "via"] == "aten::clone"
    assert sites.loc["aten::contiguous (called directly)", "via"] == "aten::clone"
    assert sites.loc["aten::to (called directly)", "via"] == "aten::_to_copy"
    assert sites.loc["aten::reshape (called directly)", "via"] == "aten::clone"
    assert (sites["calls"] == 1).all() and len(sites) == 4
    assert (sites["share_of_step"] > 0).all() and sites["share_of_step"].sum() < 1


def test_a_copy_called_directly_inside_a_range_is_not_credited_to_the_range():
    """Inside the step's "forward" range a directly called reshape is still "called directly":
    the range is not an operator (it was once named as the copy's maker)."""
    x = torch.randn(64, 64)
    positive = x > 0
    with profiling(activities=[ProfilerActivity.CPU]) as profile:
        with torch.profiler.record_function("forward"):
            x.t().reshape(-1)
            x.masked_fill(positive, 0.0)
    sites = copy_sites(profile).set_index("made_by")
    assert set(sites.index) == {"aten::reshape (called directly)", "aten::masked_fill"}
    assert sites.loc["aten::reshape (called directly)", "via"] == "aten::clone"
    assert (sites["phase"] == "forward").all()


def test_a_forward_copy_and_its_backward_copy_are_separate_rows():
    """masked_fill's backward masks the gradient out of place too: writing the mask in place
    removes the forward's copy only, so the table must tell the two apart."""
    from perflab.measure.ranges import annotate

    x = torch.randn(32, 32, requires_grad=True)
    mask = torch.rand(32, 32) > 0.5
    with profiling(activities=[ProfilerActivity.CPU]) as profile:
        with annotate("forward"):
            loss = (x * 2).masked_fill(mask, 0.0).sum()
        with annotate("backward"):
            loss.backward()
    sites = copy_sites(profile)
    masked = sites[sites["made_by"].str.contains("masked_fill", case=False)]
    assert set(masked["phase"]) == {"forward", "backward"}
    assert (masked["calls"] == 1).all()
    with profiling(activities=[ProfilerActivity.CPU]) as unannotated:  # phases inferred
        loss = (x * 2).masked_fill(mask, 0.0).sum()
        loss.backward()
    inferred = copy_sites(unannotated)
    inferred = inferred[inferred["made_by"].str.contains("masked_fill", case=False)]
    assert set(inferred["phase"]) == {"forward", "backward"}


def test_no_copy_is_an_empty_table():
    with profiling(activities=[ProfilerActivity.CPU]) as profile:
        torch.ones(3).add_(torch.ones(3))  # (add_(1) copies its scalar to a tensor)
    assert copy_sites(profile).empty


def test_masking_in_place_is_the_reference_bit_for_bit():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 3, 17, 8, dtype=torch.float64, generator=generator, requires_grad=True)
        for _ in range(3)
    )
    for causal in (True, False):
        outputs, grads = [], []
        for attention in (naive_attention, attention_masking_in_place):
            out = attention(q, k, v, is_causal=causal)
            outputs.append(out)
            grads.append(torch.autograd.grad(out.sum(), (q, k, v)))
        assert torch.equal(*outputs)
        assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


def test_the_step_comparison_checks_the_gradients_first():
    config = ModelConfig(
        "copies-test",
        d_model=32,
        d_ff=64,
        num_layers=1,
        num_heads=2,
        vocab_size=50,
        context_length=32,
    )
    result = compare_mask_copy(config, 2, 16, torch.device("cpu"), rounds=2, warmup=0)
    row = result.as_row()
    assert row["same_loss_and_gradients"] is True
    assert result.rounds == 2 and row["b"] == "masked_fill_ (in place)"
