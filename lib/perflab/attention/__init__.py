"""Attention implementations that plug into ``TransformerLM.set_attention``."""

from perflab.attention.reference import causal_mask, naive_attention

__all__ = ["causal_mask", "naive_attention"]
