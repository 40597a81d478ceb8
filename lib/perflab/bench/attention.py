"""Benchmarks of attention implementations (notebooks 05 and 06).

Every implementation is called as ``fn(q, k, v, is_causal=...)`` on q, k, v of shape
(batch, seq, d). One configuration measures forward time, forward + backward time (backward =
their difference), the memory held between forward and backward, the peak memory of forward +
backward, and TFLOP/s from the FLOP model below. Run through ``perflab.bench.Sweep`` so that
out-of-memory becomes a row and the sweep goes on.

FLOPs (Dao 2023, FlashAttention-2, section 4): forward 4 * b * n_q * n_k * d (two matmuls),
halved when causal; backward 2.5x the forward (five matmuls, one of them recomputing S).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

from perflab.attention.flash_torch import FlashAttentionTorch
from perflab.attention.flash_triton import INTERPRETED, FlashAttentionTriton
from perflab.attention.reference import naive_attention
from perflab.bench.timer import time_fn
from perflab.device import parse_dtype, resolve_device, synchronize
from perflab.memory.timeline import peak_memory, record_timeline


@functools.cache
def _compiled_naive() -> Callable:
    return torch.compile(naive_attention, dynamic=True)


IMPLEMENTATIONS: dict[str, Callable[[], Callable]] = {
    "naive": lambda: naive_attention,
    "naive_compiled": _compiled_naive,
    "sdpa": lambda: F.scaled_dot_product_attention,
    "flash_torch": lambda: lambda q, k, v, is_causal: FlashAttentionTorch.apply(q, k, v, is_causal),
    "flash_triton": lambda: (
        lambda q, k, v, is_causal: FlashAttentionTriton.apply(q, k, v, is_causal)
    ),
}


def get_implementation(name: str) -> Callable:
    """The attention function called ``name``, or a ValueError listing the valid names."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown attention {name!r}; valid: {', '.join(IMPLEMENTATIONS)}")
    return IMPLEMENTATIONS[name]()


def attention_flops(batch: int, n_q: int, n_k: int, d: int, causal: bool) -> dict[str, float]:
    """Forward, backward and forward + backward FLOPs of attention (see the module docstring)."""
    forward = 4 * batch * n_q * n_k * d * (0.5 if causal else 1.0)
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


def measure_attention(config: dict) -> dict:
    """Sweep measure function for one configuration with keys implementation, batch, seq_len,
    head_dim, dtype, causal, device, warmup, steps. Returns times (s), memory (bytes), TFLOP/s
    and whether the timing is a speed measurement (not for the Triton interpreter)."""
    device = resolve_device(config["device"])
    dtype = parse_dtype(config["dtype"])
    fn = get_implementation(config["implementation"])
    batch, n, d, causal = config["batch"], config["seq_len"], config["head_dim"], config["causal"]
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (
        torch.randn(batch, n, d, device=device, dtype=dtype, generator=generator).requires_grad_()
        for _ in range(3)
    )
    grad = torch.randn(batch, n, d, device=device, dtype=dtype, generator=generator)

    def forward():
        return fn(q, k, v, is_causal=causal)

    def forward_backward():
        forward().backward(grad)

    warmup, steps = config["warmup"], config["steps"]
    fwd = time_fn(forward, warmup=warmup, steps=steps, device=device)
    end_to_end = time_fn(forward_backward, warmup=warmup, steps=steps, device=device)
    flops = attention_flops(batch, n, n, d, causal)
    backward_s = max(end_to_end.median - fwd.median, 0.0)
    return {
        "forward_s": fwd.median,
        "backward_s": backward_s,
        "end_to_end_s": end_to_end.median,
        "forward_tflops": flops["forward"] / fwd.median / 1e12,
        "end_to_end_tflops": flops["end_to_end"] / end_to_end.median / 1e12,
        "held_before_backward_bytes": _held_after_forward(forward, device),
        "peak_bytes": peak_memory(forward_backward, device),
        "speed_measurement": not (config["implementation"] == "flash_triton" and INTERPRETED),
    }


def flash_benchmark_configs(profile, device: torch.device,
                            implementations=("naive", "sdpa", "flash_torch", "flash_triton"),
                            causal: bool = True) -> list[dict]:  # fmt: skip
    """Notebook 06's grid from a ``FlashProfile``: every implementation, d, length and dtype,
    skipping lengths above an implementation's ``max_seq_len`` and what the device cannot run
    (bfloat16 in the Triton interpreter). Interpreted Triton rows get one call, no warm-up:
    they check that the kernels run, they measure nothing about speed."""
    limits = dict(profile.max_seq_len)
    configs = []
    for impl in implementations:
        interpreted = impl == "flash_triton" and INTERPRETED
        for dtype in profile.dtypes:
            if interpreted and dtype == "bfloat16":
                continue
            for d in profile.head_dims:
                for n in profile.seq_lens:
                    if n > limits.get(impl, n):
                        continue
                    configs.append({
                        "implementation": impl, "batch": profile.batch, "seq_len": n,
                        "head_dim": d, "dtype": dtype, "causal": causal, "device": str(device),
                        "warmup": 0 if interpreted else profile.warmup,
                        "steps": 1 if interpreted else profile.steps,
                    })  # fmt: skip
    return configs


def attention_peak_memory(implementation: str, batch: int, seq_len: int, head_dim: int,
                          device: str | torch.device = "auto", causal: bool = False,
                          dtype: str = "float32") -> dict:  # fmt: skip
    """Peak bytes of one forward + backward (after a warm-up one that allocates the input
    gradients), and the bytes held between forward and backward."""
    device = resolve_device(device)
    fn = get_implementation(implementation)
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v = (
        torch.randn(batch, seq_len, head_dim, device=device, dtype=parse_dtype(dtype),
                    generator=generator).requires_grad_()
        for _ in range(3)
    )  # fmt: skip

    def forward():
        return fn(q, k, v, is_causal=causal)

    def forward_backward():
        forward().sum().backward()

    forward_backward()
    return {"implementation": implementation, "peak_bytes": peak_memory(forward_backward, device),
            "held_before_backward_bytes": _held_after_forward(forward, device)}  # fmt: skip
