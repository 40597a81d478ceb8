"""FlashAttention adapters against float64: the output, the log-sum-exp saved for backward, and
dQ, dK, dV, each case its own row, forward and backward apart; the arithmetic is
``perflab.implementations.attention.correctness``'s.

The handout decides what passes: its tests use power-of-two sizes of at least 16 with as many
queries as keys, and the PyTorch version may ignore ``is_causal`` (the Triton one has a causal
part of its own). Cases beyond it run too, reported as findings with what goes wrong and why it
matters: causal attention where the flag may be ignored, sizes that are not multiples of any
tile (where masking bugs live: 65, 50) and more keys than queries (37 x 91, as in decoding
with a cache). A Triton implementation runs in the Triton interpreter on a CPU; its kernel
launches are recorded (``record_launches``) so ``kernel_compile`` can compile those kernels for
real GPUs afterwards.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import signal
import warnings
from types import ModuleType

import torch

from perflab.tools.adapters.errors import describe
from perflab.tools.adapters.loading import NotProvided, call, load_adapters, student_root
from perflab.tools.adapters.rows import BEYOND, HANDOUT, CheckRow

#: (batch, n_q, n_k, head dim, causal) the handout's tests use: powers of two of at least 16,
#: as many queries as keys, the course's own shape first; the PyTorch version non-causal only.
HANDOUT_CASES = {
    "pytorch": ((4, 128, 128, 64, False), (2, 64, 64, 32, False)),
    "triton": ((4, 128, 128, 64, False), (4, 128, 128, 64, True), (2, 64, 64, 32, True)),
}
#: Cases beyond the handout, each with what it finds when it fails.
BEYOND_CASES = {
    "pytorch": (
        (2, 64, 64, 32, True),
        (2, 65, 65, 32, True),
        (1, 37, 91, 16, False),
        (3, 50, 50, 16, True),
    ),
    "triton": ((2, 65, 65, 32, True), (1, 37, 91, 16, False), (3, 50, 50, 16, True)),
}
#: Largest error (scaled by max(1, |reference|)) of a Triton adapter on a GPU, where ``tl.dot``
#: takes float32 inputs as TF32 (10 mantissa bits) unless told otherwise; the course's own
#: tests allow 1e-2. Elsewhere float32 gets ``TOLERANCE`` of
#: ``perflab.implementations.attention.correctness``.
TRITON_TF32_TOLERANCE = 1e-2

GETTERS = {
    "pytorch": "get_flashattention_autograd_function_pytorch",
    "triton": "get_flashattention_autograd_function_triton",
}
CHECKS = (
    "forward: output vs float64",
    "forward: log-sum-exp saved for backward",
    "backward: dQ, dK, dV vs float64",
)


def case_name(batch: int, n_q: int, n_k: int, d: int, causal: bool) -> str:
    return f"{batch}x{n_q}x{n_k}x{d}{' causal' if causal else ''}"


def why_it_matters(which: str, n_q: int, n_k: int, d: int, causal: bool) -> str:
    """What a failure of a case beyond the handout means, in one line."""
    if n_q != n_k:
        return (
            "more keys than queries (decoding with a cache, or a prefix) gives wrong "
            "attention; the handout's tests use as many of each"
        )
    if causal and which == "pytorch":
        return (
            "is_causal ignored or wrong: allowed by the handout for the PyTorch version, "
            "but a language model's attention must not see later tokens"
        )
    if any(n % 16 for n in (n_q, n_k)):
        return (
            "a length that is not a multiple of the tile reads past the end or leaves the "
            "last tile unmasked; the handout tests powers of 2, real sequences have any "
            "length"
        )
    return "fails beyond the handout's cases"


def scoped_cases(which: str, cases=None) -> list[tuple[tuple, str]]:
    """(case, scope) of every case ``attention_rows`` runs, in order: the handout's, then those
    beyond it (or the given ``cases``, all taken as the handout's)."""
    if cases is not None:
        return [(c, HANDOUT) for c in cases]
    return [(c, HANDOUT) for c in HANDOUT_CASES[which]] + [(c, BEYOND) for c in BEYOND_CASES[which]]


def attention_rows(
    module: ModuleType, which: str, device: str, cases=None, only: int | None = None
) -> list[CheckRow]:
    """Rows for one FlashAttention adapter: per case, the output and the saved log-sum-exp
    (forward) and the gradients (backward), the cases of ``scoped_cases`` (``only``: the one
    at that index, with the seed it has in the full run)."""
    from perflab.implementations.attention.correctness import GRADIENT_FACTOR, TOLERANCE

    getter = GETTERS[which]
    root = student_root(module)
    try:
        function = call(module, getter)
    except NotProvided as reason:
        return [CheckRow(getter, "forward and backward", status="not provided", detail=str(reason))]
    except Exception as error:
        status, detail = describe(error, root)
        return [CheckRow(getter, "returns an autograd.Function", status=status, detail=detail)]
    on_gpu = device.startswith("cuda")
    tol = TRITON_TF32_TOLERANCE if which == "triton" and on_gpu else TOLERANCE[torch.float32]
    rows = []
    for seed, ((batch, n_q, n_k, d, causal), scope) in enumerate(scoped_cases(which, cases)):
        if only is not None and seed != only:
            continue
        case = case_name(batch, n_q, n_k, d, causal)
        errors = _case_errors(function, batch, n_q, n_k, d, causal, seed, device, root)
        tolerances = (tol, tol, GRADIENT_FACTOR * tol)
        for check, tolerance, (value, status, detail) in zip(
            CHECKS, tolerances, errors, strict=True
        ):
            if status is None:
                row = CheckRow.measured(getter, check, value, tolerance, detail, case, scope)
            else:
                row = CheckRow(getter, check, case, scope, status=status, detail=detail)
            if row.finding and row.status == "fail":  # an error speaks for itself
                why = why_it_matters(which, n_q, n_k, d, causal)
                row.detail = f"{why}: {row.detail}" if row.detail else why
            rows.append(row)
    return rows


def _case_errors(function, batch, n_q, n_k, d, causal, seed, device, root):
    """[(error, None, detail) or (nan, status, detail)] for the output, the log-sum-exp and the
    gradients of one case: forward and backward apart, so a working forward with an unfinished
    backward gets its forward rows."""
    from perflab.implementations.attention.correctness import _error, random_qkv, reference

    q, k, v = random_qkv(batch, n_q, n_k, d, torch.float32, seed, device)
    ref_out, ref_lse, grad_out, ref_grads = reference(q, k, v, causal)
    try:
        with warnings.catch_warnings():  # the course teaches block pointers; Triton 3.7 warns
            warnings.filterwarnings("ignore", message="tl.make_block_ptr is deprecated")
            out = function.apply(q, k, v, causal)
    except NotImplementedError:
        return [(math.nan, "not provided", "forward raises NotImplementedError")] * 3
    except Exception as error:
        failed = (math.nan, *describe(error, root))
        return [failed] * 3
    lse = [t for t in getattr(out.grad_fn, "saved_tensors", ()) if t.shape == q.shape[:2]]
    saved_lse = lse[0] if len(lse) == 1 else None
    forward = [
        _measured(_error(out.detach(), ref_out)),
        _measured(_error(saved_lse, ref_lse), _lse_note(lse)),
    ]
    try:
        out.backward(grad_out.to(device=q.device, dtype=q.dtype))
    except NotImplementedError:
        return [*forward, (math.nan, "not provided", "backward raises NotImplementedError")]
    except Exception as error:
        return [*forward, (math.nan, *describe(error, root))]
    grads = [_error(got, ref) for got, ref in zip((q.grad, k.grad, v.grad), ref_grads, strict=True)]
    missing = any(math.isnan(g) for g in grads)
    note = "q, k or v got no gradient (backward returned None for it)" if missing else ""
    return [*forward, _measured(math.nan if missing else max(grads), note)]


def _measured(error: float, note: str = "") -> tuple[float, None, str]:
    if math.isinf(error):
        note = note or "not finite"
    return (math.inf if math.isnan(error) else error, None, note)


def _lse_note(found: list) -> str:
    if len(found) == 1:
        return ""
    return (
        f"{len(found)} tensors of shape (batch, n_q) in ctx.save_for_backward; the course's "
        "tests look for exactly one, the log-sum-exp"
    )


def attention_functions(spec: str, only: set[str] | None = None) -> dict[str, type]:
    """The FlashAttention classes the adapters ``spec`` provides, by the names notebooks 05
    and 06 time them under: ``yours_pytorch`` and (where Triton is installed) ``yours_triton``;
    with ``only`` (adapter names, e.g. ``battery.passing_adapters``), those in it."""
    from perflab.measure.device import triton_available

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

    def record(kernel, args: tuple, kwargs: dict) -> None:
        entry = describe_launch(kernel, args, kwargs)
        key = repr(entry)
        if key not in seen:
            seen.add(key)
            launches.append(entry)

    def recording_run(original):
        def run(self, *args, grid, warmup, **kwargs):
            if not warmup:
                record(self, args, kwargs)
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)

        return run

    def recording_getitem(original):  # Triton 3.5's interpreter: kernel[grid] runs it
        def getitem(self, grid):
            executor = original(self, grid)

            def launch(*args, **kwargs):
                record(self, args, kwargs)
                return executor(*args, **kwargs)

            return launch

        return getitem

    # Triton 3.6 and later launch both kinds through the class's run(); 3.5's interpreter sets
    # run per instance and launches through __getitem__
    patches = [
        (cls, "run", recording_run)
        if "run" in vars(cls)
        else (cls, "__getitem__", recording_getitem)
        for cls in (InterpretedFunction, JITFunction)
    ]
    originals = [(cls, name, vars(cls)[name]) for cls, name, _ in patches]
    for (cls, name, wrap), (_, _, original) in zip(patches, originals, strict=True):
        setattr(cls, name, wrap(original))
    try:
        yield
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


def describe_launch(kernel, args: tuple, kwargs: dict) -> dict:
    """What compiling this launch needs, as plain data. A constexpr keeps its value (a Triton
    dtype by name); a runtime argument keeps only what the compiler specialises on: a tensor's
    element type and 16-byte alignment, an int's width and divisibility by 16 (so launches that
    differ only in sizes and strides compile once). Arguments left out take their defaults."""
    import inspect

    import triton.language as tl

    from perflab.measure.triton_compile import TRITON_DTYPES

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
            described[name] = (
                "tensor",
                TRITON_DTYPES.get(value.dtype, str(value.dtype)),
                value.data_ptr() % 16 == 0,
            )
        elif isinstance(value, bool):
            described[name] = ("bool",)
        elif isinstance(value, int):
            described[name] = (
                "int",
                "i32" if -(2**31) <= value < 2**31 else "i64",
                value % 16 == 0 and value != 0,
            )
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


#: What a signal that killed the interpreter's process means, for a student.
SIGNALS = {
    signal.SIGSEGV: "a load or store outside the tensors' memory (a missing mask, a wrong "
    "stride or offset): in the Triton interpreter it reads or writes host memory the kernel "
    "does not own",
    signal.SIGABRT: 'the C library stopped the process ("free(): invalid pointer", "double '
    "free or corruption\"): a store outside the tensors' memory corrupted the heap (a missing "
    "mask, a wrong stride or offset)",
    signal.SIGBUS: "a load or store at an address no memory backs (a wrong pointer or offset)",
    signal.SIGKILL: "killed from outside (out of memory, or a time limit)",
}


def _rows_in_this_process(spec, which, device, only, connection) -> None:
    module = load_adapters(spec)
    launches: list[dict] = []
    with record_launches(launches):
        rows = attention_rows(module, which, device, only=only)
    connection.send(([vars(row) for row in rows], launches))
    connection.close()


def _run_child(spec, which, device, only, timeout_s):
    """(rows, launches) from a child process, or (None, the signal or exit status) when it
    died before answering."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(
        target=_rows_in_this_process, args=(spec, which, device, only, send), daemon=True
    )
    child.start()
    send.close()
    answer = None
    if receive.poll(timeout_s):  # also true when the child died: its end of the pipe closed
        try:
            answer = receive.recv()
        except EOFError:
            answer = None
    child.join(5)
    if child.is_alive():
        child.kill()
        child.join()
    if answer is None:
        return None, child.exitcode
    rows, launches = answer
    return [CheckRow(**row) for row in rows], launches


def isolated_attention_rows(
    spec: str, which: str, device: str, launches: list[dict], timeout_s: float = 1800
) -> list[CheckRow]:
    """``attention_rows`` in a child process, so a kernel that crashes the Triton interpreter
    (a segfault, an abort from a corrupted heap) costs only its own cases: when the child dies,
    each case runs again in a child of its own, and a case whose child dies too is a row per
    check with status "error", naming the signal and what it means. The kernels it launched
    go into ``launches`` (for the compile check)."""
    rows, found = _run_child(spec, which, device, None, timeout_s)
    if rows is not None:
        launches += found
        return rows
    rows = []
    getter = GETTERS[which]
    for index, ((batch, n_q, n_k, d, causal), scope) in enumerate(scoped_cases(which)):
        case_rows, found = _run_child(spec, which, device, index, timeout_s)
        if case_rows is not None:
            rows += case_rows
            launches += found
            continue
        detail = _death(found)
        rows += [
            CheckRow(getter, check, case_name(batch, n_q, n_k, d, causal), scope, status="error",
                     detail=detail)
            for check in CHECKS
        ]  # fmt: skip
    return rows


def _death(exitcode: int | None) -> str:
    """What the exit status of a process that died before answering says."""
    if exitcode is None:
        return "the check of this case did not finish in its time"
    if exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:  # a number no signal of this platform has
            name = ""
        meaning = SIGNALS.get(number, "a signal the check does not know")
        return f"the Triton interpreter crashed on this case ({name or number}): {meaning}"
    return f"the check's process exited with status {exitcode} before answering"
