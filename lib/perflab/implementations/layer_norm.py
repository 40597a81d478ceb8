"""LayerNorm's statistics in one pass, and its backward by hand (notebook 02, section 7): the
implementations; ``perflab.lessons.nb02_profiling.layer_norm_study`` checks, profiles and times
them.

LayerNorm (Ba et al. 2016) over the last dimension of x, of width d:

    y = x̂ * weight + bias,   x̂ = (x - mean) * r,   r = 1 / sqrt(var + eps)

Its statistics are reductions, and a reduction reads all of x; one of the workbook's sources
(a note on FSDP hotspots) names LayerNorm written out in PyTorch operations among them. Four
ways:

- "mean, then var": ``x.mean`` and ``x.var``, two reductions (var reads x again);
- "var_mean": ``torch.var_mean``, both from one reduction (Welford's update, Welford 1962: one
  pass, and as stable as two; the textbook one pass, E[x²] - mean², is not: it cancels when the
  mean is large against the spread, as ``layer_norm_study.check_layer_norms`` shows);
- "var_mean, own backward": the same forward in an ``autograd.Function`` whose backward reuses
  the x̂ and r that the forward saved, with g the gradient of y:

      dx = r * (g·w - mean(g·w) - x̂ * mean(g·w·x̂)),   dweight = Σ g·x̂,   dbias = Σ g

  where autograd differentiates through every operation of the forward (subtraction, var,
  rsqrt, products), each with its own saved tensors and kernels;
- "F.layer_norm": PyTorch's own fused kernel, the yardstick.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

EPS = 1e-5


def mean_then_var(x: Tensor, weight: Tensor, bias: Tensor, eps: float = EPS) -> Tensor:
    """LayerNorm from two reductions: the mean, then the (biased) variance."""
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def var_mean(x: Tensor, weight: Tensor, bias: Tensor, eps: float = EPS) -> Tensor:
    """LayerNorm from one reduction, ``torch.var_mean`` (both statistics in one pass)."""
    var, mean = torch.var_mean(x, -1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * weight + bias


def sum_of_squares(x: Tensor, weight: Tensor, bias: Tensor, eps: float = EPS) -> Tensor:
    """LayerNorm from the textbook one pass, var = E[x²] - mean²: cancels catastrophically when
    the mean is large against the spread (for accuracy checks only)."""
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) * torch.rsqrt(var.clamp_min(0) + eps) * weight + bias


class _LayerNormByHand(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
        var, mean = torch.var_mean(x, -1, keepdim=True, correction=0)
        rstd = torch.rsqrt(var + eps)
        normalised = (x - mean) * rstd
        ctx.save_for_backward(normalised, rstd, weight)
        return normalised * weight + bias

    @staticmethod
    def backward(ctx, grad: Tensor):
        normalised, rstd, weight = ctx.saved_tensors
        scaled = grad * weight
        grad_x = rstd * (
            scaled
            - scaled.mean(-1, keepdim=True)
            - normalised * (scaled * normalised).mean(-1, keepdim=True)
        )
        rows = tuple(range(grad.ndim - 1))
        return grad_x, (grad * normalised).sum(rows), grad.sum(rows), None


def own_backward(x: Tensor, weight: Tensor, bias: Tensor, eps: float = EPS) -> Tensor:
    """LayerNorm by ``var_mean`` with a hand-written backward that reuses the saved x̂ and r."""
    return _LayerNormByHand.apply(x, weight, bias, eps)


def torch_layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = EPS) -> Tensor:
    """PyTorch's fused ``F.layer_norm``."""
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


#: The timed ways, in the order of the notebook's comparisons.
LAYER_NORMS: dict[str, Callable[..., Tensor]] = {
    "mean, then var": mean_then_var,
    "var_mean": var_mean,
    "var_mean, own backward": own_backward,
    "F.layer_norm": torch_layer_norm,
}
