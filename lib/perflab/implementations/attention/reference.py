"""Naive attention, the reference every other attention in the workbook is checked against.

softmax(Q K^T / sqrt(d)) V, materialising the full (n_queries, n_keys) score matrix: it reads
and writes O(n_queries * n_keys) memory per head, which is what FlashAttention avoids. Its
three parts are separate functions so that the annotated variant (notebook 02) runs exactly
the same code inside named ranges.
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


def causal_pairs(n_queries: int, n_keys: int) -> int:
    """The (query, key) pairs ``causal_mask`` keeps: query i sees keys up to i + n_keys -
    n_queries, so n_q (n_k - n_q + 1) + n_q (n_q - 1) / 2 of them (T (T + 1) / 2 for a square
    of T), or n_k (n_k + 1) / 2 when there are more queries than keys."""
    offset = n_keys - n_queries
    if offset >= 0:
        return n_queries * (offset + 1) + n_queries * (n_queries - 1) // 2
    return n_keys * (n_keys + 1) // 2


def attention_matmul_flops(
    rows: int, n_queries: int, n_keys: int, head_dim: int, causal: bool = False
) -> int:
    """FLOPs of attention's two matmuls, Q K^T and P V, for ``rows`` (batch x heads) score
    matrices: 2 FLOPs a multiply-add, 2 n_q n_k d each, so 4 n_q n_k d; over the pairs the
    causal mask keeps when ``causal`` (what a kernel that skips masked tiles needs at least;
    a dense kernel computes the whole square). The workbook's one count of them: the model's
    FLOPs, the annotated parts, the attention benchmarks, FlashAttention's work and decoding's
    costs all take it from here."""
    pairs = causal_pairs(n_queries, n_keys) if causal else n_queries * n_keys
    return 4 * rows * pairs * head_dim


def attention_scores(q: Tensor, k: Tensor, *, is_causal: bool) -> Tensor:
    """q k^T / sqrt(d), with -inf where the causal mask forbids: 2 * n_q * n_k * d FLOPs."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores


def attention_softmax(scores: Tensor) -> Tensor:
    """Row-wise softmax: about 5 FLOPs per score (max, subtract, exp, sum, divide)."""
    return torch.softmax(scores, dim=-1)


def weighted_sum(probabilities: Tensor, v: Tensor) -> Tensor:
    """probabilities @ v: 2 * n_q * n_k * d FLOPs."""
    return probabilities @ v


def naive_attention(q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool = False) -> Tensor:
    """softmax(q k^T / sqrt(d) [+ causal mask]) v for q (..., n_q, d), k and v (..., n_k, d)."""
    return weighted_sum(attention_softmax(attention_scores(q, k, is_causal=is_causal)), v)
