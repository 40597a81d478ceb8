"""The device's measured yardsticks: the matmul peak of MFU (notebook 01) and the copy bandwidth
of a memory-bound roofline (notebook 10).

A peak is a maximum: each is the best of several timed runs (the fastest sample) at sizes that
reach it, with the median beside it as the spread. A median on a shared machine is lowered by
every other process's time slice, and every MFU or roofline fraction quoted against a low
yardstick is inflated by it (``perflab check-results`` flags an achieved rate above its
yardstick). A benchmark, so it lives here with the timer it uses, not in ``perflab.measure.device``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from perflab.measure.device import device_name, dtype_name
from perflab.measure.timer import time_fn


@dataclass(frozen=True)
class PeakMatmul:
    """Best measured dense matmul rate: 2*n^3 FLOPs for an (n x n) @ (n x n) product, over the
    fastest of ``steps`` runs; ``median_flops_per_s`` is the rate of the median run."""

    device_name: str
    dtype: str
    size: int
    best_s: float
    median_s: float
    flops_per_s: float
    median_flops_per_s: float
    steps: int

    def as_dict(self) -> dict:
        return asdict(self)


def measure_peak_matmul(
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    sizes: tuple[int, ...] | None = None,
    warmup: int = 2,
    steps: int = 5,
) -> PeakMatmul:
    """The fastest run of square matmuls of ``sizes`` on ``device``: the peak MFU is quoted
    against.

    Measured, not taken from a datasheet: the datasheet peak is not reachable by PyTorch
    matmuls, and a CPU has none. Defaults: n in (1024, 2048) on CPU, (4096, 8192) on CUDA.
    """
    if sizes is None:
        sizes = (4096, 8192) if device.type == "cuda" else (1024, 2048)
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"sizes must be a non-empty tuple of positive ints, got {sizes!r}")
    best = None
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        timing = time_fn(lambda a=a, b=b: a @ b, warmup=warmup, steps=steps, device=device)
        flops = 2 * n**3
        if best is None or flops / timing.min > best.flops_per_s:
            best = PeakMatmul(
                device_name(device),
                dtype_name(dtype),
                n,
                timing.min,
                timing.median,
                flops / timing.min,
                flops / timing.median,
                steps,
            )
    return best


@dataclass(frozen=True)
class CopyBandwidth:
    """Measured memory bandwidth of a large copy: read + write bytes over the fastest of
    ``steps`` runs; ``median_bytes_per_s`` over the median run."""

    device_name: str
    size_bytes: int
    best_s: float
    median_s: float
    bytes_per_s: float
    median_bytes_per_s: float
    steps: int

    def as_dict(self) -> dict:
        return asdict(self)


def measure_copy_bandwidth(
    device: torch.device, size_bytes: int | None = None, warmup: int = 2, steps: int = 10
) -> CopyBandwidth:
    """Bandwidth of ``dst.copy_(src)`` for buffers of ``size_bytes`` (default 256 MiB on CPU,
    well beyond the caches; 1 GiB on CUDA), counting the bytes read and written (2 x size, as
    STREAM's copy does) over the fastest of ``steps`` copies: the slope of a memory-bound
    roofline, measured, not a datasheet's."""
    if size_bytes is None:
        size_bytes = 2**30 if device.type == "cuda" else 2**28
    if size_bytes < 4:
        raise ValueError(f"size_bytes must be at least 4, got {size_bytes}")
    src = torch.ones(size_bytes // 4, device=device)
    dst = torch.empty_like(src)
    timing = time_fn(lambda: dst.copy_(src), warmup=warmup, steps=steps, device=device)
    moved = 2 * src.numel() * 4
    return CopyBandwidth(
        device_name(device),
        moved // 2,
        timing.min,
        timing.median,
        moved / timing.min,
        moved / timing.median,
        steps,
    )
