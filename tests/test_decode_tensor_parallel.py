"""Tensor-parallel decoding on Gloo ranks (perflab.decode.tensor_parallel): the same greedy
tokens as one process, and the prompt's logits equal in float64, whatever the split."""

from dataclasses import replace

import pytest
import torch

from perflab.decode.inputs import random_prompts
from perflab.decode.tensor_parallel import tensor_parallel_decode
from perflab.model import ModelConfig

TINY = ModelConfig("tensor-parallel-test", d_model=32, d_ff=64, num_layers=2, num_heads=4,
                   vocab_size=101, context_length=64)  # fmt: skip


def test_two_ranks_decode_the_tokens_of_one_process():
    prompts = random_prompts(TINY.vocab_size, [9, 9, 9], seed=3)
    table = tensor_parallel_decode(TINY, prompts, 6, world_size=2, dtype=torch.float64)
    assert list(table["rank"]) == [0, 1] and table["same_tokens"].all()
    assert (table["max_abs_logit_diff"] <= 1e-12).all()
    assert (table["all_reduces_per_token"] == 2 * TINY.num_layers).all()
    assert (table["values_reduced_per_token"] == 2 * TINY.num_layers * 3 * TINY.d_model).all()


def test_grouped_query_attention_splits_its_key_and_value_heads():
    grouped = replace(TINY, name="tensor-parallel-gqa", num_kv_heads=2)
    prompts = random_prompts(grouped.vocab_size, [7, 7], seed=5)
    table = tensor_parallel_decode(grouped, prompts, 5, world_size=2, dtype=torch.float64)
    assert table["same_tokens"].all() and (table["max_abs_logit_diff"] <= 1e-12).all()
    single = replace(TINY, name="one-kv-head", num_kv_heads=1)
    with pytest.raises(ValueError, match=r"key and value heads \(1; "):
        tensor_parallel_decode(single, prompts, 3)


def test_what_cannot_be_split_or_decoded_is_one_clear_error():
    odd = ModelConfig("odd-heads", d_model=24, d_ff=64, num_layers=1, num_heads=3,
                      vocab_size=11, context_length=16)  # fmt: skip
    with pytest.raises(
        ValueError, match=r"key and value heads \(3; .*\) and d_ff \(64\) divisible by 2"
    ):
        tensor_parallel_decode(odd, [[1, 2]], 3)
    with pytest.raises(ValueError, match="prompts of one length"):
        tensor_parallel_decode(TINY, [[1, 2], [3]], 3)
    with pytest.raises(ValueError, match="the model's context is 64"):
        tensor_parallel_decode(TINY, [[1] * 60], 8)
