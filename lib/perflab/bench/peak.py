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
