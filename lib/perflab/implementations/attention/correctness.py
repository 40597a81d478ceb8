"""Correctness of an attention implementation against a float64 reference (tests, notebook 06).

The reference is ``naive_attention`` in float64 on the same (rounded) inputs, with its
logsumexp and the gradients for a fixed random upstream gradient; differences are reported
per quantity as the largest absolute error divided by max(1, largest reference magnitude),
next to the tolerance for the input dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pandas as pd
import torch
from torch import Tensor

from perflab.implementations.attention.reference import attention_scores, naive_attention

#: Absolute and relative tolerance of outputs and logsumexp per input dtype; gradients get
#: ``GRADIENT_FACTOR`` times more. float32: tiles sum in another order than the reference;
#: float16 keeps 11 significant bits.
TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
GRADIENT_FACTOR = 5  # gradients sum more terms than outputs


def random_qkv(
    batch: int,
    n_q: int,
    n_k: int,
    d: int,
    dtype: torch.dtype,
    seed: int,
    device: str | torch.device = "cpu",
) -> list[Tensor]:
    """Fresh random q (batch, n_q, d), k and v (batch, n_k, d) that require grad."""
    generator = torch.Generator().manual_seed(seed)
    return [
        torch.randn(batch, n, d, generator=generator)
        .to(device=device, dtype=dtype)
        .requires_grad_()
        for n in (n_q, n_k, n_k)
    ]


def reference(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, seed: int = 99):
    """(output, logsumexp, upstream gradient, (dq, dk, dv)) in float64 on the CPU."""
    q64, k64, v64 = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
    out = naive_attention(q64, k64, v64, is_causal=is_causal)
    lse = torch.logsumexp(attention_scores(q64, k64, is_causal=is_causal), dim=-1)
    grad_out = torch.randn(
        out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )
    out.backward(grad_out)
    return out.detach(), lse.detach(), grad_out, (q64.grad, k64.grad, v64.grad)


def errors_against_reference(
    function: Callable, q: Tensor, k: Tensor, v: Tensor, is_causal: bool
) -> dict[str, float]:
    """Scaled largest error of output, saved logsumexp and the three gradients."""
    ref_out, ref_lse, grad_out, ref_grads = reference(q, k, v, is_causal)
    out = function.apply(q, k, v, is_causal)
    lse = [t for t in out.grad_fn.saved_tensors if t.shape == q.shape[:2]]
    out.backward(grad_out.to(device=q.device, dtype=q.dtype))
    pairs = {"output": (out.detach(), ref_out), "logsumexp": (lse[0] if lse else None, ref_lse)}
    pairs.update(
        zip(("dq", "dk", "dv"), zip((q.grad, k.grad, v.grad), ref_grads, strict=True), strict=True)
    )
    return {name: _error(got, ref) for name, (got, ref) in pairs.items()}


def _error(got: Tensor | None, ref: Tensor) -> float:
    if got is None:
        return float("nan")  # missing: not saved, or no gradient
    if not torch.isfinite(got).all():
        return float("inf")
    return ((got.cpu().double() - ref).abs().max() / ref.abs().max().clamp(min=1)).item()


def correctness_table(
    function: Callable,
    cases: Iterable[tuple],
    dtype: torch.dtype,
    device: str | torch.device = "cpu",
) -> pd.DataFrame:
    """One row per case (batch, n_q, n_k, d, causal): the errors and whether all are within
    tolerance (outputs and logsumexp: TOLERANCE; gradients: 5x)."""
    tol = TOLERANCE[dtype]
    rows = []
    for seed, (batch, n_q, n_k, d, causal) in enumerate(cases):
        q, k, v = random_qkv(batch, n_q, n_k, d, dtype, seed, device)
        errors = errors_against_reference(function, q, k, v, causal)
        # Each compared on its own: a NaN (missing) fails, where max() would pass over it.
        grad_tol = GRADIENT_FACTOR * tol
        within = (
            errors["output"] <= tol
            and errors["logsumexp"] <= tol
            and all(errors[g] <= grad_tol for g in ("dq", "dk", "dv"))
        )
        rows.append(
            {
                "batch": batch,
                "n_q": n_q,
                "n_k": n_k,
                "d": d,
                "causal": causal,
                "dtype": str(dtype).removeprefix("torch."),
                **errors,
                "within_tolerance": within,
            }
        )
    return pd.DataFrame(rows)


def implementation_checks(
    functions: dict[str, Callable], cases: Iterable[tuple], dtypes, device
) -> pd.DataFrame:
    """``correctness_table`` of every implementation (name -> autograd Function) in every dtype
    of ``dtypes``, one frame with an ``implementation`` column."""
    cases = list(cases)
    return pd.concat(
        [
            correctness_table(function, cases, dtype, device).assign(implementation=name)
            for name, function in functions.items()
            for dtype in dtypes
        ],
        ignore_index=True,
    )


def checks_line(checks: pd.DataFrame) -> str:
    """How many checks of ``implementation_checks`` are within tolerance, and the tolerances."""
    tolerances = {str(d).removeprefix("torch."): value for d, value in TOLERANCE.items()}
    return (
        f"{checks['within_tolerance'].sum()} of {len(checks)} checks within tolerance; "
        f"tolerances {tolerances}"
    )


def weighted_sum_line(function: Callable, device, rows: int = 100, width: int = 70) -> str:
    """``function`` (y = x @ w, as ``WeightedSumTriton``) in float32 on fresh random inputs,
    forward and both gradients against float64: within 1e-4, 1e-6 and 1e-4."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, width, generator=generator).to(device).requires_grad_()
    w = torch.randn(width, generator=generator).to(device).requires_grad_()
    y = function.apply(x, w)
    y.backward(torch.ones_like(y))
    x64, w64 = x.detach().double(), w.detach().double()
    forward = (y.double() - x64 @ w64).abs().max().item()
    dx = (x.grad.double() - w64.expand(rows, width)).abs().max().item()
    dw = (w.grad.double() - x64.sum(0)).abs().max().item()
    return (
        f"forward within 1e-4: {forward < 1e-4}, dx within 1e-6: {dx < 1e-6}, "
        f"dw within 1e-4: {dw < 1e-4}"
    )
