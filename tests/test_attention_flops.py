"""Attention's FLOPs, counted once (``attention_matmul_flops``): against PyTorch's own FLOP
counter on the two matmuls, and the causal pairs against the mask itself, at odd sizes and
with more queries than keys or fewer."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from perflab.implementations.attention.reference import (
    attention_matmul_flops,
    causal_mask,
    causal_pairs,
)


@pytest.mark.parametrize(
    "rows, n_q, n_k, d", [(1, 1, 1, 1), (3, 7, 13, 5), (2, 16, 16, 8), (1, 9, 4, 3)]
)
def test_the_two_matmuls_cost_what_torch_counts(rows, n_q, n_k, d):
    q, k, v = torch.randn(rows, n_q, d), torch.randn(rows, n_k, d), torch.randn(rows, n_k, d)
    with FlopCounterMode(display=False) as counter:
        (q @ k.transpose(-2, -1)) @ v
    assert attention_matmul_flops(rows, n_q, n_k, d) == counter.get_total_flops()


@pytest.mark.parametrize("n_q, n_k", [(1, 1), (5, 5), (4, 11), (11, 4), (1, 9), (9, 1), (17, 17)])
def test_causal_pairs_are_the_pairs_the_mask_keeps(n_q, n_k):
    assert causal_pairs(n_q, n_k) == int(causal_mask(n_q, n_k).sum())
    assert attention_matmul_flops(2, n_q, n_k, 3, causal=True) == 4 * 2 * 3 * causal_pairs(n_q, n_k)
