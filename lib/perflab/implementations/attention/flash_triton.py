"""FlashAttention-2 as Triton kernels: a forward kernel (``flash_forward``), and a backward in
three launches (``flash_backward``: a preprocess kernel for D = rowsum(dO * O), one kernel for
dK and dV, one for dQ; no atomics); here, their host path: the launches and the
``torch.autograd.Function`` (the tiles each launch runs: ``flash_tuning``).

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
(``TRITON_INTERPRET=1``, set by ``interpreter`` before the kernels are defined when there is no
CUDA). The
interpreter cannot compute bfloat16, so bfloat16 inputs are refused there. float32 dots use
``input_precision="ieee"`` (no TF32), so results match a float32 reference. The interpreter
does not type-check what the compiler rejects, so ``perflab.tools.kernels`` compiles every
kernel for sm_80, sm_90 and sm_100 in the test suite, and counts the instructions of each loop.

Launch grid: (batch, tiles), the batch (batch x heads when called from the model) on axis 0,
which CUDA allows up to 2^31 - 1 programs, the tiles on axis 1 (at most 65,535). Offsets to a
batch element are 64-bit (``b * stride`` passes 2^31 elements in large inputs); offsets within
one (n, d) matrix stay 32-bit, enough for n * d < 2^31.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from perflab.implementations.attention.flash_backward import (
    _backward_kv_stage,
    _backward_q_stage,
    _flash_backward_kv_kernel,
    _flash_backward_preprocess_kernel,
    _flash_backward_q_kernel,
)
from perflab.implementations.attention.flash_configs import PREPROCESS_CONFIG
from perflab.implementations.attention.flash_forward import _flash_forward_kernel, _forward_stage
from perflab.implementations.attention.flash_torch import as_model_attention, check_inputs
from perflab.implementations.attention.flash_tuning import batch_bucket, kernel_and_config, tuned
from perflab.implementations.attention.interpreter import INTERPRETED, triton

HEAD_DIMS = (16, 32, 64, 128)  # tl.dot needs power-of-two sizes of at least 16
#: CUDA's limit on grid axes 1 and 2 (axis 0 takes up to 2^31 - 1).
MAX_GRID_Y = 65_535


_forward = tuned(_flash_forward_kernel, "flash_forward")
_backward_kv = tuned(_flash_backward_kv_kernel, "flash_backward_kv")
_backward_q = tuned(_flash_backward_q_kernel, "flash_backward_q")
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
    kernel, config = kernel_and_config(_forward, "flash_forward", d, q.dtype)
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
    kernel, config = kernel_and_config(_backward_kv, "flash_backward_kv", d, q.dtype)
    kernel[lambda m: launch_grid(batch, n_k, m["BK"])](
        q, k, v, grad_out, lse, delta, grad_k, grad_v, *strides, *sizes, **meta, **config
    )
    kernel, config = kernel_and_config(_backward_q, "flash_backward_q", d, q.dtype)
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
