"""Attention implementations that plug into ``TransformerLM.set_attention``."""

from perflab.attention.annotated import ATTENTION_RANGES, annotated_attention, attention_part_flops
from perflab.attention.reference import (
    attention_scores,
    attention_softmax,
    causal_mask,
    naive_attention,
    weighted_sum,
)

__all__ = [
    "ATTENTION_RANGES",
    "annotated_attention",
    "attention_part_flops",
    "attention_scores",
    "attention_softmax",
    "causal_mask",
    "naive_attention",
    "weighted_sum",
]
