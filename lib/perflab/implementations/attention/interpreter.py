"""Triton compiled or interpreted, decided once, before Triton is imported: with no CUDA (and
no ``TRITON_INTERPRET`` of the user's), ``TRITON_INTERPRET=1``, so that the workbook's kernels
run in Triton's interpreter on a CPU, each program in NumPy. Every kernel module takes
``triton`` and ``tl`` from here, so the decision comes first whatever is imported first."""

from __future__ import annotations

import os
import sys

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton.language" in sys.modules:  # too late: its kernels would fail when interpreted
        raise ImportError(
            "Triton was imported (e.g. by torch.compile) before TRITON_INTERPRET=1 was set; "
            "import perflab first, or start Python with TRITON_INTERPRET=1"
        )
    os.environ["TRITON_INTERPRET"] = "1"

import triton  # noqa: E402  (after TRITON_INTERPRET is decided)
import triton.language as tl  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
INTERPRETER_TILE = 16  # small tiles: the interpreter runs each program in NumPy

__all__ = ["INTERPRETED", "INTERPRETER_TILE", "tl", "triton"]
