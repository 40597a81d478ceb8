"""GPU-only: the kernel summary from Nsight Systems itself.

``nsys profile`` runs ``perflab bench`` with the NVTX capture range "timed" (the range the
timer opens around the timed steps, so warm-up is not captured), then
``nsys stats --report cuda_gpu_kern_sum --format csv`` reads the report back into the same
table layout as ``perflab.measure.summary.kernel_summary``. Needs CUDA and ``nsys`` on PATH;
``nsys_available()`` says whether both are there. Not executable on a CPU-only machine.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

from perflab.measure.ranges import TIMED_RANGE
from perflab.measure.summary import SUMMARY_COLUMNS, KernelSummary


def nsys_available() -> bool:
    """True when both CUDA and the ``nsys`` command are present."""
    return torch.cuda.is_available() and shutil.which("nsys") is not None


def nsys_profile_command(report: Path, bench_args: list[str]) -> list[str]:
    """The ``nsys profile`` command line for ``perflab bench`` with ``bench_args``."""
    return [
        "nsys",
        "profile",
        "--trace=cuda,nvtx",
        "--capture-range=nvtx",
        f"--nvtx-capture={TIMED_RANGE}",
        "--capture-range-end=stop",
        "--force-overwrite=true",
        "--output",
        str(report),
        sys.executable,
        "-m",
        "perflab",
        "bench",
        *bench_args,
    ]


def parse_kern_sum_csv(text: str) -> pd.DataFrame:
    """The cuda_gpu_kern_sum table from ``nsys stats --format csv`` output (which may have
    progress lines before the CSV header)."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if line.lstrip('"').startswith("Time (%)")), None
    )
    if start is None:
        raise ValueError("no cuda_gpu_kern_sum table in the nsys stats output")
    table = pd.read_csv(io.StringIO("\n".join(lines[start:])))
    missing = [c for c in SUMMARY_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"nsys stats table lacks columns {missing}")
    return table[SUMMARY_COLUMNS]


def nsys_kernel_summary(bench_args: list[str], output_dir: str | Path) -> KernelSummary:
    """Profile ``perflab bench *bench_args`` under nsys and return its kernel summary."""
    if not nsys_available():
        raise RuntimeError("nsys_kernel_summary needs CUDA and nsys on PATH (GPU-only)")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    report = output_dir / "bench"
    # torch.cuda.nvtx pushes unregistered strings; this lets nsys match the capture range by name.
    env = {**os.environ, "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    subprocess.run(
        nsys_profile_command(report, bench_args), check=True, capture_output=True, env=env
    )
    stats = subprocess.run(
        [
            "nsys",
            "stats",
            "--report",
            "cuda_gpu_kern_sum",
            "--format",
            "csv",
            "--force-export=true",
            f"{report}.nsys-rep",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return KernelSummary(parse_kern_sum_csv(stats.stdout), "nsys cuda_gpu_kern_sum", TIMED_RANGE)
