"""FlashAttention-2 in plain PyTorch: tiled forward with online softmax, tiled backward by
recomputation from the saved logsumexp (Dao 2023, "FlashAttention-2", algorithms 1 and 2).

Memory model: naive attention keeps the (n_q x n_k) probabilities for backward; this keeps
only the output and one logsumexp per query, and materialises one (Q_TILE x K_TILE) tile of
scores at a time, so extra memory is O(n_q + tile^2) instead of O(n_q * n_k).

Forward, per query tile i, over key tiles j (online softmax, Milakov & Gimelshein 2018):
    S = Q_i K_j^T / sqrt(d);  m' = max(m, rowmax S);  P = exp(S - m')
    l = exp(m - m') l + rowsum P;  O_i = exp(m - m') O_i + P V_j;  m = m'
    finally O_i /= l and L_i = m + log l (the logsumexp, saved for backward).
Backward, with D = rowsum(dO * O): P = exp(S - L), dV_j += P^T dO_i, dP = dO_i V_j^T,
    dS = P (dP - D), dQ_i += dS K_j / sqrt(d), dK_j += dS^T Q_i / sqrt(d).

Causal masking uses FlashAttention's convention for n_q != n_k (query i sits at key position
i + n_k - n_q); key tiles entirely in the future of a query tile are skipped. A query with no
visible key (causal, n_q > n_k) gets output 0 and logsumexp -inf. The per-tile arithmetic is
one function that can be compiled with torch.compile (``FlashAttentionTorch.compile_tiles``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

Q_TILE = 64  # queries per tile
K_TILE = 64  # keys per tile


def check_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    """One clear ValueError for inputs FlashAttention cannot take."""
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(
            f"q, k, v must be (batch, seq, d); got shapes {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2]:
        raise ValueError(
            f"shapes do not match: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; "
            "need q (b, n_q, d) and k, v (b, n_k, d)"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"dtypes differ: q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if not q.dtype.is_floating_point:
        raise ValueError(f"q, k, v must be floating point, got {q.dtype}")


def _acc(t: Tensor) -> Tensor:
    """``t`` in the accumulation precision: float32 for half types, its own otherwise."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _first_visible_tile_end(q_end: int, offset: int, n_keys: int) -> int:
    """One past the last key any query before ``q_end`` may see (causal)."""
    return min(n_keys, q_end + offset)


def _tile_scores(
    q_tile: Tensor,
    k_tile: Tensor,
    scale: float,
    q_start: int,
    k_start: int,
    offset: int,
    is_causal: bool,
) -> Tensor:
    """Scaled scores of one tile (accumulation precision), -inf where the causal mask forbids."""
    scores = (_acc(q_tile) @ _acc(k_tile).transpose(-2, -1)) * scale
    if is_causal:
        rows = torch.arange(q_start, q_start + q_tile.shape[1], device=q_tile.device)[:, None]
        cols = torch.arange(k_start, k_start + k_tile.shape[1], device=q_tile.device)[None, :]
        scores = scores.masked_fill(cols > rows + offset, float("-inf"))
    return scores


def _forward(q: Tensor, k: Tensor, v: Tensor, is_causal: bool) -> tuple[Tensor, Tensor]:
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    scale = 1 / math.sqrt(d)
    offset = n_k - n_q
    acc_dtype = torch.promote_types(q.dtype, torch.float32)
    out = torch.empty(batch, n_q, d, device=q.device, dtype=q.dtype)
    lse = torch.empty(batch, n_q, device=q.device, dtype=acc_dtype)
    for q_start in range(0, n_q, Q_TILE):
        q_tile = q[:, q_start : q_start + Q_TILE]
        rows = q_tile.shape[1]
        acc = torch.zeros(batch, rows, d, device=q.device, dtype=acc_dtype)
        row_sum = torch.zeros(batch, rows, device=q.device, dtype=acc_dtype)
        row_max = torch.full((batch, rows), float("-inf"), device=q.device, dtype=acc_dtype)
        k_end = _first_visible_tile_end(q_start + rows, offset, n_k) if is_causal else n_k
        for k_start in range(0, max(k_end, 0), K_TILE):
            scores = _tile_scores(
                q_tile, k[:, k_start : k_start + K_TILE], scale, q_start, k_start, offset, is_causal
            )
            new_max = torch.maximum(row_max, scores.amax(dim=-1))
            safe_max = torch.where(torch.isinf(new_max), 0.0, new_max)  # rows with no key yet
            probabilities = torch.exp(scores - safe_max[..., None])
            correction = torch.exp(row_max - safe_max)
            row_sum = correction * row_sum + probabilities.sum(dim=-1)
            v_tile = _acc(v[:, k_start : k_start + K_TILE])
            acc = correction[..., None] * acc + probabilities @ v_tile
            row_max = new_max
        empty = row_sum == 0  # causal rows that see no key at all
        out[:, q_start : q_start + rows] = (acc / torch.where(empty, 1.0, row_sum)[..., None]).to(
            q.dtype
        )
        lse[:, q_start : q_start + rows] = torch.where(
            empty, float("-inf"), row_max + torch.log(torch.where(empty, 1.0, row_sum))
        )
    return out, lse


def _backward_tile(
    q_tile: Tensor,
    k_tile: Tensor,
    v_tile: Tensor,
    grad_out: Tensor,
    lse: Tensor,
    delta: Tensor,
    scale: float,
    q_start: int,
    k_start: int,
    offset: int,
    is_causal: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """dQ, dK, dV contributions of one (query tile, key tile) pair (accumulation precision)."""
    scores = _tile_scores(q_tile, k_tile, scale, q_start, k_start, offset, is_causal)
    safe_lse = torch.where(torch.isinf(lse), 0.0, lse)
    probabilities = torch.exp(scores - safe_lse[..., None])  # masked scores give exactly 0
    grad_v = probabilities.transpose(-2, -1) @ grad_out
    grad_p = grad_out @ _acc(v_tile).transpose(-2, -1)
    grad_s = probabilities * (grad_p - delta[..., None])
    grad_q = (grad_s @ _acc(k_tile)) * scale
    grad_k = (grad_s.transpose(-2, -1) @ _acc(q_tile)) * scale
    return grad_q, grad_k, grad_v


def _backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    grad_out: Tensor,
    is_causal: bool,
    tile_fn,
) -> tuple[Tensor, Tensor, Tensor]:
    n_q, n_k, d = q.shape[1], k.shape[1], q.shape[2]
    scale = 1 / math.sqrt(d)
    offset = n_k - n_q
    grad_out = _acc(grad_out)
    delta = (grad_out * _acc(out)).sum(dim=-1)  # D = rowsum(dO * O)
    grad_q, grad_k, grad_v = (torch.zeros_like(_acc(t)) for t in (q, k, v))
    for q_start in range(0, n_q, Q_TILE):
        q_stop = min(q_start + Q_TILE, n_q)
        k_end = _first_visible_tile_end(q_stop, offset, n_k) if is_causal else n_k
        for k_start in range(0, max(k_end, 0), K_TILE):
            k_stop = min(k_start + K_TILE, n_k)
            dq, dk, dv = tile_fn(
                q[:, q_start:q_stop],
                k[:, k_start:k_stop],
                v[:, k_start:k_stop],
                grad_out[:, q_start:q_stop],
                lse[:, q_start:q_stop],
                delta[:, q_start:q_stop],
                scale,
                q_start,
                k_start,
                offset,
                is_causal,
            )
            grad_q[:, q_start:q_stop] += dq
            grad_k[:, k_start:k_stop] += dk
            grad_v[:, k_start:k_stop] += dv
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)


class FlashAttentionTorch(torch.autograd.Function):
    """``FlashAttentionTorch.apply(q, k, v, is_causal=False)`` for q (b, n_q, d), k, v (b, n_k, d).

    Saves q, k, v, the output and the logsumexp (b, n_q) for backward.
    """

    #: Compile the backward's per-tile arithmetic with torch.compile (worth it on a GPU; on a
    #: CPU the compile time dominates for the workbook's sizes, so it is off by default there).
    compile_tiles: bool | None = None  # None: on when the inputs are on CUDA
    _compiled_tile = None

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False) -> Tensor:
        check_inputs(q, k, v)
        out, lse = _forward(q, k, v, is_causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal = is_causal
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        compile_tiles = FlashAttentionTorch.compile_tiles
        if compile_tiles is None:
            compile_tiles = q.is_cuda
        tile_fn = _backward_tile
        if compile_tiles:
            if FlashAttentionTorch._compiled_tile is None:
                FlashAttentionTorch._compiled_tile = torch.compile(_backward_tile, dynamic=True)
            tile_fn = FlashAttentionTorch._compiled_tile
        grad_q, grad_k, grad_v = _backward(q, k, v, out, lse, grad_out, ctx.is_causal, tile_fn)
        return grad_q, grad_k, grad_v, None


def as_model_attention(function: type[torch.autograd.Function], *, opaque: bool = False):
    """An attention function for ``TransformerLM.set_attention`` (which passes q, k, v of shape
    (batch, heads, seq, head_dim)) from a FlashAttention ``autograd.Function`` taking
    (batch, seq, d): the leading dimensions are flattened into one batch dimension. ``opaque``:
    under ``torch.compile`` the function runs as it is, between the compiled graphs, instead of
    being traced (``torch.compiler.disable``)."""
    apply = torch.compiler.disable(function.apply) if opaque else function.apply

    def attention(q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool = False) -> Tensor:
        lead = q.shape[:-2]
        flat = [t.reshape(-1, *t.shape[-2:]) for t in (q, k, v)]
        out = apply(*flat, is_causal)
        return out.reshape(*lead, *out.shape[-2:])

    attention.__name__ = f"{function.__name__}_attention"
    return attention


flash_attention_torch = as_model_attention(FlashAttentionTorch)
