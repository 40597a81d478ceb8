"""FlashAttention-2 as Triton kernels: a forward kernel, and a backward in three launches (a
preprocess kernel for D = rowsum(dO * O), one kernel for dK and dV, one for dQ; no atomics).

Same algorithm and conventions as ``flash_torch`` (read that module's docstring first). Memory
traffic per (batch, head): the forward reads Q once and K, V once per query tile and writes O
and L once; the backward recomputes the scores instead of reading a stored (n_q x n_k) matrix.

What makes these kernels fast, each choice explained where it is made:

- **Two stages per loop.** The tiles of a row (or column) of tiles are split into those that
  need no mask at all (in bounds, and for causal attention entirely below the diagonal) and the
  few that do (the diagonal band, the ragged last tile). The unmasked stage is the hot loop: no
  comparisons, no selects, no -inf arithmetic. A run-time branch inside one loop would keep the
  mask code in the loop body (the compiler cannot move it out), and its registers with it.
- **Masks only where needed.** ``EVEN_Q`` / ``EVEN_K`` (``triton.heuristics``: is the length a
  multiple of the tile?) are compile-time, so an aligned length compiles no bounds masks at all.
- **Base-2 exponentials.** ``exp(x) = exp2(x * log2(e))``: with the softmax scale folded into
  ``qk_scale = log2(e) / sqrt(d)``, a score's exponent is one fused multiply-add and one
  ``ex2`` (the GPU's exponential unit computes base 2; ``tl.exp`` costs an extra multiply).
  The running maximum and the log-sum-exp are kept in base 2 and converted once at the end.
- **The backward in the transposed space.** The dK/dV kernel computes S^T = K Q^T, so P^T and
  dS^T are born in the layout that ``tl.dot`` takes as its left operand (dV += P^T dO,
  dK += dS^T Q): no transposes of register tiles, which cost a trip through shared memory.
  The softmax scale multiplies the exponent's FMA (K is in effect pre-scaled, at no cost, and
  without the extra PyTorch kernel that scaling K on the host would launch) and dK, dQ once
  at the end.
- **A lean host path.** A forward launches one kernel, a backward three, and nothing else: no
  PyTorch arithmetic, no float32 copies; the autotuner's cache answers every call after the
  first of a shape (``tests/test_flash_attention.py`` counts launches and aten operators).

Written with plain pointer arithmetic and masks (no block pointers, which Triton 3.9 removed),
so the same kernels run compiled on CUDA and in the Triton interpreter on a CPU
(``TRITON_INTERPRET=1``, set here before the kernels are defined when there is no CUDA). The
interpreter cannot compute bfloat16, so bfloat16 inputs are refused there. float32 dots use
``input_precision="ieee"`` (no TF32), so results match a float32 reference. The interpreter
does not type-check what the compiler rejects, so ``perflab.attention.aot`` compiles every
kernel for sm_80, sm_90 and sm_100 in the test suite, and counts the instructions of each loop.

Launch grid: (batch, tiles), the batch (batch x heads when called from the model) on axis 0,
which CUDA allows up to 2^31 - 1 programs, the tiles on axis 1 (at most 65,535). Offsets to a
batch element are 64-bit (``b * stride`` passes 2^31 elements in large inputs); offsets within
one (n, d) matrix stay 32-bit, enough for n * d < 2^31.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    import pandas as pd

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton.language" in sys.modules:  # too late: its kernels would fail when interpreted
        raise ImportError(
            "Triton was imported (e.g. by torch.compile) before TRITON_INTERPRET=1 was set; "
            "import perflab first, or start Python with TRITON_INTERPRET=1"
        )
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402  (after TRITON_INTERPRET is decided)
import triton.language as tl  # noqa: E402

from perflab.attention.flash_configs import (  # noqa: E402
    KERNELS,
    PREPROCESS_CONFIG,
    VERIFIED_ARCHS,
    autotune_configs,
    configs_for,
    kept_configs,
)
from perflab.attention.flash_torch import as_model_attention, check_inputs  # noqa: E402
from perflab.attention.triton_compile import TRITON_DTYPES, Target, compile_kernel  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
HEAD_DIMS = (16, 32, 64, 128)  # tl.dot needs power-of-two sizes of at least 16
INTERPRETER_TILE = 16  # small tiles: the interpreter runs each program in NumPy
#: CUDA's limit on grid axes 1 and 2 (axis 0 takes up to 2^31 - 1).
MAX_GRID_Y = 65_535
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471805599453  # ln(2): a base-2 log-sum-exp times LN2 is the natural one


@triton.jit
def _load_rows(base, rows, stride, offs_d, n, MASK: tl.constexpr, other: tl.constexpr = 0.0):
    """Rows ``rows`` (all D columns) of a (n, D) matrix at ``base``; ``other`` past row n when
    ``MASK`` (a tile that may cross the end), no bounds check otherwise."""
    pointers = base + rows[:, None] * stride + offs_d[None, :]
    if MASK:
        return tl.load(pointers, mask=rows[:, None] < n, other=other)
    return tl.load(pointers)


@triton.jit
def _load_vector(base, rows, n, MASK: tl.constexpr, other: tl.constexpr):
    """``base[rows]``; ``other`` past n when ``MASK``."""
    if MASK:
        return tl.load(base + rows, mask=rows < n, other=other)
    return tl.load(base + rows)


@triton.jit
def _heaviest_first(IS_CAUSAL: tl.constexpr):
    """The query tile of this program (grid axis 1): in causal attention the last query tile
    sees the most keys, so programs take tiles from the last down. CUDA starts blocks in
    order of their index, so the heaviest start first and the light ones fill the last wave,
    instead of a tail of heavy tiles running alone at the end (FlashAttention-2, section 3.2
    ends on the same point)."""
    tile = tl.program_id(1)
    if IS_CAUSAL:
        tile = tl.num_programs(1) - 1 - tile
    return tile


# ---------------------------------------------------------------------------------------------
# Forward: one program per (batch element, query tile); K and V stream past the resident Q.
# ---------------------------------------------------------------------------------------------


@triton.jit
def _forward_stage(
    acc, row_sum, row_max,  # running output, softmax denominator and maximum (base 2)
    q, K, V, stride_kn, stride_vn, offs_q, offs_d,  # resident Q tile; K, V of this batch
    k_lo, k_hi, N_K, offset, qk_scale,  # key range [k_lo, k_hi); causal offset n_k - n_q
    BK: tl.constexpr, CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """Online softmax over the key tiles of [k_lo, k_hi): the unmasked stage when both masks
    are off (compile-time), the diagonal band and the ragged last tile otherwise."""
    for k_start in range(k_lo, k_hi, BK):
        k_start = tl.multiple_of(k_start, BK)
        cols = k_start + tl.arange(0, BK)
        k = _load_rows(K, cols, stride_kn, offs_d, N_K, BOUNDS_MASK)
        v = _load_rows(V, cols, stride_vn, offs_d, N_K, BOUNDS_MASK)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if CAUSAL_MASK or BOUNDS_MASK:
            visible = tl.full(scores.shape, 1, tl.int1)
            if BOUNDS_MASK:  # keys past N_K were loaded as zeros: their score is not 0 but -inf
                visible = visible & (cols[None, :] < N_K)
            if CAUSAL_MASK:  # query i sees keys up to i + n_k - n_q
                visible = visible & (cols[None, :] <= offs_q[:, None] + offset)
            # A large finite value, not -inf: a query with no visible key (causal, n_q > n_k)
            # would compute -inf - (-inf) = NaN; its output is set at the end instead.
            scores = tl.where(visible, scores * qk_scale, -1.0e30)
            new_max = tl.maximum(row_max, tl.max(scores, 1))
            p = tl.math.exp2(scores - new_max[:, None])
        else:  # scale folded into the exponent: one FMA per score
            new_max = tl.maximum(row_max, tl.max(scores, 1) * qk_scale)
            p = tl.math.exp2(scores * qk_scale - new_max[:, None])
        correction = tl.math.exp2(row_max - new_max)
        row_sum = row_sum * correction + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * correction[:, None], input_precision=PRECISION)
        row_max = new_max
    return acc, row_sum, row_max


@triton.jit(do_not_specialize=["BATCH_BUCKET"])
def _flash_forward_kernel(
    # tensors: Q (b, n_q, d), K and V (b, n_k, d), Out like Q, L (b, n_q) in float32
    Q, K, V, Out, L,
    # strides, in elements
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_ob, stride_on,
    stride_lb,
    # sizes, the softmax scale 1/sqrt(d), and the batch's bucket (read by the autotuner only)
    N_Q, N_K, scale, BATCH_BUCKET,
    # compile-time: head dimension, tile sizes, masking, dot precision; EVEN_Q / EVEN_K (is
    # the length a multiple of the tile?) come from triton.heuristics
    D: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, IS_CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr, EVEN_Q: tl.constexpr, EVEN_K: tl.constexpr,
):  # fmt: skip
    b, tile = tl.program_id(0).to(tl.int64), _heaviest_first(IS_CAUSAL)
    q_start = tile * BQ
    offs_q = q_start + tl.arange(0, BQ)
    offs_d = tl.arange(0, D)
    q = _load_rows(Q + b * stride_qb, offs_q, stride_qn, offs_d, N_Q, not EVEN_Q)
    K += b * stride_kb
    V += b * stride_vb
    acc = tl.zeros((BQ, D), tl.float32)
    row_sum = tl.zeros((BQ,), tl.float32)
    row_max = tl.full((BQ,), float("-inf"), tl.float32)
    qk_scale = scale * 1.4426950408889634  # log2(e) / sqrt(d)
    offset = N_K - N_Q
    # Key tiles [0, k_full) are visible to every query of the tile and in bounds: no masks.
    # [k_full, k_end) hold the causal diagonal band and the ragged last tile.
    k_end = N_K
    k_full = N_K // BK * BK
    if IS_CAUSAL:
        k_end = tl.minimum(tl.maximum(q_start + BQ + offset, 0), N_K)  # later keys are masked
        # The tile's first query sees keys 0 .. q_start + offset (division after the clamp:
        # negative integer division rounds differently compiled and interpreted).
        k_full = tl.minimum(tl.maximum(q_start + offset + 1, 0) // BK * BK, k_full)
    acc, row_sum, row_max = _forward_stage(
        acc,
        row_sum,
        row_max,
        q,
        K,
        V,
        stride_kn,
        stride_vn,
        offs_q,
        offs_d,
        0,
        k_full,
        N_K,
        offset,
        qk_scale,
        BK,
        False,
        False,
        PRECISION,
    )
    if IS_CAUSAL or not EVEN_K:
        acc, row_sum, row_max = _forward_stage(
            acc,
            row_sum,
            row_max,
            q,
            K,
            V,
            stride_kn,
            stride_vn,
            offs_q,
            offs_d,
            k_full,
            k_end,
            N_K,
            offset,
            qk_scale,
            BK,
            IS_CAUSAL,
            not EVEN_K,
            PRECISION,
        )
    if IS_CAUSAL:  # a query before the first key (n_q > n_k) sees nothing: output 0, L -inf
        empty = offs_q + offset < 0
        acc = tl.where(empty[:, None], 0.0, acc)
        row_sum = tl.where(empty, 1.0, row_sum)
        row_max = tl.where(empty, float("-inf"), row_max)
    out = acc / row_sum[:, None]
    lse = (row_max + tl.math.log2(row_sum)) * 0.6931471805599453  # natural log-sum-exp
    out_pointers = Out + b * stride_ob + offs_q[:, None] * stride_on + offs_d[None, :]
    if EVEN_Q:
        tl.store(out_pointers, out.to(Out.dtype.element_ty))
        tl.store(L + b * stride_lb + offs_q, lse)
    else:
        tl.store(out_pointers, out.to(Out.dtype.element_ty), mask=offs_q[:, None] < N_Q)
        tl.store(L + b * stride_lb + offs_q, lse, mask=offs_q < N_Q)


# ---------------------------------------------------------------------------------------------
# Backward, launch 1 of 3: D = rowsum(dO * O) in float32, read by both gradient kernels.
# ---------------------------------------------------------------------------------------------


@triton.jit
def _flash_backward_preprocess_kernel(
    Out, DO, DELTA,  # O and dO (b, n_q, d) with Q's strides; D (b, n_q) float32
    stride_ob, stride_on, stride_lb, N_Q,
    D: tl.constexpr, BQ: tl.constexpr, EVEN_Q: tl.constexpr,
):  # fmt: skip
    b, tile = tl.program_id(0).to(tl.int64), tl.program_id(1)
    offs_q = tile * BQ + tl.arange(0, BQ)
    offs_d = tl.arange(0, D)
    o = _load_rows(Out + b * stride_ob, offs_q, stride_on, offs_d, N_Q, not EVEN_Q)
    grad_out = _load_rows(DO + b * stride_ob, offs_q, stride_on, offs_d, N_Q, not EVEN_Q)
    delta = tl.sum(o.to(tl.float32) * grad_out.to(tl.float32), 1)
    if EVEN_Q:
        tl.store(DELTA + b * stride_lb + offs_q, delta)
    else:
        tl.store(DELTA + b * stride_lb + offs_q, delta, mask=offs_q < N_Q)


# ---------------------------------------------------------------------------------------------
# Backward, launch 2 of 3: dK and dV. One program per (batch element, key tile); Q, dO, L, D
# stream past the resident K, V tile. Computed transposed: S^T = K Q^T is (BK, BQ).
# ---------------------------------------------------------------------------------------------


@triton.jit
def _backward_kv_stage(
    grad_k, grad_v, k, v,  # accumulators and the resident K, V tile (BK, D)
    Q, DO, L, DELTA, stride_qn, offs_k, offs_d,  # this batch element's Q, dO, L, D
    q_lo, q_hi, N_Q, offset, qk_scale,  # query range [q_lo, q_hi)
    BQ: tl.constexpr, CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """dK and dV contributions of the query tiles of [q_lo, q_hi). Queries past N_Q load as
    zeros with L = +inf, so their P is exactly 0 and they contribute nothing: the bounds mask
    is on the loads only."""
    for q_start in range(q_lo, q_hi, BQ):
        q_start = tl.multiple_of(q_start, BQ)
        rows = q_start + tl.arange(0, BQ)
        q = _load_rows(Q, rows, stride_qn, offs_d, N_Q, BOUNDS_MASK)
        grad_out = _load_rows(DO, rows, stride_qn, offs_d, N_Q, BOUNDS_MASK)
        lse = _load_vector(L, rows, N_Q, BOUNDS_MASK, float("inf")) * 1.4426950408889634
        delta = _load_vector(DELTA, rows, N_Q, BOUNDS_MASK, 0.0)
        scores_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)  # S^T (BK, BQ)
        p_t = tl.math.exp2(scores_t * qk_scale - lse[None, :])  # P^T = exp(S^T - L)
        if CAUSAL_MASK:  # key j is visible to query i when j <= i + n_k - n_q
            p_t = tl.where(offs_k[:, None] <= rows[None, :] + offset, p_t, 0.0)
        grad_v = tl.dot(p_t.to(grad_out.dtype), grad_out, grad_v, input_precision=PRECISION)
        grad_p_t = tl.dot(v, tl.trans(grad_out), input_precision=PRECISION)  # dP^T = V dO^T
        grad_s_t = p_t * (grad_p_t - delta[None, :])  # dS^T = P^T (dP^T - D)
        grad_k = tl.dot(grad_s_t.to(q.dtype), q, grad_k, input_precision=PRECISION)
    return grad_k, grad_v


@triton.jit(do_not_specialize=["BATCH_BUCKET"])
def _flash_backward_kv_kernel(
    # tensors: inputs, upstream gradient dO, L and D = rowsum(dO * O) (b, n_q), outputs dK, dV
    Q, K, V, DO, L, DELTA, DK, DV,
    # strides, in elements (dO shares Q's layout, dK and dV share K's; L and D are contiguous)
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_lb,
    N_Q, N_K, scale, BATCH_BUCKET,
    D: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, IS_CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr, EVEN_Q: tl.constexpr, EVEN_K: tl.constexpr,
):  # fmt: skip
    # Causal: key tile 0 is seen by every query, the last by the fewest, so the grid's own
    # order already starts the heaviest programs first.
    b, tile = tl.program_id(0).to(tl.int64), tl.program_id(1)
    k_start = tile * BK
    offs_k = k_start + tl.arange(0, BK)
    offs_d = tl.arange(0, D)
    # Keys past N_K load as zeros; their rows of dK and dV are computed but never stored.
    k = _load_rows(K + b * stride_kb, offs_k, stride_kn, offs_d, N_K, not EVEN_K)
    v = _load_rows(V + b * stride_vb, offs_k, stride_vn, offs_d, N_K, not EVEN_K)
    Q += b * stride_qb
    DO += b * stride_qb
    L += b * stride_lb
    DELTA += b * stride_lb
    grad_k = tl.zeros((BK, D), tl.float32)
    grad_v = tl.zeros((BK, D), tl.float32)
    qk_scale = scale * 1.4426950408889634
    offset = N_K - N_Q
    # Query tiles [q_full, q_even) see every key of this tile and lie in bounds: no masks.
    # Causal: [q_begin, q_full) is the diagonal band (earlier queries see none of these keys).
    # [max(q_full, q_even), N_Q) is the ragged last query tile.
    q_even = N_Q // BQ * BQ
    q_full = 0
    if IS_CAUSAL:
        q_begin = tl.maximum(k_start - offset, 0) // BQ * BQ
        q_full = tl.cdiv(tl.maximum(k_start + BK - 1 - offset, 0), BQ) * BQ
        grad_k, grad_v = _backward_kv_stage(
            grad_k,
            grad_v,
            k,
            v,
            Q,
            DO,
            L,
            DELTA,
            stride_qn,
            offs_k,
            offs_d,
            q_begin,
            tl.minimum(q_full, N_Q),
            N_Q,
            offset,
            qk_scale,
            BQ,
            True,
            not EVEN_Q,
            PRECISION,
        )
    grad_k, grad_v = _backward_kv_stage(
        grad_k,
        grad_v,
        k,
        v,
        Q,
        DO,
        L,
        DELTA,
        stride_qn,
        offs_k,
        offs_d,
        q_full,
        q_even,
        N_Q,
        offset,
        qk_scale,
        BQ,
        False,
        False,
        PRECISION,
    )
    if not EVEN_Q:
        grad_k, grad_v = _backward_kv_stage(
            grad_k,
            grad_v,
            k,
            v,
            Q,
            DO,
            L,
            DELTA,
            stride_qn,
            offs_k,
            offs_d,
            tl.maximum(q_full, q_even),
            N_Q,
            N_Q,
            offset,
            qk_scale,
            BQ,
            False,
            True,
            PRECISION,
        )
    grad_k *= scale  # dK = dS^T Q / sqrt(d)
    pointers = b * stride_kb + offs_k[:, None] * stride_kn + offs_d[None, :]
    if EVEN_K:
        tl.store(DK + pointers, grad_k.to(DK.dtype.element_ty))
        tl.store(DV + pointers, grad_v.to(DV.dtype.element_ty))
    else:
        tl.store(DK + pointers, grad_k.to(DK.dtype.element_ty), mask=offs_k[:, None] < N_K)
        tl.store(DV + pointers, grad_v.to(DV.dtype.element_ty), mask=offs_k[:, None] < N_K)


# ---------------------------------------------------------------------------------------------
# Backward, launch 3 of 3: dQ. One program per (batch element, query tile); K and V stream past
# the resident Q, dO, L and D.
# ---------------------------------------------------------------------------------------------


@triton.jit
def _backward_q_stage(
    grad_q, q, grad_out, lse, delta,  # accumulator and the resident query tile's values
    K, V, stride_kn, stride_vn, offs_q, offs_d,  # this batch element's K and V
    k_lo, k_hi, N_K, offset, qk_scale,  # key range [k_lo, k_hi)
    BK: tl.constexpr, CAUSAL_MASK: tl.constexpr, BOUNDS_MASK: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    """dQ contributions of the key tiles of [k_lo, k_hi)."""
    for k_start in range(k_lo, k_hi, BK):
        k_start = tl.multiple_of(k_start, BK)
        cols = k_start + tl.arange(0, BK)
        k = _load_rows(K, cols, stride_kn, offs_d, N_K, BOUNDS_MASK)
        v = _load_rows(V, cols, stride_vn, offs_d, N_K, BOUNDS_MASK)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        p = tl.math.exp2(scores * qk_scale - lse[:, None])
        if CAUSAL_MASK or BOUNDS_MASK:
            # Keys past N_K load as zeros, so their score is 0 and exp2(0 - L) could overflow
            # (L very negative): their P is set to 0 like a masked key's.
            visible = tl.full(p.shape, 1, tl.int1)
            if BOUNDS_MASK:
                visible = visible & (cols[None, :] < N_K)
            if CAUSAL_MASK:
                visible = visible & (cols[None, :] <= offs_q[:, None] + offset)
            p = tl.where(visible, p, 0.0)
        grad_p = tl.dot(grad_out, tl.trans(v), input_precision=PRECISION)  # dP = dO V^T
        grad_s = p * (grad_p - delta[:, None])  # dS = P (dP - D)
        grad_q = tl.dot(grad_s.to(k.dtype), k, grad_q, input_precision=PRECISION)
    return grad_q


@triton.jit(do_not_specialize=["BATCH_BUCKET"])
def _flash_backward_q_kernel(
    # tensors: inputs, dO, L and D (b, n_q), output dQ (Q's layout)
    Q, K, V, DO, L, DELTA, DQ,
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_lb,
    N_Q, N_K, scale, BATCH_BUCKET,
    D: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, IS_CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr, EVEN_Q: tl.constexpr, EVEN_K: tl.constexpr,
):  # fmt: skip
    b, tile = tl.program_id(0).to(tl.int64), _heaviest_first(IS_CAUSAL)
    q_start = tile * BQ
    offs_q = q_start + tl.arange(0, BQ)
    offs_d = tl.arange(0, D)
    q = _load_rows(Q + b * stride_qb, offs_q, stride_qn, offs_d, N_Q, not EVEN_Q)
    grad_out = _load_rows(DO + b * stride_qb, offs_q, stride_qn, offs_d, N_Q, not EVEN_Q)
    # Queries past N_K get L = +inf (P = 0); a query that sees no key has L = -inf, but all
    # its tiles are in the masked stage, where its P is set to 0.
    lse = _load_vector(L + b * stride_lb, offs_q, N_Q, not EVEN_Q, float("inf"))
    lse = lse * 1.4426950408889634  # base 2, like the exponent
    delta = _load_vector(DELTA + b * stride_lb, offs_q, N_Q, not EVEN_Q, 0.0)
    K += b * stride_kb
    V += b * stride_vb
    grad_q = tl.zeros((BQ, D), tl.float32)
    qk_scale = scale * 1.4426950408889634
    offset = N_K - N_Q
    # As in the forward: [0, k_full) unmasked, [k_full, k_end) the diagonal band and the
    # ragged last tile.
    k_end = N_K
    k_full = N_K // BK * BK
    if IS_CAUSAL:
        k_end = tl.minimum(tl.maximum(q_start + BQ + offset, 0), N_K)
        k_full = tl.minimum(tl.maximum(q_start + offset + 1, 0) // BK * BK, k_full)
    grad_q = _backward_q_stage(
        grad_q,
        q,
        grad_out,
        lse,
        delta,
        K,
        V,
        stride_kn,
        stride_vn,
        offs_q,
        offs_d,
        0,
        k_full,
        N_K,
        offset,
        qk_scale,
        BK,
        False,
        False,
        PRECISION,
    )
    if IS_CAUSAL or not EVEN_K:
        grad_q = _backward_q_stage(
            grad_q,
            q,
            grad_out,
            lse,
            delta,
            K,
            V,
            stride_kn,
            stride_vn,
            offs_q,
            offs_d,
            k_full,
            k_end,
            N_K,
            offset,
            qk_scale,
            BK,
            IS_CAUSAL,
            not EVEN_K,
            PRECISION,
        )
    grad_q *= scale  # dQ = dS K / sqrt(d)
    pointers = DQ + b * stride_qb + offs_q[:, None] * stride_qn + offs_d[None, :]
    if EVEN_Q:
        tl.store(pointers, grad_q.to(DQ.dtype.element_ty))
    else:
        tl.store(pointers, grad_q.to(DQ.dtype.element_ty), mask=offs_q[:, None] < N_Q)


# ---------------------------------------------------------------------------------------------
# Host side: autotuning, launches, the autograd.Function.
# ---------------------------------------------------------------------------------------------

#: Compile-time flags from the chosen tiles: a length that is a multiple of its tile compiles
#: no bounds masks.
_EVEN = {
    "EVEN_Q": lambda args: args["N_Q"] % args["BQ"] == 0,
    "EVEN_K": lambda args: args["N_K"] % args["BK"] == 0,
}


def argument_types(args: dict) -> tuple[dict[str, str], tuple[str, ...]]:
    """Triton types of a launch's runtime arguments (tensors as pointers, ints as i32 or i64,
    floats as fp32) and the names Triton's launcher marks divisible by 16."""
    types, divisible = {}, []
    for name, value in args.items():
        if isinstance(value, torch.Tensor):
            types[name] = "*" + TRITON_DTYPES[value.dtype]
            aligned = value.data_ptr() % 16 == 0
        elif isinstance(value, bool) or not isinstance(value, int | float):
            continue
        elif isinstance(value, int):
            types[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            aligned = value % 16 == 0
        else:
            types[name] = "fp32"
            aligned = False
        if aligned:
            divisible.append(name)
    return types, tuple(divisible)


def configs_that_fit(kernel, configs: list, args: dict, constexprs: dict, target: Target) -> list:
    """The autotune ``configs`` whose compiled ``kernel`` needs no more shared memory than
    ``target`` has, for a launch with runtime ``args`` and compile-time ``constexprs``.

    Each configuration is compiled here for the check (Triton caches the binary on disk, so a
    later run pays nothing; autotuning compiles its own, specialised launch as usual)."""
    types, divisible = argument_types(args)
    kept = []
    for config in configs:
        compiled = compile_kernel(
            kernel,
            types,
            {**constexprs, **config.kwargs},
            num_warps=config.num_warps,
            num_stages=config.num_stages,
            target=target,
            divisible=divisible,
        )
        if compiled.metadata.shared <= target.max_shared_bytes:
            kept.append(config)
    if not kept:
        raise ValueError(
            f"no autotune configuration of {kernel.__name__} fits in {target.max_shared_bytes} "
            f"bytes of shared memory on {target.name} (constexprs {constexprs})"
        )
    return kept


def _current_target() -> Target:  # GPU-only
    from triton.runtime import driver

    device = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(device)
    shared = driver.active.utils.get_device_properties(device)["max_shared_mem"]
    return Target(
        f"sm_{major}{minor}", 10 * major + minor, torch.cuda.get_device_name(device), shared
    )


def _pruner(kernel, name: str):
    """``early_config_prune`` for ``triton.autotune``, run on the autotuner's cache misses only
    (GPU-only): the configurations ``flash_configs`` keeps for this kernel, head dimension and
    element size; on a GPU whose architecture that table was not compiled for, only those that
    also fit its shared memory (compiled here to see, once per argument types)."""
    checked: dict[tuple, list] = {}

    def prune(configs, named_args, **kwargs):
        kept = configs_for(name, kwargs["D"], named_args["Q"].element_size(), configs)
        target = _current_target()
        if target.arch in VERIFIED_ARCHS:
            return kept
        constexprs = {k: v for k, v in kwargs.items() if k in kernel.arg_names}
        constexprs.update(EVEN_Q=False, EVEN_K=False)  # the most code: every mask compiled in
        runtime = {k: v for k, v in named_args.items() if k not in constexprs}
        types, divisible = argument_types(runtime)
        key = (tuple(sorted(types.items())), divisible, tuple(sorted(constexprs.items())))
        if key not in checked:
            checked[key] = configs_that_fit(kernel, kept, runtime, constexprs, target)
        return checked[key]

    return prune


#: What the autotuner keys its choice on. The batch (batch x heads) enters as its bucket
#: (``batch_bucket``): one head and sixteen heads fill the GPU's multiprocessors differently
#: (at 4k tokens and 128-row tiles, 32 programs against 512 on 132 SMs), so each gets its own
#: tuning; without it, the first shape tuned would choose the tiles of every later one.
AUTOTUNE_KEY = ("N_Q", "N_K", "D", "IS_CAUSAL", "BATCH_BUCKET")


def batch_bucket(batch: int) -> int:
    """The batch (batch x heads) as the autotuner's key sees it: the next power of two, so
    that 15 and 16 heads share a tuning and 1 and 16 do not."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    return 1 << (batch - 1).bit_length()


def _tuned(kernel, name: str):
    """``kernel`` with its EVEN_* flags derived from the tiles, autotuned on a GPU over
    ``flash_configs``' configurations; in the interpreter, run with fixed small tiles."""
    with_flags = triton.heuristics(_EVEN)(kernel)
    if INTERPRETED:
        return with_flags
    return triton.autotune(
        configs=autotune_configs(name),
        key=list(AUTOTUNE_KEY),
        prune_configs_by={"early_config_prune": _pruner(kernel, name)},
    )(with_flags)


_forward = _tuned(_flash_forward_kernel, "flash_forward")
_backward_kv = _tuned(_flash_backward_kv_kernel, "flash_backward_kv")
_backward_q = _tuned(_flash_backward_q_kernel, "flash_backward_q")
_preprocess = triton.heuristics({"EVEN_Q": lambda a: a["N_Q"] % a["BQ"] == 0})(
    _flash_backward_preprocess_kernel
)
#: The kernels and the loops they call, by role, for showing their source
#: (``triton_compile.kernel_source``).
SOURCES = {
    "forward": _flash_forward_kernel,
    "forward stage": _forward_stage,
    "backward preprocess": _flash_backward_preprocess_kernel,
    "backward dK dV": _flash_backward_kv_kernel,
    "backward dK dV stage": _backward_kv_stage,
    "backward dQ": _flash_backward_q_kernel,
    "backward dQ stage": _backward_q_stage,
}
#: Tile sizes passed explicitly in the interpreter; the autotuner picks them on a GPU.
_FIXED_TILES = {"BQ": INTERPRETER_TILE, "BK": INTERPRETER_TILE} if INTERPRETED else {}
#: The configuration of correctness checks on a GPU (see ``pinned_config``): None pins, for each
#: kernel, the first configuration ``flash_configs`` keeps for the launch's head dimension and
#: element size (its smallest tiles, compiled by the search for every target).
CHECK_CONFIG = None
_pinned: list = []
#: While ``recorded_launches`` runs: (kernel name, (BQ, BK, num_warps, num_stages)) of each
#: launch with pinned tiles, so a check can show the configuration it asked for is the one run.
_launches: list | None = None


Config = tuple[int, int, int, int]


def _check_tiles(config: Config) -> None:
    bq, bk = config[:2]
    if bq not in (16, 32, 64, 128) or bk not in (16, 32, 64, 128):
        raise ValueError(f"tile sizes must be 16, 32, 64 or 128, got BQ={bq} BK={bk}")


@contextlib.contextmanager
def pinned_config(config: Config | dict[str, Config] | None = CHECK_CONFIG):
    """Inside the block, the kernels run with one (BQ, BK, num_warps, num_stages), with the
    first kept configuration of each kernel (None), or, given {kernel name: configuration}
    (names of ``flash_configs.KERNELS``), the named kernels with theirs and the others with
    their first kept one, instead of being autotuned (GPU; the interpreter always runs
    16 x 16 tiles).

    Autotuning compiles every configuration of all three kernels for each new input shape and
    dtype (~0.9 s a compile): right for a benchmark, far too slow for a correctness check over
    many odd shapes. A check pins a configuration; ``tests/test_flash_attention.py`` checks
    every configuration the autotuner may pick this way."""
    if isinstance(config, dict):
        unknown = sorted(set(config) - set(KERNELS))
        if unknown:
            raise ValueError(f"unknown kernels {unknown}; valid: {', '.join(KERNELS)}")
        for one in config.values():
            _check_tiles(one)
    elif config is not None:
        _check_tiles(config)
    _pinned.append(config)
    try:
        yield
    finally:
        _pinned.pop()


@contextlib.contextmanager
def recorded_launches():
    """Inside the block, the list it yields receives (kernel name, configuration) of every
    launch whose tiles were pinned (none in the interpreter, which runs fixed tiles)."""
    global _launches
    outer, _launches = _launches, []
    try:
        yield _launches
    finally:
        _launches = outer


def _kernel_and_config(tuned, name: str, head_dim: int, dtype: torch.dtype) -> tuple[object, dict]:
    """The kernel to launch and its extra launch arguments: the autotuner's (none), the
    interpreter's fixed tiles, or the pinned configuration's tiles, warps and stages."""
    if INTERPRETED:
        return tuned, _FIXED_TILES
    if _pinned:
        pinned = _pinned[-1]
        if isinstance(pinned, dict):
            pinned = pinned.get(name)
        # The dtype's itemsize, not a tensor's element_size(): no aten operator on the host.
        bq, bk, warps, stages = pinned or kept_configs(name, head_dim, dtype.itemsize)[0]
        if _launches is not None:
            _launches.append((name, (bq, bk, warps, stages)))
        return tuned.fn, {"BQ": bq, "BK": bk, "num_warps": warps, "num_stages": stages}
    return tuned, {}


def launch_grid(batch: int, n: int, tile: int) -> tuple[int, int]:
    """The grid of a kernel over ``batch`` (axis 0) and tiles of ``tile`` rows of ``n`` (axis 1),
    or one clear error where CUDA could not launch it."""
    tiles = triton.cdiv(n, tile)
    if batch > 2**31 - 1 or tiles > MAX_GRID_Y:
        raise ValueError(
            f"grid ({batch}, {tiles}) too large: at most 2^31 - 1 batch elements (batch x heads) "
            f"and {MAX_GRID_Y} tiles of {tile} (sequence length {n})"
        )
    return batch, tiles


def _precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"


def launch_forward(
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, is_causal: bool
) -> None:
    """The forward kernel on q (b, n_q, d), k, v (b, n_k, d) writing out (like q) and the
    logsumexp lse (b, n_q, float32). Rows must be contiguous (stride 1 along d); the batch
    stride may be anything, 2^31 elements or more included."""
    batch, n_q, d = q.shape
    kernel, config = _kernel_and_config(_forward, "flash_forward", d, q.dtype)
    kernel[lambda meta: launch_grid(batch, n_q, meta["BQ"])](
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
        batch_bucket(batch),
        D=d,
        IS_CAUSAL=is_causal,
        PRECISION=_precision(q.dtype),
        **config,
    )


def launch_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    grad_out: Tensor,
    lse: Tensor,
    grad_q: Tensor,
    grad_k: Tensor,
    grad_v: Tensor,
    is_causal: bool,
) -> None:
    """The three backward launches: D = rowsum(dO * O), then dK and dV, then dQ. out, dO and
    dQ share q's strides, dK and dV k's (v may differ); lse is (b, n_q) float32."""
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    delta = torch.empty_like(lse)
    bq, warps = PREPROCESS_CONFIG
    _preprocess[(batch, triton.cdiv(n_q, bq))](
        out,
        grad_out,
        delta,
        q.stride(0),
        q.stride(1),
        lse.stride(0),
        n_q,
        D=d,
        BQ=bq,
        num_warps=warps,
    )
    strides = (
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        lse.stride(0),
    )
    meta = dict(D=d, IS_CAUSAL=is_causal, PRECISION=_precision(q.dtype))
    sizes = (n_q, n_k, 1 / math.sqrt(d), batch_bucket(batch))
    kernel, config = _kernel_and_config(_backward_kv, "flash_backward_kv", d, q.dtype)
    kernel[lambda m: launch_grid(batch, n_k, m["BK"])](
        q, k, v, grad_out, lse, delta, grad_k, grad_v, *strides, *sizes, **meta, **config
    )
    kernel, config = _kernel_and_config(_backward_q, "flash_backward_q", d, q.dtype)
    kernel[lambda m: launch_grid(batch, n_q, m["BQ"])](
        q, k, v, grad_out, lse, delta, grad_q, *strides, *sizes, **meta, **config
    )


def _check(q: Tensor, k: Tensor, v: Tensor) -> None:
    check_inputs(q, k, v)
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dimension {q.shape[-1]} unsupported; valid: {HEAD_DIMS}")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"dtype {q.dtype} unsupported; valid: float32, float16, bfloat16")
    if INTERPRETED and q.dtype == torch.bfloat16:
        raise ValueError("the Triton interpreter cannot compute bfloat16; use float16 or float32")


def _contiguous(t: Tensor) -> Tensor:
    """``t`` itself when its layout is already contiguous (no operator at all), else a copy."""
    return t if t.is_contiguous() else t.contiguous()


class FlashAttentionTriton(torch.autograd.Function):
    """``FlashAttentionTriton.apply(q, k, v, is_causal=False)`` for q (b, n_q, d), k, v (b, n_k, d).

    One program per (batch element, query tile) in the forward; saves q, k, v, the output and
    the logsumexp (b, n_q) for backward.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False) -> Tensor:
        _check(q, k, v)
        q, k, v = _contiguous(q), _contiguous(k), _contiguous(v)
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:2], device=q.device, dtype=torch.float32)
        launch_forward(q, k, v, out, lse, is_causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal = is_causal
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        launch_backward(
            q, k, v, out, _contiguous(grad_out), lse, grad_q, grad_k, grad_v, ctx.is_causal
        )
        return grad_q, grad_k, grad_v, None


#: ``FlashAttentionTriton`` for ``TransformerLM.set_attention``. Under ``torch.compile`` (the
#: ladder's compile rung) it runs as its own kernels between the compiled graphs: traced, dynamo
#: would step into the autotuner, whose prune step reads ``data_ptr()`` and compiles kernels.
flash_attention_triton = as_model_attention(FlashAttentionTriton, opaque=True)


def host_calls(function, q: Tensor, k: Tensor, v: Tensor, is_causal: bool = True) -> dict:
    """What one forward + backward of the autograd.Function ``function`` does on the host,
    after a first call (which autotunes): Triton kernel launches and PyTorch operators outside
    them (autograd's own ``detach`` of what it saves aside), each as a list of names, forward
    and backward apart. The interpreter runs the same host code as a GPU."""
    from torch.utils._python_dispatch import TorchDispatchMode

    if INTERPRETED:
        from triton.runtime.interpreter import InterpretedFunction as Launcher
    else:
        from triton.runtime.jit import JITFunction as Launcher
    launches, operators, in_kernel = [], [], []
    launch = Launcher.run

    def counted(self, *args, **kwargs):
        launches.append(self.fn.__name__)
        in_kernel.append(True)  # the interpreter copies arguments with aten operators: not ours
        try:
            return launch(self, *args, **kwargs)
        finally:
            in_kernel.pop()

    class Operators(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not in_kernel and func.overloadpacket.__name__ != "detach":
                operators.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    grad = torch.randn_like(q)
    function.apply(q, k, v, is_causal).backward(grad)  # the first call (autotunes on a GPU)
    q.grad = k.grad = v.grad = None
    Launcher.run = counted
    try:
        with Operators():
            out = function.apply(q, k, v, is_causal)
            forward = (list(launches), list(operators))
            out.backward(grad)
    finally:
        Launcher.run = launch
    return {
        "forward_launches": forward[0],
        "forward_operators": forward[1],
        "backward_launches": launches[len(forward[0]) :],
        "backward_operators": operators[len(forward[1]) :],
    }


def host_call_table(
    functions: dict, q: Tensor, k: Tensor, v: Tensor, is_causal: bool = True
) -> pd.DataFrame:
    """``host_calls`` of each named autograd.Function, one row each: Triton launches and
    PyTorch operators of a forward and of a backward, and the operators' distinct names."""
    import pandas as pd

    rows = []
    for name, function in functions.items():
        calls = host_calls(function, q, k, v, is_causal)
        rows.append(
            {
                "implementation": name,
                "forward_launches": len(calls["forward_launches"]),
                "forward_operators": len(calls["forward_operators"]),
                "backward_launches": len(calls["backward_launches"]),
                "backward_operators": len(calls["backward_operators"]),
                "operators": ", ".join(
                    sorted(set(calls["forward_operators"] + calls["backward_operators"]))
                ),
            }
        )
    return pd.DataFrame(rows)
