"""FlashAttention adapters against float64: the output, the log-sum-exp saved for backward, and
dQ, dK, dV, on odd shapes, causal and not (``perflab.attention.check`` does the arithmetic).

The cases include sizes that are not multiples of any tile (65, 37 x 91) because that is where
masking bugs live. A Triton implementation runs in the Triton interpreter on a CPU; its kernel
launches are recorded (``record_launches``) so ``kernel_compile`` can compile those kernels for
real GPUs afterwards.
"""

from __future__ import annotations

import contextlib
import math
import re
import traceback
from types import ModuleType

import torch

from perflab.adapters.loading import NotProvided, call, load_adapters
from perflab.adapters.rows import CheckRow

#: (batch, n_q, n_k, head dim, causal): the course's own test shape first, then odd ones.
ATTENTION_CASES = (
    (4, 128, 128, 64, False),
    (2, 65, 65, 32, True),
    (1, 37, 91, 16, False),
    (3, 50, 50, 16, True),
)
#: Largest error (scaled by max(1, |reference|)) of a Triton adapter on a GPU, where ``tl.dot``
#: takes float32 inputs as TF32 (10 mantissa bits) unless told otherwise; the course's own
#: tests allow 1e-2. Elsewhere float32 gets ``perflab.attention.check.TOLERANCE``.
TRITON_TF32_TOLERANCE = 1e-2

GETTERS = {
    "pytorch": "get_flashattention_autograd_function_pytorch",
    "triton": "get_flashattention_autograd_function_triton",
}


def attention_rows(module: ModuleType, which: str, device: str,
                   cases=ATTENTION_CASES) -> list[CheckRow]:  # fmt: skip
    """Rows for one FlashAttention adapter: output, saved log-sum-exp and gradients, each the
    worst over ``cases``."""
    from perflab.attention.check import (
        GRADIENT_FACTOR,
        TOLERANCE,
        errors_against_reference,
        random_qkv,
    )

    getter = GETTERS[which]
    try:
        function = call(module, getter)
    except NotProvided as reason:
        return [CheckRow(getter, "forward and backward", status="not provided", detail=str(reason))]
    except Exception as error:
        return [CheckRow(getter, "returns an autograd.Function", status="error",
                         detail=_last_line(error))]  # fmt: skip
    on_gpu = device.startswith("cuda")
    tol = TRITON_TF32_TOLERANCE if which == "triton" and on_gpu else TOLERANCE[torch.float32]
    worst = {"output": (0.0, ""), "logsumexp": (0.0, ""), "gradients": (0.0, "")}
    for seed, (batch, n_q, n_k, d, causal) in enumerate(cases):
        case = f"{batch}x{n_q}x{n_k}x{d}{' causal' if causal else ''}"
        q, k, v = random_qkv(batch, n_q, n_k, d, torch.float32, seed, device)
        try:
            errors = errors_against_reference(function, q, k, v, causal)
        except Exception as error:
            return [CheckRow(getter, "forward and backward", status="error",
                             detail=f"{case}: {_last_line(error)}")]  # fmt: skip
        gradients = [errors["dq"], errors["dk"], errors["dv"]]
        errors["gradients"] = math.nan if any(map(math.isnan, gradients)) else max(gradients)
        for key in worst:
            value = errors[key]  # NaN: missing (not saved, or no gradient); inf: not finite
            if value != value:
                worst[key] = (math.inf, f"{case}: not found")
            elif value > worst[key][0]:
                worst[key] = (value, case + (" (not finite)" if value == math.inf else ""))
    return [
        CheckRow.measured(getter, "output vs float64", worst["output"][0], tol,
                          f"worst case {worst['output'][1]}"),
        CheckRow.measured(getter, "log-sum-exp saved for backward", worst["logsumexp"][0], tol,
                          _lse_detail(worst["logsumexp"][1])),
        CheckRow.measured(getter, "dQ, dK, dV vs float64", worst["gradients"][0],
                          GRADIENT_FACTOR * tol, _gradient_detail(worst["gradients"][1])),
    ]  # fmt: skip


def attention_functions(spec: str, only: set[str] | None = None) -> dict[str, type]:
    """The FlashAttention classes the adapters ``spec`` provides, by the names notebooks 05
    and 06 time them under: ``yours_pytorch`` and (where Triton is installed) ``yours_triton``;
    with ``only`` (adapter names, e.g. ``battery.passing_adapters``), those in it."""
    from perflab.device import triton_available

    module = load_adapters(spec)
    found = {}
    for which, getter in GETTERS.items():
        if (which == "triton" and not triton_available()) or (
            only is not None and getter not in only
        ):
            continue
        try:
            found[f"yours_{which}"] = call(module, getter)
        except NotProvided:
            continue
    return found


def results_name(spec: str) -> str:
    """A folder name for results measured with the adapters ``spec``: ``yours-`` and the
    path's last two parts or the module name, e.g. ``yours-tests-adapters``."""
    parts = spec.replace("\\", "/").removesuffix(".py").replace(".", "/").split("/")
    return "yours-" + re.sub(r"[^a-z0-9]+", "-", "-".join(parts[-2:]).lower()).strip("-")


def _lse_detail(case: str) -> str:
    if case.endswith("not found"):
        return (f"{case}: no tensor of shape (batch, n_q) in ctx.save_for_backward "
                "(the course's tests look for exactly one)")  # fmt: skip
    return f"worst case {case}"


def _gradient_detail(case: str) -> str:
    if case.endswith("not found"):
        return f"{case}: q, k or v got no gradient (backward returned None for it)"
    return f"worst case {case}"


def _last_line(error: BaseException) -> str:
    lines = "".join(traceback.format_exception_only(type(error), error)).strip().splitlines()
    return lines[-1] if lines else type(error).__name__


@contextlib.contextmanager
def record_launches(launches: list[dict]):
    """Record every Triton kernel launch (interpreted or compiled) made inside the block: the
    kernel's module and name, each argument's Triton type or constexpr value, warps and
    stages. ``launches`` gets one entry per distinct signature."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except ImportError:
        yield
        return
    seen = set()
    originals = {cls: cls.run for cls in (InterpretedFunction, JITFunction)}

    def recording(original):
        def run(self, *args, grid, warmup, **kwargs):
            if not warmup:
                entry = describe_launch(self, args, kwargs)
                key = repr(entry)
                if key not in seen:
                    seen.add(key)
                    launches.append(entry)
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)

        return run

    for cls, original in originals.items():
        cls.run = recording(original)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.run = original


def describe_launch(kernel, args: tuple, kwargs: dict) -> dict:
    """What compiling this launch needs, as plain data. A constexpr keeps its value (a Triton
    dtype by name); a runtime argument keeps only what the compiler specialises on: a tensor's
    element type and 16-byte alignment, an int's width and divisibility by 16 (so launches that
    differ only in sizes and strides compile once). Arguments left out take their defaults."""
    import inspect

    import triton.language as tl

    from perflab.attention.triton_compile import TRITON_DTYPES

    signature = inspect.signature(kernel.fn)
    bound = signature.bind(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
    bound.apply_defaults()
    described = {}
    for name, value in bound.arguments.items():
        value = getattr(value, "value", value)  # tl.constexpr(...) -> its value
        if "constexpr" in str(signature.parameters[name].annotation):
            if isinstance(value, tl.dtype):
                described[name] = ("constexpr dtype", str(value))
            else:
                plain = isinstance(value, bool | int | float | str) or value is None
                described[name] = ("constexpr", value if plain else repr(value))
        elif isinstance(value, torch.Tensor):
            described[name] = ("tensor", TRITON_DTYPES.get(value.dtype, str(value.dtype)),
                               value.data_ptr() % 16 == 0)  # fmt: skip
        elif isinstance(value, bool):
            described[name] = ("bool",)
        elif isinstance(value, int):
            described[name] = ("int", "i32" if -(2**31) <= value < 2**31 else "i64",
                               value % 16 == 0 and value != 0)  # fmt: skip
        elif isinstance(value, float):
            described[name] = ("float",)
        else:  # None, or anything else Triton specialises away
            described[name] = ("none",)
    return {
        "module": kernel.fn.__module__,
        "file": inspect.getsourcefile(kernel.fn),
        "name": kernel.fn.__name__,
        "args": described,
        "num_warps": kwargs.get("num_warps", 4),
        "num_stages": kwargs.get("num_stages", 3),
    }
