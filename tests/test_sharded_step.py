"""Notebook 09's sharded step (notebook 08's FSDP on two Gloo ranks) against the same recipe in
one process, in float64; the check's power to fail; and the per-rank memory accounting."""

import math
import statistics

import pytest
import torch

from perflab.bench.recipe import Recipe
from perflab.implementations.model import ModelConfig
from perflab.lessons.nb09_training_step.sharded_step import (
    block_bytes_per_token,
    check_sharded_step,
    sharded_step_memory,
    sharded_training_step,
)

TINY = ModelConfig(
    "t", d_model=32, d_ff=64, num_layers=2, num_heads=2, vocab_size=97, context_length=16
)
#: Everything the leaderboard's step uses but bf16: fused head, FlashAttention (the tiled
#: PyTorch one here), foreach AdamW, checkpointing at every block.
FAST = Recipe("fast", head="fused", attention="flash", optimizer="foreach", checkpoint_group=1)


@pytest.mark.parametrize("prefetch", [1, 2])
def test_the_sharded_step_equals_one_process_in_float64(prefetch):
    """The first step, and the loss of the next forward: with every block checkpointed and two
    modules prefetched, that forward once used weights gathered (by the recomputation's
    prefetches) before the optimizer step."""
    result = check_sharded_step(
        TINY, FAST, 4, 16, 2, param_dtype=torch.float64, tolerance=1e-10, prefetch=prefetch
    )
    assert result["matches_single_process"], result
    assert result["grad_error"] < 1e-12  # the reduce-scatter runs in float64 for float64 shards
    assert result["next_loss_error"] < 1e-12


def test_the_check_fails_when_the_step_differs():
    # FSDP computes in bf16 (weights gathered in it) where the single process autocasts: the
    # same recipe, different arithmetic, which a tight tolerance must notice.
    result = check_sharded_step(TINY, Recipe("bf16", dtype="bfloat16"), 4, 16, 2, tolerance=1e-6)
    assert not result["matches_single_process"] and result["grad_error"] > 1e-4


def test_timed_steps_and_bad_batches():
    result = sharded_training_step(TINY, FAST, 2, 8, 2, warmup=0, steps=2)
    assert len(result.step_s) == 2 and result.tokens == 16
    assert result.median_s == statistics.median(result.step_s)
    assert result.peak_bytes is None and result.params is None  # a CPU run; no check asked
    assert math.isfinite(result.loss) and result.loss > 0
    with pytest.raises(ValueError, match=r"batch_size \(3\) must be a multiple of world_size"):
        sharded_training_step(TINY, FAST, 3, 8, 2)


def test_memory_per_rank_from_the_shapes():
    table = sharded_step_memory(TINY, 4, 16, [1, 2], state_dtype="float32").set_index("world_size")
    # Counted here from a real model's tensors and a real AdamW step, not with the formulas.
    from perflab.implementations.model import TransformerLM

    model = TransformerLM(TINY)
    tensors = sum(p.numel() * p.element_size() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters())
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    moments = sum(
        s.numel() * s.element_size()
        for state in optimizer.state.values()
        for name, s in state.items()
        if name in ("exp_avg", "exp_avg_sq")
    )
    for world in (1, 2):
        assert table.loc[world, "parameters"] == pytest.approx(tensors / world / 1e9)
        assert table.loc[world, "gradients"] == pytest.approx(tensors / world / 1e9)
        assert table.loc[world, "AdamW moments"] == pytest.approx(moments / world / 1e9)
        # the bound holds at least the state it shards
        assert table.loc[world, "at_least_GB"] > (2 * tensors + moments) / world / 1e9
    assert table.loc[2, "block inputs (checkpoints)"] == pytest.approx(2 * 2 * 16 * 32 * 2 / 1e9)
    head = TINY.vocab_size * TINY.d_model  # gathered bf16 weight and gradient, two fp32 buffers
    assert table.loc[2, "largest module's transients"] == pytest.approx(head * 12 / 1e9)
    with pytest.raises(ValueError, match="world size 3 must divide the batch of 4"):
        sharded_step_memory(TINY, 4, 16, [3])


def test_a_block_saves_a_fixed_amount_per_token_with_flash_attention():
    per_token = block_bytes_per_token(TINY, torch.float32, seq_len=32)
    again = block_bytes_per_token(TINY, torch.float32, seq_len=128)
    assert per_token == again > 0  # linear in the tokens (past one tile): no seq x seq matrix
    assert per_token % 4 == 0 and per_token >= 4 * 4 * TINY.d_model  # several d-wide tensors
