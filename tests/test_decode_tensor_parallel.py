"""Tensor-parallel decoding on Gloo ranks (perflab.lessons.nb10_decoding.tensor_parallel): the same
greedy tokens as one process, and the prompt's logits equal in float64, whatever the split."""

from dataclasses import replace

import pytest
import torch

from perflab.implementations.model import ModelConfig
from perflab.lessons.nb10_decoding.inputs import random_prompts
from perflab.lessons.nb10_decoding.tensor_parallel import (
    exactness_line,
    tensor_parallel_decode,
    tensor_parallel_study,
)

TINY = ModelConfig(
    "tensor-parallel-test",
    d_model=32,
    d_ff=64,
    num_layers=2,
    num_heads=4,
    vocab_size=101,
    context_length=64,
)


def test_two_ranks_decode_the_tokens_of_one_process():
    prompts = random_prompts(TINY.vocab_size, [9, 9, 9], seed=3)
    table = tensor_parallel_decode(TINY, prompts, 6, world_size=2, dtype=torch.float64)
    assert list(table["rank"]) == [0, 1] and table["same_tokens"].all()
    assert (table["max_abs_logit_diff"] <= 1e-12).all()
    # counted in the ranks: two all-reduces per layer of batch x d_model values each
    assert (table["all_reduces_per_token"] == 2 * TINY.num_layers).all()
    assert (table["values_reduced_per_token"] == 2 * TINY.num_layers * 3 * TINY.d_model).all()
    # each rank reads its half of the split weights and cache plus the replicated parts
    share = table["share_of_one_process"]
    assert (0.5 < share).all() and (share < 1).all() and share.nunique() == 1


def test_a_rank_reads_its_shards_and_the_replicated_parts():
    """Bytes per decode step, by hand for TINY in float64 at 10 .. 14 tokens of context:
    one process reads every weight but the embedding (only the tokens' rows) and its whole
    cache; a rank of two reads half the blocks' matmul weights and cache, all the rest."""
    prompts = random_prompts(TINY.vocab_size, [9, 9, 9], seed=3)
    table = tensor_parallel_decode(TINY, prompts, 6, world_size=2, dtype=torch.float64)
    d, layers, batch, vocab = TINY.d_model, TINY.num_layers, 3, TINY.vocab_size
    matmuls = layers * (4 * d * d + 3 * d * TINY.d_ff)
    replicated = batch * d + layers * 2 * d + d + vocab * d  # embedding rows, norms, head
    mean_context = sum(range(10, 15)) / 5  # the five decode steps after a 9-token prompt
    cache = 2 * layers * batch * d * mean_context
    one = 8 * (matmuls + replicated + cache)
    assert table["one_process_bytes_read_per_step"].iloc[0] == pytest.approx(one)
    assert table["bytes_read_per_step"].iloc[0] == pytest.approx(
        8 * (matmuls / 2 + replicated + cache / 2)
    )


def test_grouped_query_attention_splits_its_key_and_value_heads():
    grouped = replace(TINY, name="tensor-parallel-gqa", num_kv_heads=2)
    prompts = random_prompts(grouped.vocab_size, [7, 7], seed=5)
    table = tensor_parallel_decode(grouped, prompts, 5, world_size=2, dtype=torch.float64)
    assert table["same_tokens"].all() and (table["max_abs_logit_diff"] <= 1e-12).all()
    single = replace(TINY, name="one-kv-head", num_kv_heads=1)
    with pytest.raises(ValueError, match=r"key and value heads \(1; "):
        tensor_parallel_decode(single, prompts, 3)


def test_what_cannot_be_split_or_decoded_is_one_clear_error():
    odd = ModelConfig(
        "odd-heads",
        d_model=24,
        d_ff=64,
        num_layers=1,
        num_heads=3,
        vocab_size=11,
        context_length=16,
    )
    with pytest.raises(
        ValueError, match=r"key and value heads \(3; .*\) and d_ff \(64\) divisible by 2"
    ):
        tensor_parallel_decode(odd, [[1, 2]], 3)
    with pytest.raises(ValueError, match="prompts of one length"):
        tensor_parallel_decode(TINY, [[1, 2], [3]], 3)
    with pytest.raises(ValueError, match="the model's context is 64"):
        tensor_parallel_decode(TINY, [[1] * 60], 8)


def test_the_findings_read_the_ranks_rows():
    from perflab.lessons.nb10_decoding.tensor_parallel import tensor_parallel_findings

    prompts = random_prompts(TINY.vocab_size, [9, 9], seed=3)
    table = tensor_parallel_decode(TINY, prompts, 4, world_size=2, dtype=torch.float32)
    step = table["step_median_s"].max()
    (only,) = tensor_parallel_findings(table)
    share = table["share_of_one_process"].max()
    assert f"each rank reading {share:.0%} of the bytes" in only.sentence
    assert f"a decode step took {step * 1e3:.1f} ms" in only.sentence
    assert "whether splitting saves time is not measured here" in only.sentence
    for claim in ("faster", "x slower", "twice as long", "saves time,"):
        assert claim not in only.sentence


def test_the_study_decodes_in_float64_then_float32_and_says_whether_the_ranks_agree():
    table = tensor_parallel_study(TINY, 2, 5, 3, world_size=2)
    assert list(zip(table["dtype"], table["rank"], strict=True)) == [
        ("float64", 0), ("float64", 1), ("float32", 0), ("float32", 1)
    ]  # fmt: skip
    assert exactness_line(table) == (
        "2 ranks, float64: the tokens of one process on every rank: True; "
        "the prompt's logits within 1e-12: True"
    )
    table.loc[1, "max_abs_logit_diff"] = 1e-9  # a rank off by more than the bound
    assert exactness_line(table).endswith("within 1e-12: False")
