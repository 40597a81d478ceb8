"""LayerNorm four ways, checked, profiled and timed (notebook 02, section 7): each way of
``perflab.implementations.layer_norm`` against ``F.layer_norm`` in float64, the reductions a
profile counts in each, and their forward + backward interleaved with the one before."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pandas as pd
import torch
from torch import Tensor
from torch.profiler import ProfilerActivity

from perflab.implementations.layer_norm import LAYER_NORMS, sum_of_squares, torch_layer_norm
from perflab.measure.capture import profiling
from perflab.measure.comparison import Comparison, compare
from perflab.measure.stats import ROUNDS
from perflab.measure.timer import time_fn

#: The reductions counted in a profile (a fused kernel does its own inside one call).
REDUCTIONS = (
    "aten::sum",
    "aten::mean",
    "aten::var",
    "aten::var_mean",
    "aten::std",
    "aten::native_layer_norm",
    "aten::native_layer_norm_backward",
)


def _inputs(
    tokens: int,
    width: int,
    dtype: torch.dtype,
    device: torch.device | str,
    mean: float = 0.0,
    seed: int = 0,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """x (tokens, width) of the given mean and unit spread, random weight and bias, and an
    upstream gradient, all fresh from ``seed``."""
    if tokens < 1 or width < 2:
        raise ValueError(f"need tokens >= 1 and width >= 2, got tokens={tokens}, width={width}")
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=dtype).to(device)

    return draw(tokens, width) + mean, 1 + 0.1 * draw(width), 0.1 * draw(width), draw(tokens, width)


def _forward_backward(
    fn: Callable[..., Tensor], x: Tensor, weight: Tensor, bias: Tensor, grad: Tensor
) -> tuple[Tensor, ...]:
    leaves = [t.detach().requires_grad_() for t in (x, weight, bias)]
    out = fn(*leaves)
    out.backward(grad)
    return (out.detach(), *(leaf.grad for leaf in leaves))


def check_layer_norms(
    tokens: int = 37,
    width: int = 129,
    *,
    dtype: torch.dtype = torch.float64,
    mean: float = 0.0,
    seed: int = 0,
) -> pd.DataFrame:
    """Each way (``F.layer_norm`` too, and the textbook ``sum_of_squares``) in ``dtype`` against
    ``F.layer_norm`` in float64 on the same fresh random inputs (rounded to ``dtype``): the
    largest absolute error of the output and of the gradients of x, weight and bias, for inputs
    of the given ``mean`` (unit spread)."""
    x, weight, bias, grad = _inputs(tokens, width, dtype, "cpu", mean, seed)
    wide = (t.to(torch.float64) for t in (x, weight, bias, grad))
    expected = _forward_backward(torch_layer_norm, *wide)
    rows = []
    for name, fn in {**LAYER_NORMS, "E[x²] - mean² (textbook one pass)": sum_of_squares}.items():
        got = _forward_backward(fn, x, weight, bias, grad)
        errors = [(a.double() - b).abs().max().item() for a, b in zip(got, expected, strict=True)]
        rows.append(
            {
                "way": name,
                "dtype": str(dtype).removeprefix("torch."),
                "input_mean": mean,
                "output_error": errors[0],
                "grad_x_error": errors[1],
                "grad_weight_error": errors[2],
                "grad_bias_error": errors[3],
                "out_dtype": str(got[0].dtype).removeprefix("torch."),
            }
        )
    return pd.DataFrame(rows)


def _inside(event, names) -> bool:
    """Whether ``event`` was called from an operator named in ``names`` (or, for a string,
    from any operator whose name starts with it)."""
    parent = event.cpu_parent
    if parent is None:
        return False
    return parent.name.startswith(names) if isinstance(names, str) else parent.name in names


def reduction_counts(tokens: int = 64, width: int = 128) -> pd.DataFrame:
    """Forward + backward of each way, profiled once on the CPU: the calls of reductions
    (``REDUCTIONS``: the row statistics and the weight and bias gradients' sums over rows alike,
    each counted where it is called, not inside another reduction; a fused kernel's are inside
    its own call) and all operator calls of the layer."""
    x, weight, bias, grad = _inputs(tokens, width, torch.float32, "cpu")
    rows = []
    for name, fn in LAYER_NORMS.items():
        _forward_backward(fn, x, weight, bias, grad)  # warm, outside the profile
        leaves = [t.detach().requires_grad_() for t in (x, weight, bias)]
        with profiling(activities=[ProfilerActivity.CPU]) as prof:
            fn(*leaves).backward(grad)  # only the layer: no copies of the harness
        events = [e for e in prof.events() if e.name.startswith("aten::")]
        outer = [e for e in events if e.name in REDUCTIONS and not _inside(e, REDUCTIONS)]
        called = [e for e in events if not _inside(e, "aten::")]
        which = sorted(Counter(e.name.removeprefix("aten::") for e in outer).items())
        rows.append(
            {
                "way": name,
                "reduction_calls": len(outer),
                "operator_calls": len(called),
                "which": ", ".join(f"{n} x{c}" for n, c in which),
            }
        )
    return pd.DataFrame(rows)


def compare_layer_norms(
    tokens: int,
    width: int,
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> list[Comparison]:
    """Forward + backward of each way against the one before it in ``LAYER_NORMS``, interleaved
    (``compare``): "mean, then var" -> "var_mean" -> "var_mean, own backward" -> "F.layer_norm";
    the ``Comparison`` of each step."""
    x, weight, bias, grad = _inputs(tokens, width, dtype, device)
    names = list(LAYER_NORMS)

    def run(name: str) -> Callable[[], object]:
        return lambda: _forward_backward(LAYER_NORMS[name], x, weight, bias, grad)

    pairs = list(zip(names, names[1:], strict=False))
    return [
        compare(run(a), run(b), rounds=rounds, warmup=warmup, device=device, names=(a, b))
        for a, b in pairs
    ]


def statistics_times(
    tokens: int,
    width: int,
    *,
    steps: int = 6,
    warmup: int = 2,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> pd.DataFrame:
    """The statistics alone, forward only: ``x.mean``, ``x.var`` and ``torch.var_mean`` over the
    last dimension, each timed on its own (``time_fn``: median, its interval, unstable). What
    one pass can save is the cheaper of the two reductions it merges."""
    x = _inputs(tokens, width, dtype, device)[0]
    ways = {
        "mean": lambda: x.mean(-1, keepdim=True),
        "var": lambda: x.var(-1, keepdim=True, correction=0),
        "var_mean": lambda: torch.var_mean(x, -1, keepdim=True, correction=0),
    }
    rows = []
    for name, fn in ways.items():
        timing = time_fn(fn, warmup=warmup, steps=steps, device=device)
        rows.append({"statistic": name, **timing.summary()})
    return pd.DataFrame(rows)
