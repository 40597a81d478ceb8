"""Naive attention with its three parts in named ranges, for profiling (notebook 02).

Ranges "attention/scores", "attention/softmax" and "attention/weighted_sum" are visible to
Nsight Systems and torch.profiler; the computation is ``naive_attention``'s, part for part.
"""

from __future__ import annotations

from torch import Tensor

from perflab.implementations.attention.reference import (
    attention_matmul_flops,
    attention_scores,
    attention_softmax,
    weighted_sum,
)
from perflab.measure.ranges import annotate

ATTENTION_RANGES = ("attention/scores", "attention/softmax", "attention/weighted_sum")


def annotated_attention(q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool = False) -> Tensor:
    """``naive_attention`` with each part inside its range."""
    with annotate("attention/scores"):
        scores = attention_scores(q, k, is_causal=is_causal)
    with annotate("attention/softmax"):
        probabilities = attention_softmax(scores)
    with annotate("attention/weighted_sum"):
        return weighted_sum(probabilities, v)


def attention_part_flops(
    batch_size: int, num_heads: int, n_queries: int, n_keys: int, head_dim: int
) -> dict[str, int]:
    """FLOPs of one call of each part for ``batch_size`` x ``num_heads`` score matrices:
    scores and weighted sum 2*n_q*n_k*d each, softmax about 5*n_q*n_k."""
    rows = batch_size * num_heads
    matmul = attention_matmul_flops(rows, n_queries, n_keys, head_dim) // 2  # each of the two
    return {
        "attention/scores": matmul,
        "attention/softmax": 5 * rows * n_queries * n_keys,
        "attention/weighted_sum": matmul,
    }
