"""FlashAttention-2 as Triton kernels: forward, and a backward from the saved logsumexp in two
kernels (one for dK and dV, one for dQ; no atomics).

Same algorithm and conventions as ``flash_torch`` (read that module's docstring first). Memory
traffic per (batch, head): the forward reads Q once and K, V once per query tile and writes O
and L once; the backward recomputes the scores instead of reading a stored (n_q x n_k) matrix.

Written with plain pointer arithmetic and masks (no block pointers, which current Triton no
longer supports), so the same kernels run compiled on CUDA and in the Triton interpreter on a
CPU (``TRITON_INTERPRET=1``, set here before the kernels are defined when there is no CUDA).
The interpreter cannot compute bfloat16, so bfloat16 inputs are refused there. float32 dots use
``input_precision="ieee"`` (no TF32), so results match a float32 reference. The interpreter does
not type-check what the compiler rejects, so ``perflab.attention.aot`` compiles every kernel
for sm_80, sm_90 and sm_100 in the test suite.

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

import torch
from torch import Tensor

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton.language" in sys.modules:  # too late: its kernels would fail when interpreted
        raise ImportError(
            "Triton was imported (e.g. by torch.compile) before TRITON_INTERPRET=1 was set; "
            "import perflab first, or start Python with TRITON_INTERPRET=1"
        )
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402  (after TRITON_INTERPRET is decided)
import triton.language as tl  # noqa: E402

from perflab.attention.flash_torch import as_model_attention, check_inputs  # noqa: E402
from perflab.attention.triton_compile import TRITON_DTYPES, Target, compile_kernel  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
HEAD_DIMS = (16, 32, 64, 128)  # tl.dot needs power-of-two sizes of at least 16
INTERPRETER_TILE = 16  # small tiles: the interpreter runs each program in NumPy
#: CUDA's limit on grid axes 1 and 2 (axis 0 takes up to 2^31 - 1).
MAX_GRID_Y = 65_535
#: On a GPU the tile sizes, warps and stages are autotuned per (n_q, n_k, d, causal) over these
#: (BQ, BK, num_warps, num_stages), after dropping those that need more shared memory than the
#: GPU has.
AUTOTUNE_CONFIGS = [
    (bq, bk, warps, stages)
    for bq, bk in ((64, 64), (128, 64), (64, 128), (128, 128), (32, 64))
    for warps, stages in ((4, 2), (8, 3))
]


@triton.jit
def _load_rows(base, offs, stride, offs_d, n):
    """Rows ``offs`` (all D columns) of a (n, D) matrix at ``base``; zeros past row n."""
    return tl.load(base + offs[:, None] * stride + offs_d[None, :], mask=offs[:, None] < n,
                   other=0.0)  # fmt: skip


@triton.jit
def _flash_forward_kernel(
    # tensors: Q (b, n_q, d), K and V (b, n_k, d), Out like Q, L (b, n_q) in float32
    Q, K, V, Out, L,
    # strides, in elements
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_ob, stride_on,
    stride_lb,
    # sizes and the softmax scale 1/sqrt(d)
    N_Q, N_K, scale,
    # compile-time: head dimension, tile sizes, masking, dot precision
    D: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, IS_CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    b, tile = tl.program_id(0).to(tl.int64), tl.program_id(1)
    offs_q = tile * BQ + tl.arange(0, BQ)
    offs_d = tl.arange(0, D)
    q = _load_rows(Q + b * stride_qb, offs_q, stride_qn, offs_d, N_Q)
    row_max = tl.full((BQ,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BQ,), tl.float32)
    acc = tl.zeros((BQ, D), tl.float32)
    offset = N_K - N_Q
    k_end = N_K
    k_full = 0  # key tiles before this one are visible to every query of the tile
    if IS_CAUSAL:
        k_end = tl.minimum(N_K, (tile + 1) * BQ + offset)  # later tiles are entirely masked
        k_full = tl.maximum(tile * BQ + offset + 1, 0) // BK * BK
    for k_start in range(0, k_end, BK):
        offs_k = k_start + tl.arange(0, BK)
        k = _load_rows(K + b * stride_kb, offs_k, stride_kn, offs_d, N_K)
        v = _load_rows(V + b * stride_vb, offs_k, stride_vn, offs_d, N_K)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        # (BQ, BK) from the start: a branch may not change a variable's shape (the compiler
        # rejects it; the interpreter does not check).
        visible = tl.broadcast_to(offs_k[None, :] < N_K, (BQ, BK))
        if IS_CAUSAL:
            if k_start >= k_full:  # diagonal tiles only: the others need no causal mask
                visible = visible & (offs_k[None, :] <= offs_q[:, None] + offset)
        scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(scores, 1))
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        p = tl.exp(scores - safe_max[:, None])
        correction = tl.exp(row_max - safe_max)
        row_sum = correction * row_sum + tl.sum(p, 1)
        acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        row_max = new_max
    empty = row_sum == 0.0
    out = acc / tl.where(empty, 1.0, row_sum)[:, None]
    lse = tl.where(empty, float("-inf"), row_max + tl.log(tl.where(empty, 1.0, row_sum)))
    tl.store(Out + b * stride_ob + offs_q[:, None] * stride_on + offs_d[None, :],
             out.to(Out.dtype.element_ty), mask=offs_q[:, None] < N_Q)  # fmt: skip
    tl.store(L + b * stride_lb + offs_q, lse, mask=offs_q < N_Q)


@triton.jit
def _tile_probabilities(q, k, lse, offs_q, offs_k, N_Q, N_K, scale, offset,
                        IS_CAUSAL: tl.constexpr, PRECISION: tl.constexpr):  # fmt: skip
    """P = exp(S - L) for one tile, exactly 0 where masked or out of range."""
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
    visible = (offs_k[None, :] < N_K) & (offs_q[:, None] < N_Q)
    if IS_CAUSAL:
        visible = visible & (offs_k[None, :] <= offs_q[:, None] + offset)
    safe_lse = tl.where(lse == float("-inf"), 0.0, lse)
    return tl.where(visible, tl.exp(scores - safe_lse[:, None]), 0.0)


@triton.jit
def _flash_backward_kv_kernel(
    # tensors: inputs, upstream gradient dO, L and D = rowsum(dO * O) (b, n_q), outputs dK, dV
    Q, K, V, DO, L, DELTA, DK, DV,
    # strides, in elements (dO shares Q's layout, dK and dV share K's; L and D are contiguous)
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_lb,
    N_Q, N_K, scale,
    D: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, IS_CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    b, tile = tl.program_id(0).to(tl.int64), tl.program_id(1)
    offs_k = tile * BK + tl.arange(0, BK)
    offs_d = tl.arange(0, D)
    k_mask = offs_k[:, None] < N_K
    k = _load_rows(K + b * stride_kb, offs_k, stride_kn, offs_d, N_K)
    v = _load_rows(V + b * stride_vb, offs_k, stride_vn, offs_d, N_K)
    grad_k = tl.zeros((BK, D), tl.float32)
    grad_v = tl.zeros((BK, D), tl.float32)
    offset = N_K - N_Q
    q_begin = 0
    if IS_CAUSAL:  # queries before this one see none of the tile's keys
        q_begin = tl.maximum(tile * BK - offset, 0) // BQ * BQ
    for q_start in range(q_begin, N_Q, BQ):
        offs_q = q_start + tl.arange(0, BQ)
        q = _load_rows(Q + b * stride_qb, offs_q, stride_qn, offs_d, N_Q)
        grad_out = _load_rows(DO + b * stride_qb, offs_q, stride_qn, offs_d, N_Q)
        lse = tl.load(L + b * stride_lb + offs_q, mask=offs_q < N_Q, other=0.0)
        delta = tl.load(DELTA + b * stride_lb + offs_q, mask=offs_q < N_Q, other=0.0)
        p = _tile_probabilities(q, k, lse, offs_q, offs_k, N_Q, N_K, scale, offset, IS_CAUSAL,
                                PRECISION)  # fmt: skip
        grad_v += tl.dot(tl.trans(p.to(grad_out.dtype)), grad_out, input_precision=PRECISION)
        grad_p = tl.dot(grad_out, tl.trans(v), input_precision=PRECISION)
        grad_s = p * (grad_p - delta[:, None])
        grad_k += tl.dot(tl.trans(grad_s.to(q.dtype)), q, input_precision=PRECISION) * scale
    tl.store(DK + b * stride_kb + offs_k[:, None] * stride_kn + offs_d[None, :],
             grad_k.to(DK.dtype.element_ty), mask=k_mask)  # fmt: skip
    tl.store(DV + b * stride_kb + offs_k[:, None] * stride_kn + offs_d[None, :],
             grad_v.to(DV.dtype.element_ty), mask=k_mask)  # fmt: skip


@triton.jit
def _flash_backward_q_kernel(
    # tensors: inputs, dO, L and D (b, n_q), output dQ (Q's layout)
    Q, K, V, DO, L, DELTA, DQ,
    stride_qb, stride_qn, stride_kb, stride_kn, stride_vb, stride_vn, stride_lb,
    N_Q, N_K, scale,
    D: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, IS_CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):  # fmt: skip
    b, tile = tl.program_id(0).to(tl.int64), tl.program_id(1)
    offs_q = tile * BQ + tl.arange(0, BQ)
    offs_d = tl.arange(0, D)
    q_mask = offs_q[:, None] < N_Q
    q = _load_rows(Q + b * stride_qb, offs_q, stride_qn, offs_d, N_Q)
    grad_out = _load_rows(DO + b * stride_qb, offs_q, stride_qn, offs_d, N_Q)
    lse = tl.load(L + b * stride_lb + offs_q, mask=offs_q < N_Q, other=0.0)
    delta = tl.load(DELTA + b * stride_lb + offs_q, mask=offs_q < N_Q, other=0.0)
    grad_q = tl.zeros((BQ, D), tl.float32)
    offset = N_K - N_Q
    k_end = N_K
    if IS_CAUSAL:
        k_end = tl.minimum(N_K, (tile + 1) * BQ + offset)
    for k_start in range(0, k_end, BK):
        offs_k = k_start + tl.arange(0, BK)
        k = _load_rows(K + b * stride_kb, offs_k, stride_kn, offs_d, N_K)
        v = _load_rows(V + b * stride_vb, offs_k, stride_vn, offs_d, N_K)
        p = _tile_probabilities(q, k, lse, offs_q, offs_k, N_Q, N_K, scale, offset, IS_CAUSAL,
                                PRECISION)  # fmt: skip
        grad_p = tl.dot(grad_out, tl.trans(v), input_precision=PRECISION)
        grad_s = p * (grad_p - delta[:, None])
        grad_q += tl.dot(grad_s.to(k.dtype), k, input_precision=PRECISION) * scale
    tl.store(DQ + b * stride_qb + offs_q[:, None] * stride_qn + offs_d[None, :],
             grad_q.to(DQ.dtype.element_ty), mask=q_mask)  # fmt: skip


def _triton_configs() -> list:
    return [triton.Config({"BQ": bq, "BK": bk}, num_warps=warps, num_stages=stages)
            for bq, bk, warps, stages in AUTOTUNE_CONFIGS]  # fmt: skip


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
        compiled = compile_kernel(kernel, types, {**constexprs, **config.kwargs},
                                  num_warps=config.num_warps, num_stages=config.num_stages,
                                  target=target, divisible=divisible)  # fmt: skip
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
    return Target(f"sm_{major}{minor}", 10 * major + minor, torch.cuda.get_device_name(device),
                  shared)  # fmt: skip


def _shared_memory_pruner(kernel):
    """``early_config_prune`` for ``triton.autotune``: drops configurations that would not fit
    this GPU's shared memory before any is benchmarked (GPU-only).

    Shared memory depends on the dtypes and the compile-time values, not on the sequence
    lengths, so the answer is kept per (argument types, constexprs): a sweep over lengths
    compiles each configuration for the check once, not once per length (~0.9 s a compile)."""
    kept: dict[tuple, list] = {}

    def prune(configs, named_args, **kwargs):
        constexprs = {k: v for k, v in kwargs.items() if k in kernel.arg_names}
        runtime = {k: v for k, v in named_args.items() if k not in constexprs}
        types, divisible = argument_types(runtime)
        key = (tuple(sorted(types.items())), divisible, tuple(sorted(constexprs.items())),
               tuple(str(c) for c in configs))  # fmt: skip
        if key not in kept:
            kept[key] = configs_that_fit(kernel, configs, runtime, constexprs, _current_target())
        return kept[key]

    return prune


def _tuned(kernel):
    """``kernel`` autotuned over ``AUTOTUNE_CONFIGS`` on a GPU; in the interpreter, fixed small
    tiles."""
    if INTERPRETED:
        return kernel
    return triton.autotune(configs=_triton_configs(), key=["N_Q", "N_K", "D", "IS_CAUSAL"],
                           prune_configs_by={"early_config_prune": _shared_memory_pruner(kernel)}
                           )(kernel)  # fmt: skip


_forward = _tuned(_flash_forward_kernel)
_backward_kv = _tuned(_flash_backward_kv_kernel)
_backward_q = _tuned(_flash_backward_q_kernel)
#: Tile sizes passed explicitly in the interpreter; the autotuner picks them on a GPU.
_FIXED_TILES = {"BQ": INTERPRETER_TILE, "BK": INTERPRETER_TILE} if INTERPRETED else {}
#: The configuration of correctness checks on a GPU (see ``pinned_config``).
CHECK_CONFIG = (64, 64, 4, 2)
_pinned: list[tuple[int, int, int, int]] = []


@contextlib.contextmanager
def pinned_config(config: tuple[int, int, int, int] = CHECK_CONFIG):
    """Inside the block, the kernels run with one (BQ, BK, num_warps, num_stages) instead of
    being autotuned (GPU; the interpreter always runs 16 x 16 tiles).

    Autotuning compiles every configuration of all three kernels for each new input shape and
    dtype (~0.9 s a compile): right for a benchmark, far too slow for a correctness check over
    many odd shapes. A check pins a configuration; ``tests/test_flash_attention.py`` checks
    every one of ``AUTOTUNE_CONFIGS`` this way, so whatever the autotuner picks is checked."""
    bq, bk, warps, stages = config
    if bq not in (16, 32, 64, 128) or bk not in (16, 32, 64, 128):
        raise ValueError(f"tile sizes must be 16, 32, 64 or 128, got BQ={bq} BK={bk}")
    _pinned.append(config)
    try:
        yield
    finally:
        _pinned.pop()


def _kernel_and_config(tuned) -> tuple[object, dict]:
    """The kernel to launch and its extra launch arguments: the autotuner's (none), the
    interpreter's fixed tiles, or the pinned configuration's tiles, warps and stages."""
    if INTERPRETED:
        return tuned, dict(_FIXED_TILES)
    if _pinned:
        bq, bk, warps, stages = _pinned[-1]
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


def launch_forward(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                   is_causal: bool) -> None:  # fmt: skip
    """The forward kernel on q (b, n_q, d), k, v (b, n_k, d) writing out (like q) and the
    logsumexp lse (b, n_q, float32). Rows must be contiguous (stride 1 along d); the batch
    stride may be anything, 2^31 elements or more included."""
    batch, n_q, d = q.shape
    kernel, config = _kernel_and_config(_forward)
    kernel[lambda meta: launch_grid(batch, n_q, meta["BQ"])](
        q, k, v, out, lse,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), lse.stride(0),
        n_q, k.shape[1], 1 / math.sqrt(d),
        D=d, IS_CAUSAL=is_causal, PRECISION=_precision(q.dtype), **config,
    )  # fmt: skip


def launch_backward(q: Tensor, k: Tensor, v: Tensor, grad_out: Tensor, lse: Tensor,
                    delta: Tensor, grad_q: Tensor, grad_k: Tensor, grad_v: Tensor,
                    is_causal: bool) -> None:  # fmt: skip
    """The two backward kernels. dO and dQ share q's strides, dK and dV k's (v may differ);
    lse and delta = rowsum(dO * O) are (b, n_q) float32 with one stride."""
    batch, n_q, d = q.shape
    n_k = k.shape[1]
    strides = (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
               lse.stride(0))  # fmt: skip
    meta = dict(D=d, IS_CAUSAL=is_causal, PRECISION=_precision(q.dtype))
    scale = 1 / math.sqrt(d)
    kernel, config = _kernel_and_config(_backward_kv)
    kernel[lambda m: launch_grid(batch, n_k, m["BK"])](
        q, k, v, grad_out, lse, delta, grad_k, grad_v, *strides, n_q, n_k, scale, **meta, **config
    )
    kernel, config = _kernel_and_config(_backward_q)
    kernel[lambda m: launch_grid(batch, n_q, m["BQ"])](
        q, k, v, grad_out, lse, delta, grad_q, *strides, n_q, n_k, scale, **meta, **config
    )


def _check(q: Tensor, k: Tensor, v: Tensor) -> None:
    check_inputs(q, k, v)
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dimension {q.shape[-1]} unsupported; valid: {HEAD_DIMS}")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"dtype {q.dtype} unsupported; valid: float32, float16, bfloat16")
    if INTERPRETED and q.dtype == torch.bfloat16:
        raise ValueError("the Triton interpreter cannot compute bfloat16; use float16 or float32")


class FlashAttentionTriton(torch.autograd.Function):
    """``FlashAttentionTriton.apply(q, k, v, is_causal=False)`` for q (b, n_q, d), k, v (b, n_k, d).

    One program per (batch element, query tile) in the forward; saves q, k, v, the output and
    the logsumexp (b, n_q) for backward.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False) -> Tensor:
        _check(q, k, v)
        q, k, v = (t.contiguous() for t in (q, k, v))
        batch, n_q, _ = q.shape
        out = torch.empty_like(q)
        lse = torch.empty(batch, n_q, device=q.device, dtype=torch.float32)
        launch_forward(q, k, v, out, lse, is_causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.is_causal = is_causal
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        delta = (grad_out.float() * out.float()).sum(dim=-1).contiguous()  # D = rowsum(dO * O)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        launch_backward(q, k, v, grad_out, lse, delta, grad_q, grad_k, grad_v, ctx.is_causal)
        return grad_q, grad_k, grad_v, None


#: ``FlashAttentionTriton`` for ``TransformerLM.set_attention``.
flash_attention_triton = as_model_attention(FlashAttentionTriton)
