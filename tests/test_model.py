import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from perflab.bench import BenchConfig, run_benchmark
from perflab.implementations.attention import naive_attention
from perflab.implementations.model import (
    PRESETS,
    ModelConfig,
    TransformerLM,
    build_model,
    cross_entropy,
    get_preset,
    sized_for,
)

TINY = ModelConfig(
    "test", d_model=8, d_ff=16, num_layers=2, num_heads=2, vocab_size=10, context_length=16
)


def test_logits_shape_and_loss():
    model = TransformerLM(PRESETS["cpu-tiny"])
    tokens = torch.randint(10_000, (3, 17))
    logits = model(tokens)
    assert logits.shape == (3, 17, 10_000)
    loss = cross_entropy(logits, tokens)
    assert loss.shape == () and loss.dtype == torch.float32
    # An untrained model is close to uniform: loss near ln(vocab) = 9.21.
    assert 8.0 < loss.item() < 11.0


def test_parameter_count_by_hand():
    # embedding 10*8 = 80; per layer 4*8*8 (qkv, out) + 3*8*16 (SwiGLU) + 2*8 (norms) = 656,
    # two layers 1312; final norm 8; LM head 8*10 = 80. Total 80 + 1312 + 8 + 80 = 1480.
    assert TINY.num_parameters() == 1480
    assert sum(p.numel() for p in TransformerLM(TINY).parameters()) == 1480


@pytest.mark.parametrize("name", ["cpu-tiny", "cpu-small", "small"])
def test_parameter_count_matches_module(name):
    config = PRESETS[name]
    with torch.device("meta"):
        model = TransformerLM(config)
    assert config.num_parameters() == sum(p.numel() for p in model.parameters())


def test_small_preset_size():
    # GPT-2 small's shape with SwiGLU and vocabulary 10,000: about 128.6 M parameters.
    assert PRESETS["small"].num_parameters() == 128_625_408


def test_flops_by_hand():
    # batch 1, 4 tokens. Per layer: projections 2*4*(4*8*8 + 3*8*16) = 5120,
    # attention 2*2*1*4*4*8 = 512; two layers 11264; LM head 2*4*8*10 = 640. Total 11904.
    assert TINY.forward_flops(batch_size=1, seq_len=4) == 11_904
    assert TINY.train_step_flops(batch_size=1, seq_len=4) == 3 * 11_904


@pytest.mark.parametrize("batch, seq", [(1, 4), (2, 13)])
def test_flops_match_pytorch_flop_counter(batch, seq):
    torch.manual_seed(0)
    model = TransformerLM(TINY)
    tokens = torch.randint(TINY.vocab_size, (batch, seq))
    with FlopCounterMode(display=False) as forward:
        loss = cross_entropy(model(tokens), tokens)
    assert forward.get_total_flops() == TINY.forward_flops(batch, seq)
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    assert forward.get_total_flops() + backward.get_total_flops() == TINY.train_step_flops(
        batch, seq
    )


def test_causality_future_tokens_do_not_change_past_logits():
    torch.manual_seed(0)
    model = TransformerLM(PRESETS["cpu-tiny"]).double()
    tokens = torch.randint(10_000, (2, 32))
    changed = tokens.clone()
    changed[:, 20] = (changed[:, 20] + 1) % 10_000
    before, after = model(tokens), model(changed)
    torch.testing.assert_close(after[:, :20], before[:, :20], rtol=0, atol=1e-12)
    assert (after[:, 20:] - before[:, 20:]).abs().amax() > 1e-3


def test_rotary_scores_depend_on_offset_only():
    from perflab.implementations.rotary import RotaryEmbedding

    rope = RotaryEmbedding(head_dim=8, context_length=32, theta=10_000.0).double()
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    rotated_q = rope(q.expand(32, 8))
    rotated_k = rope(k.expand(32, 8))
    score = lambda i, j: rotated_q[i] @ rotated_k[j]  # noqa: E731
    torch.testing.assert_close(score(5, 2), score(25, 22))
    assert not torch.isclose(score(5, 2), score(5, 3))


def test_attention_is_swapped_per_instance():
    calls = []

    def counting_attention(q, k, v, *, is_causal):
        calls.append(q.shape)
        return naive_attention(q, k, v, is_causal=is_causal)

    config = PRESETS["cpu-tiny"]
    swapped, plain = TransformerLM(config), TransformerLM(config)
    swapped.set_attention(counting_attention)
    tokens = torch.randint(10_000, (1, 8))
    plain(tokens)
    assert calls == []
    swapped(tokens)
    assert calls == [(1, config.num_heads, 8, config.head_dim)] * config.num_layers


def test_sdpa_gives_the_same_logits_as_naive_attention():
    torch.manual_seed(0)
    model = TransformerLM(PRESETS["cpu-tiny"]).double()
    tokens = torch.randint(10_000, (2, 24))
    naive = model(tokens)
    model.set_attention(torch.nn.functional.scaled_dot_product_attention)
    torch.testing.assert_close(model(tokens), naive, rtol=1e-10, atol=1e-10)


def test_bad_configs_and_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        ModelConfig("x", d_model=10, d_ff=16, num_layers=1, num_heads=3)
    with pytest.raises(ValueError, match="num_layers must be positive"):
        ModelConfig("x", d_model=8, d_ff=16, num_layers=0, num_heads=2)
    with pytest.raises(ValueError, match="valid: cpu-tiny, cpu-small"):
        get_preset("huge")
    with pytest.raises(ValueError, match="exceeds the model's context length 16"):
        TransformerLM(TINY)(torch.zeros(1, 17, dtype=torch.long))


def test_presets_follow_the_workbook_table():
    """The 2026 handout's Table 1, the 2025 xl under its own name, the leaderboard model."""
    shapes = {n: (c.d_model, c.d_ff, c.num_layers, c.num_heads) for n, c in PRESETS.items()}
    assert shapes["small"] == (768, 3072, 12, 12)
    assert shapes["medium"] == (1024, 4096, 24, 16)
    assert shapes["large"] == (1280, 5120, 36, 20)
    assert shapes["xl"] == (2560, 10240, 32, 32)
    assert shapes["10B"] == (4608, 12288, 50, 36)
    assert shapes["xl-2025"] == (1600, 6400, 48, 25)
    assert get_preset("2.7B") is PRESETS["xl"]  # the 2025 handout's name for the same shape
    leaderboard = PRESETS["leaderboard-8B"]
    assert shapes["leaderboard-8B"] == (4096, 11008, 34, 32)
    assert (leaderboard.vocab_size, leaderboard.context_length) == (151_936, 32_768)
    others = [c for n, c in PRESETS.items() if n != "leaderboard-8B"]
    assert all(c.vocab_size == 10_000 and c.context_length == 512 for c in others)


def test_any_context_length_runs():
    """Longer than the preset's 512: the rotary table is sized by the configuration."""
    config = BenchConfig(
        preset="cpu-tiny",
        context_length=1024,
        mode="forward",
        batch_size=1,
        warmup=0,
        steps=1,
        device="cpu",
    )
    row, _ = run_benchmark(config)
    assert row["context_length"] == 1024 and row["steps"] == 1
    assert sized_for(get_preset("cpu-tiny"), 1024).context_length == 1024
    assert sized_for(get_preset("cpu-tiny"), 100) is get_preset("cpu-tiny")


def test_separate_qkv_projections_equal_the_fused_one():
    """Three matmuls with the thirds of the stacked weight give the one matmul's q, k, v."""
    torch.manual_seed(0)
    model = TransformerLM(PRESETS["cpu-tiny"]).double()
    ids = torch.randint(0, 10_000, (2, 12))
    fused = model(ids)
    model.set_fused_qkv(False)
    assert not model.blocks[0].attn.qkv.fused
    torch.testing.assert_close(model(ids), fused, rtol=1e-12, atol=1e-12)


def test_build_model_sizes_seeds_places_and_casts():
    model = build_model(TINY, context=40, layers=1, seed=3, dtype=torch.float64)
    assert model.config.context_length == 40 and len(model.blocks) == 1
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    again = build_model(TINY, context=40, layers=1, seed=3, dtype=torch.float64)
    other = build_model(TINY, context=40, layers=1, seed=4, dtype=torch.float64)
    weight = model.embedding.weight
    assert torch.equal(weight, again.embedding.weight)
    assert not torch.equal(weight, other.embedding.weight)
    assert build_model(TINY, context=8).config.context_length == 16  # never shrunk
    meta = build_model(TINY, device="meta")
    assert {p.device.type for p in meta.parameters()} == {"meta"}


def test_build_model_direct_draws_in_the_dtype_and_restores_the_default():
    default = torch.get_default_dtype()
    direct = build_model(TINY, seed=0, dtype=torch.float64, direct=True)
    cast = build_model(TINY, seed=0, dtype=torch.float64)
    assert torch.get_default_dtype() == default
    assert {p.dtype for p in direct.parameters()} == {torch.float64}
    # drawn in float64, not float32 rounded up: the same generator, different values
    assert not torch.equal(direct.embedding.weight, cast.embedding.weight)
    with pytest.raises(ValueError, match="model must be 'package.module:Class'"):
        build_model(TINY, model_class="no-colon")
    with pytest.raises(ValueError, match=r"direct=True draws the weights in a dtype: pass dtype"):
        build_model(TINY, direct=True)
    assert torch.get_default_dtype() == default
