"""Named ranges that both profilers see.

``annotate("forward")`` opens an NVTX range (read by Nsight Systems; pushed only when CUDA is
present) and a ``torch.profiler.record_function`` range (read by torch.profiler, which writes it
to the trace as a ``user_annotation`` event on the CPU timeline and, on CUDA, a
``gpu_user_annotation`` event spanning the range's kernels). Without an active profiler both
cost about a microsecond, so the workbook's steps are always annotated.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

#: The range the timer opens around the timed steps (the capture range that makes nsys skip the
#: warm-up). ``perflab.bench.make_step`` opens "step", "forward", "backward" and "optimizer".
TIMED_RANGE = "timed"


@contextlib.contextmanager
def annotate(name: str) -> Iterator[None]:
    """A range called ``name`` for Nsight Systems (NVTX) and torch.profiler at once."""
    nvtx = torch.cuda.is_available()
    if nvtx:
        torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        if nvtx:
            torch.cuda.nvtx.range_pop()
