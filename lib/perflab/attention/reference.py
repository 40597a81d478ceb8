"""Naive attention, the reference every other attention in the workbook is checked against.

softmax(Q K^T / sqrt(d)) V, materialising the full (n_queries, n_keys) score matrix: it reads
and writes O(n_queries * n_keys) memory per head, which is what FlashAttention avoids.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def causal_mask(n_queries: int, n_keys: int, device: torch.device | str | None = None) -> Tensor:
    """Boolean (n_queries, n_keys) mask, True where query i may attend to key j.

    Queries are aligned with the last keys (query i sits at position i + n_keys - n_queries),
    the same convention as FlashAttention for n_queries != n_keys.
    """
    offset = n_keys - n_queries
    rows = torch.arange(n_queries, device=device)[:, None]
    cols = torch.arange(n_keys, device=device)[None, :]
    return cols <= rows + offset


def naive_attention(q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool = False) -> Tensor:
    """softmax(q k^T / sqrt(d) [+ causal mask]) v for q (..., n_q, d), k and v (..., n_k, d)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
