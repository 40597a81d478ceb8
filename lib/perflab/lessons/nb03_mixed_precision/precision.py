"""Mixed precision, measured: rounding in accumulation, what autocast does to each tensor's
dtype, and how badly low-precision LayerNorm goes wrong. Used by notebook 03.

float16 has a 10-bit mantissa and a maximum of 65504; bfloat16 has float32's 8-bit exponent
but only a 7-bit mantissa. Autocast runs matmuls in the low precision and keeps (on CUDA) the
precision-sensitive ops such as norms, softmax and losses in float32.
"""

from __future__ import annotations

import contextlib

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from perflab.measure.device import dtype_name, parse_dtype, resolve_device


def accumulate(
    accumulator: torch.dtype,
    increment: torch.dtype,
    steps: int = 1000,
    value: float = 0.01,
    upcast: bool = False,
) -> float:
    """``steps`` times ``total += value`` with ``total`` kept in ``accumulator`` and ``value``
    stored in ``increment`` (promoted to the accumulator's dtype on addition; with ``upcast``,
    converted explicitly first with ``.type(accumulator)``, as the handout's fourth loop)."""
    total = torch.tensor(0.0, dtype=accumulator)
    step = torch.tensor(value, dtype=increment)
    for _ in range(steps):
        total += step.type(accumulator) if upcast else step
    return float(total)


def accumulation_experiment(steps: int = 1000, value: float = 0.01) -> pd.DataFrame:
    """The handout's four loops (float32 throughout; float16 throughout; a float32 sum of
    float16 increments, promoted implicitly; the same with each increment upcast explicitly)
    and a fifth, a float16 sum of float32 increments, with the error of the sum and the
    rounding error of ``value`` itself in the increment's dtype."""
    rows = []
    combinations = [
        (torch.float32, torch.float32, False),
        (torch.float16, torch.float16, False),
        (torch.float32, torch.float16, False),
        (torch.float32, torch.float16, True),
        (torch.float16, torch.float32, False),
    ]
    for accumulator, increment, upcast in combinations:
        result = accumulate(accumulator, increment, steps, value, upcast)
        stored = float(torch.tensor(value, dtype=increment))
        rows.append(
            {
                "accumulator": dtype_name(accumulator),
                "increment": dtype_name(increment),
                "added_as": f".type({dtype_name(accumulator)})" if upcast else "as stored",
                "result": result,
                "error": result - steps * value,
                "increment_as_stored": stored,
                "increment_rounding": stored - value,
            }
        )
    return pd.DataFrame(rows)


class ToyModel(nn.Module):
    """Linear -> ReLU -> LayerNorm -> Linear: the smallest model with a matmul and a norm."""

    def __init__(self, in_features: int = 10, out_features: int = 5):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, out_features, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.ln(self.relu(self.fc1(x))))


def dtype_audit(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    dtype: str | torch.dtype = "bfloat16",
    device: str | torch.device = "auto",
    modules: tuple[str, ...] | None = None,
) -> pd.DataFrame:
    """The dtype of every tensor of interest in one autocast training step, recorded by hooks.

    Rows: each parameter as stored (inside autocast), each listed module's output
    (default: every named leaf module), the logits, the loss and each parameter's gradient.
    Columns: tensor, dtype. Autocast is entered with ``dtype`` on ``device``'s type.
    """
    device = resolve_device(device)
    dtype = parse_dtype(dtype)
    model = model.to(device)
    inputs, targets = inputs.to(device), targets.to(device)
    named = dict(model.named_modules())
    if modules is None:
        modules = tuple(n for n, m in named.items() if n and not list(m.children()))
    unknown = [n for n in modules if n not in named]
    if unknown:
        raise ValueError(f"no modules {unknown} in the model; valid: {', '.join(named)}")
    rows: list[tuple[str, str]] = []
    handles = [
        named[name].register_forward_hook(
            lambda _m, _i, out, name=name: rows.append((f"output of {name}", dtype_name(out.dtype)))
        )
        for name in modules
    ]
    model.zero_grad(set_to_none=True)
    autocast = (
        torch.autocast(device.type, dtype=dtype)
        if dtype != torch.float32
        else contextlib.nullcontext()
    )
    try:
        with autocast:
            parameters = model.named_parameters()
            rows.extend((f"parameter {n}", dtype_name(p.dtype)) for n, p in parameters)
            logits = model(inputs)
            loss = F.cross_entropy(logits, targets)
        rows.append(("logits", dtype_name(logits.dtype)))
        rows.append(("loss", dtype_name(loss.dtype)))
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    rows.extend((f"gradient of {n}", dtype_name(p.grad.dtype)) for n, p in model.named_parameters())
    return pd.DataFrame(rows, columns=["tensor", "dtype"])


def layernorm_sensitivity(
    means: tuple[float, ...] = (0.0, 10.0, 100.0, 1000.0),
    std: float = 0.1,
    width: int = 1024,
    rows: int = 64,
    device: str | torch.device = "cpu",
    seed: int = 0,
) -> pd.DataFrame:
    """Error of LayerNorm computed in float16 and bfloat16 against float64, on inputs with mean
    ``mean`` and standard deviation ``std``: normalising subtracts two nearly equal numbers,
    so the input's rounding error (relative to its size, i.e. ~mean * 2^-mantissa_bits) is
    amplified by mean / std. float32 is listed too as the baseline."""
    device = resolve_device(device)
    generator = torch.Generator().manual_seed(seed)
    results = []
    for mean in means:
        x = mean + std * torch.randn(rows, width, generator=generator, dtype=torch.float64)
        reference = F.layer_norm(x, (width,))
        for low in (torch.float32, torch.float16, torch.bfloat16):
            out = F.layer_norm(x.to(device=device, dtype=low), (width,)).to("cpu", torch.float64)
            error = (out - reference).abs()
            results.append(
                {
                    "input_mean": mean,
                    "input_std": std,
                    "dtype": dtype_name(low),
                    "max_abs_error": float(error.max()),
                    "mean_abs_error": float(error.mean()),
                }
            )
    return pd.DataFrame(results)


def accumulation_sentence(accumulation: pd.DataFrame) -> str:
    """From ``accumulation_experiment``: float16 throughout against a float32 sum of float16
    increments, and whether upcasting each increment explicitly changes that sum."""
    errors = accumulation.set_index(["accumulator", "increment", "added_as"])["error"]
    implicit = errors["float32", "float16", "as stored"]
    explicit = errors["float32", "float16", ".type(float32)"]
    half = abs(errors["float16", "float16", "as stored"])
    return (
        f"float16 throughout is off by {half:.3f}, {abs(half / implicit):.0f}x the error of a "
        "float32 sum of float16 increments; upcasting each increment explicitly gives "
        f"{'the same sum' if explicit == implicit else 'a different sum'} (error "
        f"{explicit:.6f} against {implicit:.6f})"
    )


def audit_lines(audit: pd.DataFrame) -> list[str]:
    """What holds under every autocast dtype of ``audit`` (one ``dtype_audit`` column per
    dtype): parameters, gradients and the loss float32, the first linear layer's output in the
    autocast dtype."""
    lines = []
    for name in audit.columns:
        column = audit[name]

        def all_float32(prefix: str, column=column) -> bool:
            return all(column[t] == "float32" for t in column.index if t.startswith(prefix))

        lines.append(
            f"{name} autocast: parameters float32: {all_float32('parameter')}; gradients "
            f"float32: {all_float32('grad')}; loss float32: {column['loss'] == 'float32'}; first "
            f"linear layer's output {name}: {column['output of fc1'] == name}"
        )
    return lines


def sensitivity_line(sensitivity: pd.DataFrame, mean: float = 100.0) -> str:
    """Each dtype's LayerNorm error at input ``mean`` (``layernorm_sensitivity``)."""
    worst = sensitivity[sensitivity["input_mean"] == mean].set_index("dtype")["max_abs_error"]
    return (
        f"at mean {mean:g}, std 0.1: float32 errs by {worst['float32']:.1e}, float16 by "
        f"{worst['float16']:.2f} and bfloat16 by {worst['bfloat16']:.2f} on outputs of size ~1"
    )
