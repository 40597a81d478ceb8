"""The first Triton kernel of notebook 06: a weighted sum over the last dimension, y = x @ w,
forward and backward.

x (rows, D), w (D,) -> y (rows,). Memory traffic: the forward reads rows*D + D elements and
writes rows; it does 2*rows*D FLOPs, so it is memory-bound on every device. Backward:
dx = dy[:, None] * w (an outer product, written once), dw = sum_rows dy[:, None] * x, summed per
row tile in the kernel and across tiles in PyTorch (one partial row per program, no atomics).
Each program handles ROWS rows and walks the D axis in chunks of COLS with masks, so any D works.
Row offsets are 64-bit: ``row * stride`` passes 2^31 elements in a large input.
"""

from __future__ import annotations

import torch
from torch import Tensor

# triton and tl come from interpreter, which sets TRITON_INTERPRET before importing triton
from perflab.implementations.attention.interpreter import INTERPRETED, tl, triton

ROWS = 16  # rows per program
COLS = 32  # columns per chunk of the D axis


@triton.jit
def _weighted_sum_forward_kernel(
    X, W, Y,  # x (rows, D) with row stride, w (D,), y (rows,)
    stride_x, N_ROWS, D,  # sizes
    ROWS: tl.constexpr, COLS: tl.constexpr,  # tile sizes
):  # fmt: skip
    offs_r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    acc = tl.zeros((ROWS,), tl.float32)
    for start in range(0, D, COLS):
        offs_c = start + tl.arange(0, COLS)
        x = tl.load(
            X + offs_r[:, None] * stride_x + offs_c[None, :],
            mask=(offs_r[:, None] < N_ROWS) & (offs_c[None, :] < D),
            other=0.0,
        )
        w = tl.load(W + offs_c, mask=offs_c < D, other=0.0)
        acc += tl.sum(x.to(tl.float32) * w.to(tl.float32)[None, :], axis=1)
    tl.store(Y + offs_r, acc.to(Y.dtype.element_ty), mask=offs_r < N_ROWS)


@triton.jit
def _weighted_sum_backward_kernel(
    X, W, DY, DX, DW_PARTIAL,  # inputs, upstream gradient, dx (like x), dw partials (tiles, D)
    stride_x, stride_dx, N_ROWS, D,  # strides and sizes
    ROWS: tl.constexpr, COLS: tl.constexpr,  # tile sizes
):  # fmt: skip
    tile = tl.program_id(0).to(tl.int64)
    offs_r = tile * ROWS + tl.arange(0, ROWS)
    dy = tl.load(DY + offs_r, mask=offs_r < N_ROWS, other=0.0).to(tl.float32)
    for start in range(0, D, COLS):
        offs_c = start + tl.arange(0, COLS)
        mask = (offs_r[:, None] < N_ROWS) & (offs_c[None, :] < D)
        x = tl.load(X + offs_r[:, None] * stride_x + offs_c[None, :], mask=mask, other=0.0)
        w = tl.load(W + offs_c, mask=offs_c < D, other=0.0).to(tl.float32)
        tl.store(
            DX + offs_r[:, None] * stride_dx + offs_c[None, :],
            (dy[:, None] * w[None, :]).to(DX.dtype.element_ty),
            mask=mask,
        )
        tl.store(
            DW_PARTIAL + tile * D + offs_c,
            tl.sum(dy[:, None] * x.to(tl.float32), axis=0),
            mask=offs_c < D,
        )


class WeightedSumTriton(torch.autograd.Function):
    """``WeightedSumTriton.apply(x, w)``: x (..., D), w (D,) -> (...,), i.e. ``x @ w``."""

    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor) -> Tensor:
        if w.dim() != 1 or x.shape[-1] != w.shape[0]:
            raise ValueError(
                f"need x (..., D) and w (D,); got {tuple(x.shape)} and {tuple(w.shape)}"
            )
        if x.dtype != w.dtype:
            raise ValueError(f"dtypes differ: x {x.dtype}, w {w.dtype}")
        if INTERPRETED and x.dtype == torch.bfloat16:
            raise ValueError(
                "the Triton interpreter cannot compute bfloat16; use float16 or float32"
            )
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        w = w.contiguous()
        y = torch.empty(x2.shape[0], device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(x2.shape[0], ROWS),)
        _weighted_sum_forward_kernel[grid](
            x2, w, y, x2.stride(0), x2.shape[0], x2.shape[1], ROWS=ROWS, COLS=COLS
        )
        ctx.save_for_backward(x2, w)
        ctx.lead = lead
        return y.reshape(lead)

    @staticmethod
    def backward(ctx, grad_y: Tensor):
        x2, w = ctx.saved_tensors
        grad_y = grad_y.reshape(-1).contiguous()
        tiles = triton.cdiv(x2.shape[0], ROWS)
        grad_x = torch.empty_like(x2)
        partial = torch.empty(tiles, x2.shape[1], device=x2.device, dtype=torch.float32)
        _weighted_sum_backward_kernel[(tiles,)](
            x2,
            w,
            grad_y,
            grad_x,
            partial,
            x2.stride(0),
            grad_x.stride(0),
            x2.shape[0],
            x2.shape[1],
            ROWS=ROWS,
            COLS=COLS,
        )
        grad_w = partial.sum(dim=0).to(w.dtype)
        return grad_x.reshape(*ctx.lead, x2.shape[1]), grad_w


#: The kernels by role, for showing their source (``triton_compile.kernel_source``).
SOURCES = {"forward": _weighted_sum_forward_kernel, "backward": _weighted_sum_backward_kernel}
