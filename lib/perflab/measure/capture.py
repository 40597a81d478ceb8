"""Record a torch.profiler trace of any callable (``record_trace``), with a profiler whose start
and stop print nothing (``profiling``). On CUDA the trace holds device kernels, on CPU only CPU
operators. A training step of the workbook's model: ``perflab.lessons.nb02_profiling.step_trace``.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from perflab.measure.device import synchronize


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for a moment: Kineto prints a log line to it at every
    profiler start and stop, which would otherwise land in every notebook output."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def profiling(**kwargs) -> Iterator[profile]:
    """``torch.profiler.profile(**kwargs)`` whose start and stop print nothing; what runs
    inside keeps its stderr."""
    profiler = profile(**kwargs)
    with _stderr_silenced():
        profiler.start()
    try:
        yield profiler
    finally:
        with _stderr_silenced():
            profiler.stop()


def record_trace(
    step: Callable[[], object],
    path: str | Path,
    device: torch.device,
    *,
    warmup: int = 1,
    steps: int = 2,
) -> Path:
    """Run ``step`` ``warmup`` times unprofiled, then profile ``steps`` calls (CPU operators, and
    device kernels on CUDA) and write the trace to ``path`` (gzipped when it ends in .gz)."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    for _ in range(warmup):
        step()
    synchronize(device)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profiling(activities=activities) as profiler:
        for _ in range(steps):
            step()
        synchronize(device)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(plain))
        if path.suffix == ".gz":
            with plain.open("rb") as src, gzip.open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(plain, path)
    return path
