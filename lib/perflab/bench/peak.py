"""The device's measured matmul peak: the yardstick of MFU (notebook 01).

A benchmark, so it lives here with the timer it uses, not in ``perflab.device``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from perflab.bench.timer import time_fn
from perflab.device import device_name, dtype_name


@dataclass(frozen=True)
class PeakMatmul:
    """Best measured dense matmul rate: 2*n^3 FLOPs for an (n x n) @ (n x n) product."""

    device_name: str
    dtype: str
    size: int
    median_s: float
    flops_per_s: float

    def as_dict(self) -> dict:
        return asdict(self)


def measure_peak_matmul(
    device: torch.device,
    dtype: torch.dtype = torch.float32,
    sizes: tuple[int, ...] | None = None,
    warmup: int = 2,
    steps: int = 5,
) -> PeakMatmul:
    """The fastest of square matmuls of ``sizes`` on ``device``: the peak MFU is quoted against.

    Measured, not taken from a datasheet: the datasheet peak is not reachable by PyTorch
    matmuls, and a CPU has none. Defaults: n in (512, 1024, 2048) on CPU, (4096, 8192) on CUDA.
    """
    if sizes is None:
        sizes = (4096, 8192) if device.type == "cuda" else (512, 1024, 2048)
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"sizes must be a non-empty tuple of positive ints, got {sizes!r}")
    best = None
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        timing = time_fn(lambda a=a, b=b: a @ b, warmup=warmup, steps=steps, device=device)
        rate = 2 * n**3 / timing.median
        if best is None or rate > best.flops_per_s:
            best = PeakMatmul(device_name(device), dtype_name(dtype), n, timing.median, rate)
    return best


@dataclass(frozen=True)
class CopyBandwidth:
    """Measured memory bandwidth of a large copy: read + write bytes over the median time."""

    device_name: str
    size_bytes: int
    median_s: float
    bytes_per_s: float

    def as_dict(self) -> dict:
        return asdict(self)


def measure_copy_bandwidth(device: torch.device, size_bytes: int | None = None, warmup: int = 2,
                           steps: int = 5) -> CopyBandwidth:  # fmt: skip
    """Bandwidth of ``dst.copy_(src)`` for buffers of ``size_bytes`` (default 256 MiB on CPU,
    well beyond the caches; 1 GiB on CUDA), counting the bytes read and written (2 x size, as
    STREAM's copy does): the slope of a memory-bound roofline, measured, not a datasheet's."""
    if size_bytes is None:
        size_bytes = 2**30 if device.type == "cuda" else 2**28
    if size_bytes < 4:
        raise ValueError(f"size_bytes must be at least 4, got {size_bytes}")
    src = torch.ones(size_bytes // 4, device=device)
    dst = torch.empty_like(src)
    timing = time_fn(lambda: dst.copy_(src), warmup=warmup, steps=steps, device=device)
    moved = 2 * src.numel() * 4
    return CopyBandwidth(device_name(device), moved // 2, timing.median, moved / timing.median)
