"""Attention, as a script imports it (the public API of ``../shared/WORKBOOK.md``): the
reference, the annotated version and FlashAttention-2 in PyTorch and Triton, which live in
``perflab.implementations.attention``; this face keeps the name. ``FlashAttentionTriton`` is
imported on first use, as there: importing it loads Triton."""

from perflab.implementations.attention import (
    ATTENTION_RANGES,
    FlashAttentionTorch,
    annotated_attention,
    attention_part_flops,
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
    raise AttributeError(f"module 'perflab.attention' has no attribute {name!r}")
