"""FlashAttention-2's forward as a Triton kernel: one program per (batch element, query tile),
K and V streaming past the resident Q tile, the softmax kept online in base 2, in two stages
(the tiles that need no mask, then the few that do); and the loaders the backward kernels
share. Why each choice: ``flash_triton``'s docstring; its launch: ``flash_triton.launch_forward``.
"""

from __future__ import annotations

from perflab.implementations.attention.interpreter import tl, triton


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
