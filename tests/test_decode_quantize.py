"""int8 weight-only quantisation (perflab.implementations.decode.quantize): each weight within half
a step of the original, the int8 layer equal to a float matmul with the dequantised weight (eager,
and compiled on the fused path), every linear layer replaced and the original untouched."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from perflab.implementations.decode import generate
from perflab.implementations.decode.quantize import Int8Linear, quantize_int8, weight_bytes
from perflab.implementations.model import ModelConfig, QKVProjection
from perflab.lessons.nb10_decoding.inputs import inference_model
from perflab.lessons.nb10_decoding.measurements import compare_int8

TINY = ModelConfig(
    "quantize-test",
    d_model=32,
    d_ff=64,
    num_layers=2,
    num_heads=2,
    vocab_size=101,
    context_length=64,
)


def _linear(out_features: int, in_features: int, dtype=torch.float64) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(in_features, out_features, bias=False, dtype=dtype)


def test_each_weight_is_within_half_a_step_of_the_original():
    linear = _linear(17, 33)
    layer = Int8Linear.from_linear(linear)
    assert layer.weight.dtype == torch.int8 and layer.scale.shape == (17,)
    assert int(layer.weight.abs().max()) == 127  # each row's largest weight maps to +-127
    error = (layer.dequantised() - linear.weight).abs()
    assert (error <= layer.scale[:, None] / 2 + 1e-15).all()


@pytest.mark.parametrize("rows", [1, 3, 9])  # the fused path up to FUSED_ROWS rows, F.linear after
def test_the_int8_layer_is_a_matmul_with_the_dequantised_weight(rows):
    layer = Int8Linear.from_linear(_linear(17, 33))
    x = torch.randn(rows, 1, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected = F.linear(x, layer.dequantised())
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-12)
    compiled = torch.compile(layer, fullgraph=True)
    try:
        torch.testing.assert_close(compiled(x), expected, rtol=0, atol=1e-12)
    finally:
        torch._dynamo.reset()


def test_quantize_replaces_every_linear_and_leaves_the_model_alone():
    model = inference_model(TINY, torch.device("cpu"), torch.float64)
    before = {name: p.clone() for name, p in model.named_parameters()}
    quantised = quantize_int8(model)
    assert not any(isinstance(m, nn.Linear) for m in quantised.modules())
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert isinstance(next(m for m in model.modules() if isinstance(m, QKVProjection)), nn.Linear)
    q, k, v = quantised.blocks[0].attn.qkv(torch.zeros(1, 1, TINY.d_model, dtype=torch.float64))
    assert q.shape == k.shape == v.shape == (1, 1, TINY.d_model)
    # float64 linear weights become 1 byte each plus an 8-byte scale per row
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    saved = sum(m.weight.numel() * 7 - m.weight.shape[0] * 8 for m in linears)
    assert weight_bytes(model) - weight_bytes(quantised) == saved


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rounding_stays_within_half_a_step_in_every_dtype(dtype):
    """|q * scale - w| <= scale / 2 for weights stored in bfloat16 and float16 too (computed
    in their own dtype, w / scale itself was rounded: 0.75 of a step in bfloat16)."""
    generator = torch.Generator().manual_seed(3)
    worst = 0.0
    for _ in range(20):
        linear = nn.Linear(257, 65, bias=False, dtype=dtype)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(65, 257, generator=generator))
        layer = Int8Linear.from_linear(linear)
        error = (layer.dequantised().double() - linear.weight.double()).abs()
        worst = max(worst, (error / layer.scale.double()[:, None]).max().item())
    assert worst <= 0.5 + 1e-5  # float32's rounding of w / scale: 127 x 2^-24 < 1e-5 of a step


def test_grouped_query_models_quantise_and_decode():
    """The fused QKV output is d_model, kv_dim, kv_dim wide under grouped-query attention: the
    int8 model splits it so, and decodes the tokens the float model decodes when its weights
    are exactly int8 values times a per-row scale (planted: quantisation then changes
    nothing)."""
    config = ModelConfig(
        "quantize-gqa",
        d_model=16,
        d_ff=32,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=53,
        context_length=32,
    )
    model = inference_model(config, torch.device("cpu"), torch.float64)
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                rows, cols = module.weight.shape
                steps = torch.randint(-127, 128, (rows, cols), generator=generator)
                steps[:, 0] = 127  # each row's largest magnitude: its scale is exactly `row`
                scale = torch.rand(rows, 1, generator=generator, dtype=torch.float64) / 50
                module.weight.copy_(steps * scale)
    quantised = quantize_int8(model)
    q, k, v = quantised.blocks[0].attn.qkv(torch.zeros(1, 1, 16, dtype=torch.float64))
    assert (q.shape[-1], k.shape[-1], v.shape[-1]) == (16, 8, 8)
    tokens = torch.randint(0, 53, (2, 7), generator=generator)
    torch.testing.assert_close(quantised(tokens), model(tokens), rtol=1e-12, atol=1e-12)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    assert generate(quantised, prompts, 6, "contiguous") == generate(model, prompts, 6, "none")


def test_int8_decoding_against_float32_reports_error_speed_and_tokens():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    try:
        result = compare_int8(model, 2, 9, rounds=2, warmup=0, new_tokens=5)
        row = result.as_row()
    finally:
        torch._dynamo.reset()
    assert row["logits_relative_error"] < 0.05
    assert row["weight_bytes_int8"] < row["weight_bytes_original"]
    # the comparison names its baseline: the compiled step, its dtype and sizes, against int8
    baseline = "the compiled step with float32 weights (2 x 9 tokens)"
    assert (row["a"], row["b"]) == (baseline, "int8 weights") and result.rounds == 2


def test_int8_decoding_of_exactly_representable_weights_agrees_token_for_token():
    """Weights that are already int8 values times a row scale quantise to themselves: the
    tokens must agree everywhere and the logits' error be float32 rounding only."""
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                scale = module.weight.abs().amax(dim=1, keepdim=True) / 127
                module.weight.copy_(torch.round(module.weight / scale) * scale)
    try:
        row = compare_int8(model, 2, 9, rounds=2, warmup=0, new_tokens=5).details
    finally:
        torch._dynamo.reset()
    assert (row["tokens_agreeing"], row["first_differing_token"]) == (1.0, 5)
    assert row["same_next_tokens"] and row["logits_relative_error"] < 1e-5


def test_what_cannot_be_quantised_is_one_clear_error():
    with pytest.raises(ValueError, match="bias-free"):
        Int8Linear.from_linear(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="need int8 weights"):
        Int8Linear(torch.zeros(4, 4), torch.ones(4))
