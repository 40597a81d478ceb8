"""Grouped-query attention (ModelConfig.num_kv_heads): with as many key and value heads as
query heads it is multi-head attention, bit for bit; with fewer it equals multi-head attention
whose key and value weights repeat each shared head (float64); its parameters, FLOPs and KV
cache follow the narrower keys and values; every cache decodes like full recomputation."""

from dataclasses import replace

import pytest
import torch

from perflab.implementations.decode import ContiguousKVCache, StaticDecoder, generate
from perflab.implementations.model import ModelConfig, TransformerLM
from perflab.lessons.nb10_decoding.costs import kv_bytes_per_token, matmul_weights
from perflab.lessons.nb10_decoding.measurements import compare_kv_heads
from perflab.training.ladder import BASELINE, kv_heads_against_mha

MHA = ModelConfig(
    "gqa-test", d_model=48, d_ff=80, num_layers=2, num_heads=6, vocab_size=53, context_length=40
)


def _model(config: ModelConfig, seed: int = 0) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(config).double().eval()


def _tokens(seed: int, shape=(3, 17)) -> torch.Tensor:
    return torch.randint(0, MHA.vocab_size, shape, generator=torch.Generator().manual_seed(seed))


def test_as_many_kv_heads_as_heads_is_multi_head_attention():
    same = replace(MHA, num_kv_heads=MHA.num_heads)
    assert same.num_parameters() == MHA.num_parameters()
    tokens = _tokens(0)
    assert torch.equal(_model(same)(tokens), _model(MHA)(tokens))


@pytest.mark.parametrize("kv_heads", [1, 2, 3])
def test_grouped_query_attention_is_mha_with_repeated_key_and_value_heads(kv_heads):
    grouped = _model(replace(MHA, num_kv_heads=kv_heads), seed=kv_heads)
    full = _model(MHA)
    groups, head_dim, d = MHA.num_heads // kv_heads, MHA.head_dim, MHA.d_model
    state = grouped.state_dict()
    for name, weight in list(state.items()):
        if name.endswith("qkv.weight"):
            q, k, v = weight.split([d, kv_heads * head_dim, kv_heads * head_dim])
            k, v = (
                t.reshape(kv_heads, 1, head_dim, d)
                .expand(kv_heads, groups, head_dim, d)
                .reshape(d, d)
                for t in (k, v)
            )
            state[name] = torch.cat([q, k, v])
    full.load_state_dict(state)
    for seed in range(3):
        tokens = _tokens(seed)
        torch.testing.assert_close(grouped(tokens), full(tokens), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kv_heads", [1, 2, 6])
def test_counts_follow_the_narrower_keys_and_values(kv_heads):
    config = replace(MHA, num_kv_heads=kv_heads)
    model = TransformerLM(config)
    assert config.num_parameters() == sum(p.numel() for p in model.parameters())
    kv_dim = kv_heads * MHA.head_dim
    assert config.kv_dim == kv_dim
    assert kv_bytes_per_token(config, 2) == 2 * MHA.num_layers * kv_dim * 2
    block = 2 * MHA.d_model**2 + 2 * MHA.d_model * kv_dim + 3 * MHA.d_model * MHA.d_ff
    assert matmul_weights(config) == MHA.num_layers * block + MHA.d_model * MHA.vocab_size
    cache = ContiguousKVCache(model, 2, 8)
    assert cache.token_bytes == 2 * MHA.num_layers * kv_dim * 4  # float32
    assert cache.k.shape == (MHA.num_layers, 2, kv_heads, 8, MHA.head_dim)


@pytest.mark.parametrize("kv_heads", [1, 3])
def test_every_cache_decodes_grouped_query_attention_like_full_recomputation(kv_heads):
    model = _model(replace(MHA, num_kv_heads=kv_heads), seed=7)
    generator = torch.Generator().manual_seed(kv_heads)
    prompts = [
        torch.randint(0, MHA.vocab_size, (n,), generator=generator).tolist() for n in (1, 6, 11)
    ]
    reference = generate(model, prompts, 7, cache="none")
    assert generate(model, prompts, 7, cache="contiguous") == reference
    assert generate(model, prompts, 7, cache="paged", block_size=4) == reference
    assert StaticDecoder(model, len(prompts), 20).generate(prompts, 7) == reference


@pytest.mark.parametrize("kv_heads", [0, 4, 7, 2.0, True])
def test_kv_heads_must_divide_the_heads(kv_heads):
    with pytest.raises(
        ValueError,
        match=r"num_kv_heads must be a positive divisor of "
        r"num_heads \(6\) or None",
    ):
        replace(MHA, num_kv_heads=kv_heads)


def test_the_decode_comparison_counts_the_bytes_grouping_saves():
    result = compare_kv_heads(
        MHA, 2, 3, 12, torch.device("cpu"), torch.float32, rounds=2, warmup=0, compiled=False
    )
    row = result.as_row()
    assert row["decodes_like_recomputation"] is True
    assert row["kv_bytes_per_token_grouped"] * 3 == row["kv_bytes_per_token_mha"]
    assert row["kv_cache_bytes_mha"] == 3 * 12 * row["kv_bytes_per_token_mha"]
    saved = row["kv_cache_bytes_mha"] - row["kv_cache_bytes_grouped"]
    weights_saved = 4 * (row["parameters_mha"] - row["parameters_grouped"])  # float32
    kv_written = 3 * (row["kv_bytes_per_token_mha"] - row["kv_bytes_per_token_grouped"])
    assert row["step_bytes_mha"] - row["step_bytes_grouped"] == saved + weights_saved + kv_written
    assert (row["a"], row["b"]) == ("multi-head", "2 kv heads") and result.rounds == 2


def test_the_training_comparison_names_both_models_and_their_sizes():
    result = kv_heads_against_mha(MHA, 3, BASELINE, 2, 16, torch.device("cpu"), rounds=2, warmup=0)
    row = result.as_row()
    assert row["parameters_mha"] - row["parameters_grouped"] == (
        MHA.num_layers * 2 * MHA.d_model * (MHA.d_model - 3 * MHA.head_dim)
    )
    assert (row["a"], row["b"]) == ("multi-head", "3 kv heads") and result.rounds == 2
