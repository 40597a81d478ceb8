"""Benchmarks of attention implementations (notebooks 05 and 06).

Every implementation is called as ``fn(q, k, v, is_causal=...)`` on q, k, v of shape
(batch, seq, d). One configuration measures forward time, forward + backward time (backward =
their difference), the memory held between forward and backward, the peak memory of forward +
backward, and TFLOP/s from the FLOP model below. Run through ``perflab.bench.Sweep`` so that
out-of-memory becomes a row and the sweep goes on.

FLOPs (Dao 2023, FlashAttention-2, section 4): forward 4 * b * n_q * n_k * d (two matmuls),
over the pairs the mask keeps when causal (``attention_matmul_flops``: about half); backward
2.5x the forward (five matmuls, one of them recomputing S).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from perflab.implementations.attention.flash_torch import FlashAttentionTorch
from perflab.implementations.attention.reference import attention_matmul_flops, naive_attention
from perflab.measure.comparison import Comparison, compare
from perflab.measure.device import parse_dtype, resolve_device, synchronize
from perflab.measure.stats import ROUNDS
from perflab.measure.timeline import peak_memory, record_timeline
from perflab.measure.timer import PhaseClock, time_fn


@functools.cache
def _compiled_naive() -> Callable:
    return torch.compile(naive_attention, dynamic=True)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """PyTorch's fused attention on (batch, seq, d) inputs, passed as (batch, 1 head, seq, d):
    its FlashAttention and memory-efficient kernels take 4-D inputs only, and 3-D ones fall
    back to the unfused math kernel (seen on an H100: more memory than naive attention)."""
    out = F.scaled_dot_product_attention(
        q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), is_causal=is_causal
    )
    return out.squeeze(1)


IMPLEMENTATIONS: dict[str, Callable[[], Callable]] = {
    "naive": lambda: naive_attention,
    "naive_compiled": _compiled_naive,
    "sdpa": lambda: _sdpa,
    "flash_torch": lambda: lambda q, k, v, is_causal: FlashAttentionTorch.apply(q, k, v, is_causal),
    "flash_triton": lambda: _applied(_flash_triton()),
}
#: Implementations whose Triton kernels run in the interpreter where CUDA is missing.
TRITON_IMPLEMENTATIONS = {"flash_triton"}
_ADDED: set[str] = set()  # names given by add_implementation (which may replace them)


def _flash_triton() -> type:
    from perflab.implementations.attention.flash_triton import (
        FlashAttentionTriton,  # imports Triton
    )

    return FlashAttentionTriton


def _applied(function: type) -> Callable:
    return lambda q, k, v, is_causal: function.apply(q, k, v, is_causal)


def add_implementation(name: str, function: type, triton: bool = False) -> None:
    """Time the ``torch.autograd.Function`` ``function`` (``function.apply(q, k, v,
    is_causal)``: a student's FlashAttention, say) under ``name`` in this module's sweeps and
    comparisons; ``triton``: its kernels are Triton (interpreted, so not timed, on a CPU)."""
    if name in IMPLEMENTATIONS and name not in _ADDED:
        raise ValueError(f"{name!r} is one of perflab's implementations; choose another name")
    IMPLEMENTATIONS[name] = lambda: _applied(function)
    _ADDED.add(name)
    (TRITON_IMPLEMENTATIONS.add if triton else TRITON_IMPLEMENTATIONS.discard)(name)


def interpreted(implementation: str) -> bool:
    """True when ``implementation`` runs Triton kernels in the interpreter here."""
    if implementation not in TRITON_IMPLEMENTATIONS:
        return False
    from perflab.implementations.attention.flash_triton import INTERPRETED

    return INTERPRETED


def get_implementation(name: str) -> Callable:
    """The attention function called ``name``, or a ValueError listing the valid names."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown attention {name!r}; valid: {', '.join(IMPLEMENTATIONS)}")
    return IMPLEMENTATIONS[name]()


def attention_flops(batch: int, n_q: int, n_k: int, d: int, causal: bool) -> dict[str, float]:
    """Forward, backward and forward + backward FLOPs of attention (see the module docstring)."""
    forward = attention_matmul_flops(batch, n_q, n_k, d, causal)
    return {"forward": forward, "backward": 2.5 * forward, "end_to_end": 3.5 * forward}


def naive_memory_bytes(batch: int, seq_len: int, d: int, dtype: torch.dtype) -> dict[str, int]:
    """Memory accounting of naive attention (no heads), from the tensors it creates.

    inputs: q, k, v; held for backward: the probabilities P (b x n x n; softmax saves its
    output, P @ V saves P and V, Q K^T saves Q and K) and the output (b x n x d); forward peak:
    the scaled scores and P exist together (2 b n^2) next to the inputs.
    """
    size = torch.empty((), dtype=dtype).element_size()
    inputs = 3 * batch * seq_len * d * size
    square = batch * seq_len * seq_len * size
    output = batch * seq_len * d * size
    return {
        "inputs": inputs,
        "held_for_backward": square + output,
        "forward_peak": inputs + 2 * square + output,
    }


def _held_after_forward(fn: Callable, device: torch.device) -> int:
    """Bytes allocated by a forward pass and still held (for backward) when it returns."""
    kept = []
    if device.type == "cuda":
        synchronize(device)
        before = torch.cuda.memory_allocated(device)
        kept.append(fn())
        synchronize(device)
        return int(torch.cuda.memory_allocated(device) - before)
    timeline = record_timeline(lambda: kept.append(fn()), device)
    return int(timeline.events["allocated_bytes"].iloc[-1]) if len(timeline.events) else 0


def _attention_calls(
    implementation: str,
    batch: int,
    n: int,
    d: int,
    dtype: torch.dtype,
    causal: bool,
    device: torch.device,
    clock: PhaseClock | None = None,
):
    """(forward, forward_backward) of one implementation on fixed random inputs; with a
    ``clock``, forward_backward records its two phases in it."""
    fn = get_implementation(implementation)
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (
        torch.randn(batch, n, d, device=device, dtype=dtype, generator=generator).requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(batch, n, d, device=device, dtype=dtype, generator=generator)

    def forward():
        return fn(q, k, v, is_causal=causal)

    def forward_backward():
        if clock:
            clock.start()
        out = forward()
        if clock:
            clock.mark("forward")
        out.backward(grad)
        if clock:
            clock.mark("backward")
            clock.finish()

    return forward, forward_backward


def measure_attention(config: dict) -> dict:
    """Sweep measure function for one configuration with keys implementation, batch, seq_len,
    head_dim, dtype, causal, device, warmup, steps. Returns times (s), memory (bytes), TFLOP/s
    and whether the timing is a speed measurement (not for the Triton interpreter).

    ``forward_s`` times forward calls alone; ``backward_s`` is the backward phase measured
    inside each forward + backward call (device synchronised between the two), never a
    difference of two timings."""
    device = resolve_device(config["device"])
    batch, n, d, causal = config["batch"], config["seq_len"], config["head_dim"], config["causal"]
    clock = PhaseClock(device)
    forward, forward_backward = _attention_calls(
        config["implementation"], batch, n, d, parse_dtype(config["dtype"]), causal, device, clock
    )
    warmup, steps = config["warmup"], config["steps"]
    fwd = time_fn(forward, warmup=warmup, steps=steps, device=device)
    end_to_end = time_fn(forward_backward, warmup=warmup, steps=steps, device=device)
    flops = attention_flops(batch, n, n, d, causal)
    backward = [step["backward"] for step in clock.last(steps)]
    return {
        "forward_s": fwd.median,
        "forward_unstable": fwd.unstable,
        "backward_s": float(np.median(backward)),
        "end_to_end_s": end_to_end.median,
        # The median's order-statistic interval (level in end_to_end_ci_level): a sequential
        # sweep claims no more than this; verdicts come from interleaved comparisons.
        "end_to_end_ci_low_s": end_to_end.median_ci.low,
        "end_to_end_ci_high_s": end_to_end.median_ci.high,
        "end_to_end_ci_level": end_to_end.median_ci.level,
        "end_to_end_unstable": end_to_end.unstable,
        "forward_tflops": flops["forward"] / fwd.median / 1e12,
        "end_to_end_tflops": flops["end_to_end"] / end_to_end.median / 1e12,
        "held_before_backward_bytes": _held_after_forward(forward, device),
        "peak_bytes": peak_memory(forward_backward, device),
        "speed_measurement": not interpreted(config["implementation"]),
    }


def compare_attention(
    implementation_a: str,
    implementation_b: str,
    *,
    batch: int,
    seq_len: int,
    head_dim: int,
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    causal: bool = False,
    rounds: int = ROUNDS,
    warmup: int = 2,
) -> Comparison:
    """Forward + backward of two implementations on the same shapes, interleaved by
    ``perflab.bench.compare``: b against a."""
    calls = [
        _attention_calls(name, batch, seq_len, head_dim, dtype, causal, device)[1]
        for name in (implementation_a, implementation_b)
    ]
    return compare(
        *calls,
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=(implementation_a, implementation_b),
    )


#: A student's implementation (``tools.adapters``) and perflab's of the same kind, whose length
#: limit it takes in ``attention_configs`` unless given its own.
LIMITED_LIKE = {"yours_pytorch": "flash_torch", "yours_triton": "flash_triton"}


def length_limits(max_seq_len: dict[str, int | None] | None) -> dict[str, int | None]:
    """``max_seq_len`` checked: each limit a whole number of tokens of at least 1, or None for
    no limit (0 is refused, not read as "no limit")."""
    if max_seq_len is not None and not isinstance(max_seq_len, Mapping):
        raise ValueError(
            "max_seq_len must map implementation names to limits, e.g. {'flash_torch': 1024}, "
            f"got {max_seq_len!r}"
        )
    limits = dict(max_seq_len or {})
    for name, limit in limits.items():
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ValueError(
                f"max_seq_len[{name!r}] must be a whole number of tokens >= 1 or None (no limit), "
                f"got {limit!r}"
            )
    return limits


def attention_configs(
    *,
    implementations,
    batch: int,
    head_dims,
    seq_lens,
    dtypes,
    warmup: int,
    steps: int,
    device: torch.device,
    causal: bool = False,
    max_seq_len: dict[str, int | None] | None = None,
) -> list[dict]:
    """The grid of notebooks 05 and 06: every implementation, dtype, d and length, skipping
    lengths above an implementation's ``max_seq_len`` and what the device cannot run
    (bfloat16 in the Triton interpreter). A student's implementation without a limit of its
    own takes perflab's of its kind (``LIMITED_LIKE``), where that has one; a limit of None is
    none (``length_limits``). Interpreted Triton rows get one call, no warm-up: they check that
    the kernels run, they measure nothing about speed."""
    given = length_limits(max_seq_len)
    limits = {mine: given[ours] for mine, ours in LIMITED_LIKE.items() if ours in given} | given
    configs = []
    for impl in implementations:
        runs_interpreted = interpreted(impl)
        for dtype in dtypes:
            if runs_interpreted and dtype == "bfloat16":
                continue
            for d in head_dims:
                for n in seq_lens:
                    if limits.get(impl) is not None and n > limits[impl]:
                        continue
                    configs.append(
                        {
                            "implementation": impl,
                            "batch": batch,
                            "seq_len": n,
                            "head_dim": d,
                            "dtype": dtype,
                            "causal": causal,
                            "device": str(device),
                            "warmup": 0 if runs_interpreted else warmup,
                            "steps": 1 if runs_interpreted else steps,
                        }
                    )
    return configs


def ratios_to(
    rows: pd.DataFrame,
    baseline: str,
    value: str,
    index=("head_dim", "seq_len"),
) -> pd.DataFrame:
    """``value`` of every implementation divided by ``baseline``'s, per ``index`` (rows with
    status "ok" only): e.g. compiled over naive forward seconds."""
    ok = rows[rows["status"] == "ok"]
    table = ok.pivot_table(index=list(index), columns="implementation", values=value)
    return table.drop(columns=baseline).div(table[baseline], axis=0).add_suffix(f"_over_{baseline}")


def naive_memory_check(rows: pd.DataFrame) -> pd.DataFrame:
    """Naive attention's measured bytes held for backward against ``naive_memory_bytes``."""
    naive = rows[(rows["status"] == "ok") & (rows["implementation"] == "naive")]
    formula = [
        naive_memory_bytes(int(r.batch), int(r.seq_len), int(r.head_dim), parse_dtype(r.dtype))
        for r in naive.itertuples()
    ]
    return pd.DataFrame(
        {
            "head_dim": naive["head_dim"].to_numpy(),
            "seq_len": naive["seq_len"].to_numpy(),
            "formula_held_MiB": [f["held_for_backward"] / 2**20 for f in formula],
            "measured_held_MiB": naive["held_before_backward_bytes"].to_numpy() / 2**20,
        }
    ).assign(measured_over_formula=lambda t: t["measured_held_MiB"] / t["formula_held_MiB"])


def attention_peak_memory(
    implementation: str,
    batch: int,
    seq_len: int,
    head_dim: int,
    device: torch.device,
    causal: bool = False,
    dtype: torch.dtype = torch.float32,
) -> dict:
    """Peak bytes of one forward + backward (after a warm-up one that allocates the input
    gradients), and the bytes held between forward and backward."""
    fn = get_implementation(implementation)
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (
        torch.randn(
            batch, seq_len, head_dim, device=device, dtype=dtype, generator=generator
        ).requires_grad_()
        for _ in range(3)
    )

    def forward():
        return fn(q, k, v, is_causal=causal)

    def forward_backward():
        forward().sum().backward()

    forward_backward()
    return {
        "implementation": implementation,
        "peak_bytes": peak_memory(forward_backward, device),
        "held_before_backward_bytes": _held_after_forward(forward, device),
    }


#: The 2025 FlashAttention leaderboard's case (CS336 2025, section 1.3.3): batch 1, 16 heads of
#: d 64 at 16,384 tokens, causal, bfloat16, forward + backward. The heads are the batch of the
#: (batch, seq, d) functions here. Best posted time: 5.364 ms on an H100.
LEADERBOARD_CASE = {
    "heads": 16,
    "seq_len": 16384,
    "head_dim": 64,
    "causal": True,
    "dtype": "bfloat16",
}


def host_ms(fn: Callable[[], object], device: torch.device, calls: int = 20) -> float:
    """Milliseconds of host time per call: ``calls`` calls issued back to back without waiting
    for the device (synchronised before only). On a GPU whose kernels outrun the host, this is
    what the Python path costs a call: launches, allocations, argument handling."""
    fn()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    synchronize(device)
    return elapsed / calls * 1e3


def device_ms(fn: Callable[[], object], device: torch.device, steps: int = 10) -> tuple[float, str]:
    """(milliseconds per call, method): ``triton.testing.do_bench``'s median on a GPU (it clears
    the L2 cache between calls and times with CUDA events), ``time_fn``'s median elsewhere."""
    if device.type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=100, return_mode="median")), "triton do_bench"
    return time_fn(fn, warmup=1, steps=steps, device=device).median * 1e3, "perflab time_fn"


def flash_speed(
    implementations: list[str],
    *,
    heads: list[int],
    seq_lens: list[int],
    head_dim: int = 64,
    dtype: str = "bfloat16",
    causal: bool = True,
    device: torch.device,
    rounds: int = ROUNDS,
    against: str = "sdpa",
    max_seq_len: dict[str, int | None] | None = None,
) -> tuple[pd.DataFrame, list[Comparison]]:
    """Forward + backward of each implementation at each (heads, length): device time per call
    (``device_ms``), host time per call (``host_ms``) and TFLOP/s, one row each; and every
    implementation against ``against`` (SDPA) interleaved (``compare``, ``rounds`` rounds),
    labelled by heads and length (``comparison_frame`` makes them a table). ``max_seq_len`` skips
    an implementation beyond a length (the tiled PyTorch version)."""
    limits, timed, versus = length_limits(max_seq_len), [], []
    dtype_ = parse_dtype(dtype)
    for n_heads in heads:
        for n in seq_lens:
            calls = {
                name: _attention_calls(name, n_heads, n, head_dim, dtype_, causal, device)[1]
                for name in implementations
                if limits.get(name) is None or n <= limits[name]
            }
            flops = attention_flops(n_heads, n, n, head_dim, causal)["end_to_end"]
            for name, call in calls.items():
                ms, method = device_ms(call, device)
                shape = {"heads": n_heads, "seq_len": n, "head_dim": head_dim, "dtype": dtype}
                timed.append(
                    {
                        "implementation": name,
                        **shape,
                        "causal": causal,
                        "device_ms": ms,
                        "host_ms": host_ms(call, device),
                        "tflops": flops / ms / 1e9,
                        "method": method,
                    }
                )
            for name, call in calls.items():
                if name == against or against not in calls:
                    continue
                result = compare(
                    calls[against],
                    call,
                    rounds=rounds,
                    warmup=2,
                    device=device,
                    names=(against, name),
                )
                versus.append(result.with_labels(heads=n_heads, seq_len=n))
    return pd.DataFrame(timed), versus


def host_calls(function, q: Tensor, k: Tensor, v: Tensor, is_causal: bool = True) -> dict:
    """What one forward + backward of the autograd.Function ``function`` does on the host,
    after a first call (which autotunes): Triton kernel launches and PyTorch operators outside
    them (autograd's own ``detach`` of what it saves aside), each as a list of names, forward
    and backward apart. The interpreter runs the same host code as a GPU."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from perflab.implementations.attention.interpreter import INTERPRETED  # imports Triton

    if INTERPRETED:
        from triton.runtime.interpreter import InterpretedFunction as Launcher
    else:
        from triton.runtime.jit import JITFunction as Launcher
    launches, operators, in_kernel = [], [], []
    launch = Launcher.run

    def counted(self, *args, **kwargs):
        launches.append(self.fn.__name__)
        in_kernel.append(True)  # the interpreter copies arguments with aten operators: not ours
        try:
            return launch(self, *args, **kwargs)
        finally:
            in_kernel.pop()

    class Operators(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not in_kernel and func.overloadpacket.__name__ != "detach":
                operators.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    grad = torch.randn_like(q)
    function.apply(q, k, v, is_causal).backward(grad)  # the first call (autotunes on a GPU)
    q.grad = k.grad = v.grad = None
    Launcher.run = counted
    try:
        with Operators():
            out = function.apply(q, k, v, is_causal)
            forward = (list(launches), list(operators))
            out.backward(grad)
    finally:
        Launcher.run = launch
    return {
        "forward_launches": forward[0],
        "forward_operators": forward[1],
        "backward_launches": launches[len(forward[0]) :],
        "backward_operators": operators[len(forward[1]) :],
    }


def host_call_table(
    functions: dict, q: Tensor, k: Tensor, v: Tensor, is_causal: bool = True
) -> pd.DataFrame:
    """``host_calls`` of each named autograd.Function, one row each: Triton launches and
    PyTorch operators of a forward and of a backward, and the operators' distinct names."""
    rows = []
    for name, function in functions.items():
        calls = host_calls(function, q, k, v, is_causal)
        rows.append(
            {
                "implementation": name,
                "forward_launches": len(calls["forward_launches"]),
                "forward_operators": len(calls["forward_operators"]),
                "backward_launches": len(calls["backward_launches"]),
                "backward_operators": len(calls["backward_operators"]),
                "operators": ", ".join(
                    sorted(set(calls["forward_operators"] + calls["backward_operators"]))
                ),
            }
        )
    return pd.DataFrame(rows)
