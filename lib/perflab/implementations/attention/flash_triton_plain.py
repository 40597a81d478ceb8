"""The FlashAttention-2 forward as one first writes it in Triton, kept beside the lean one
(``flash_forward``) to show what the structure of a kernel costs (notebook 06, section 3).

Algorithm 1 of the paper, straight: one loop over the key tiles, and in every trip the bounds
mask, the causal mask (a run-time branch on the diagonal tiles), a -inf select, a "safe"
maximum for rows that have seen no key yet, ``exp`` with the softmax scale applied apart. It
computes the same function as ``flash_forward``'s kernel (tests hold both to float64); compiled
for a GPU, its loop issues far more instructions per tile (``perflab kernels`` counts them).
Forward only, fixed 64 x 64 tiles: a contrast, not a second implementation to use.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from perflab.implementations.attention.interpreter import INTERPRETED, INTERPRETER_TILE, tl, triton

TILE = INTERPRETER_TILE if INTERPRETED else 64


@triton.jit
def _plain_forward_kernel(
    Q, K, V, Out, L,  # q (b, n_q, d), k and v (b, n_k, d), out like q, L (b, n_q) float32
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_ob, stride_on,
    stride_lb, N_Q, N_K, scale,
    D: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, IS_CAUSAL: tl.constexpr,
):  # fmt: skip
    b, tile = tl.program_id(0).to(tl.int64), tl.program_id(1)
    offs_q = tile * BQ + tl.arange(0, BQ)
    offs_d = tl.arange(0, D)
    q = tl.load(
        Q + b * stride_qb + offs_q[:, None] * stride_qn + offs_d[None, :],
        mask=offs_q[:, None] < N_Q,
        other=0.0,
    )
    row_max = tl.full((BQ,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BQ,), tl.float32)
    acc = tl.zeros((BQ, D), tl.float32)
    offset = N_K - N_Q
    k_end = N_K
    if IS_CAUSAL:
        k_end = tl.minimum(N_K, (tile + 1) * BQ + offset)
    for k_start in range(0, k_end, BK):
        offs_k = k_start + tl.arange(0, BK)
        k = tl.load(
            K + b * stride_kb + offs_k[:, None] * stride_kn + offs_d[None, :],
            mask=offs_k[:, None] < N_K,
            other=0.0,
        )
        v = tl.load(
            V + b * stride_vb + offs_k[:, None] * stride_vn + offs_d[None, :],
            mask=offs_k[:, None] < N_K,
            other=0.0,
        )
        scores = tl.dot(q, tl.trans(k)) * scale
        visible = tl.broadcast_to(offs_k[None, :] < N_K, (BQ, BK))
        if IS_CAUSAL:
            if k_start + BK > tile * BQ + offset:  # a diagonal tile, decided at run time
                visible = visible & (offs_k[None, :] <= offs_q[:, None] + offset)
        scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        p = tl.exp(scores - safe_max[:, None])
        correction = tl.exp(row_max - safe_max)
        row_sum = correction * row_sum + tl.sum(p, 1)
        acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v)
        row_max = new_max
    empty = row_sum == 0.0
    out = acc / tl.where(empty, 1.0, row_sum)[:, None]
    lse = tl.where(empty, float("-inf"), row_max + tl.log(tl.where(empty, 1.0, row_sum)))
    tl.store(
        Out + b * stride_ob + offs_q[:, None] * stride_on + offs_d[None, :],
        out.to(Out.dtype.element_ty),
        mask=offs_q[:, None] < N_Q,
    )
    tl.store(L + b * stride_lb + offs_q, lse, mask=offs_q < N_Q)


def plain_flash_forward(q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False):
    """(output, logsumexp) of the plain kernel for q (b, n_q, d), k, v (b, n_k, d)."""
    q, k, v = (t.contiguous() for t in (q, k, v))
    batch, n_q, d = q.shape
    out = torch.empty_like(q)
    lse = torch.empty(batch, n_q, device=q.device, dtype=torch.float32)
    _plain_forward_kernel[(batch, triton.cdiv(n_q, TILE))](
        q,
        k,
        v,
        out,
        lse,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        out.stride(0),
        out.stride(1),
        lse.stride(0),
        n_q,
        k.shape[1],
        1 / math.sqrt(d),
        D=d,
        BQ=TILE,
        BK=TILE,
        IS_CAUSAL=is_causal,
    )
    return out, lse
