"""Attention implementations that plug into ``TransformerLM.set_attention``.

``FlashAttentionTorch`` and ``FlashAttentionTriton`` are ``torch.autograd.Function`` classes
called as ``.apply(q, k, v, is_causal=False)`` with q (batch, n_q, d), k and v (batch, n_k, d).
The Triton one is imported on first use: importing it loads Triton and, without CUDA, switches
the Triton interpreter on (``attention.interpreter``).
"""

from perflab.implementations.attention.annotated import (
    ATTENTION_RANGES,
    annotated_attention,
    attention_part_flops,
)
from perflab.implementations.attention.flash_torch import FlashAttentionTorch
from perflab.implementations.attention.reference import (
    attention_scores,
    attention_softmax,
    causal_mask,
    naive_attention,
    weighted_sum,
)

__all__ = [
    "ATTENTION_RANGES",
    "FlashAttentionTorch",
    "FlashAttentionTriton",
    "annotated_attention",
    "attention_part_flops",
    "attention_scores",
    "attention_softmax",
    "causal_mask",
    "naive_attention",
    "weighted_sum",
]


def __getattr__(name: str):
    if name == "FlashAttentionTriton":
        from perflab.implementations.attention.flash_triton import FlashAttentionTriton

        return FlashAttentionTriton
    raise AttributeError(f"module 'perflab.implementations.attention' has no attribute {name!r}")
