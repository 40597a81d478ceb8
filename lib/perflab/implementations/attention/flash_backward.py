"""FlashAttention-2's backward as three Triton kernels, no atomics: D = rowsum(dO * O); dK and
dV, one program per key tile, computed transposed (S^T = K Q^T); dQ, one program per query tile.
The scores are recomputed from Q, K and the saved log-sum-exp L, never read back. Why each
choice: ``flash_triton``'s docstring; their launches: ``flash_triton.launch_backward``."""

from __future__ import annotations

from .flash_forward import _heaviest_first, _load_rows, _load_vector
from .interpreter import tl, triton

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
