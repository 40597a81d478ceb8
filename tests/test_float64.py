"""A float64 model computes in float64 in every operation: a TorchDispatchMode records the
dtype of every floating-point tensor each aten operator returns, forward and backward, so a
demotion anywhere (RMSNorm once computed in float32 whatever its input) cannot come back."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from perflab.implementations.model import ModelConfig, RMSNorm, TransformerLM
from perflab.implementations.rotary import RotaryEmbedding

CONFIG = ModelConfig(
    "f64", d_model=32, d_ff=64, num_layers=2, num_heads=4, vocab_size=50, context_length=16
)


class FloatDtypes(TorchDispatchMode):
    """Every (operator, dtype) of a floating-point output seen while active."""

    def __init__(self):
        super().__init__()
        self.seen: set[tuple[str, torch.dtype]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in torch.utils._pytree.tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                self.seen.add((str(func), tensor.dtype))
        return out


def test_a_float64_model_never_leaves_float64():
    torch.manual_seed(0)
    model = TransformerLM(CONFIG).double()
    tokens = torch.randint(0, CONFIG.vocab_size, (2, 9))
    with FloatDtypes() as record:
        logits = model(tokens)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    demoted = sorted({op for op, dtype in record.seen if dtype != torch.float64})
    assert not demoted, f"operators that left float64: {demoted}"


def test_the_recorder_catches_a_demotion():
    """The check can fail: the old RMSNorm (x.float()) is caught."""
    x = torch.randn(3, 8, dtype=torch.float64)
    with FloatDtypes() as record:
        (x.float() * 2).double()
    assert any(dtype == torch.float32 for _, dtype in record.seen)


def test_rmsnorm_keeps_float64_and_promotes_half_precision():
    norm = RMSNorm(8).double()
    x = torch.randn(4, 8, dtype=torch.float64) * 1e3 + 1.0
    exact = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    assert norm(x).dtype == torch.float64
    assert torch.allclose(norm(x), exact, rtol=1e-14, atol=0)  # float32 would give ~1e-7
    bf16 = RMSNorm(8).to(torch.bfloat16)
    assert bf16(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_rotary_tables_follow_a_float64_input():
    rotary = RotaryEmbedding(8, 16, 10000.0)
    x = torch.randn(1, 2, 16, 8, dtype=torch.float64)
    positions = torch.arange(16, dtype=torch.float64)
    inv_freq = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    angles = positions[:, None] * inv_freq
    even, odd = x[..., 0::2], x[..., 1::2]
    exact = torch.stack(
        (even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()), dim=-1
    ).flatten(-2)
    assert torch.allclose(rotary(x), exact, rtol=0, atol=1e-14)  # float32 tables: ~1e-6
    decoded = rotary(x, torch.arange(16)[None].expand(1, 16))
    assert torch.allclose(decoded, exact, rtol=0, atol=1e-14)
