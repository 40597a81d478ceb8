"""The autotune configurations of the FlashAttention kernels (``flash_triton``), and the rule
that chose them.

A configuration is (BQ, BK, num_warps, num_stages): the query and key tile sizes, the warps of
a program and the software-pipelining depth of its loop. The rule: **a configuration is kept
for a kernel, head dimension and element size only when, compiled for sm_80 (A100), sm_90
(H100) and sm_100 (B200), it spills no registers and fits the target's shared memory.** A
spilling kernel trades registers for local-memory traffic in its hot loop (slower than a
smaller tile that fits); a configuration over the shared-memory limit cannot launch at all.
Where no candidate fits everywhere (float32 at head dimension 128: ``SPILLING``), the one that
spills least is kept alone, so that the kernel still runs.
``perflab.tools.kernels.search`` compiled every candidate on a CPU (``python -m
perflab.tools.kernels search`` prints that table again) and ``kernels.choose`` picked among those
that fit (its docstring says how). ``tests/test_aot_compile.py`` compiles every kept
configuration at head dimension 128 (the most registers and shared memory) for all three
targets, in fp16 and bf16 (causal and not) and fp32 (causal), and fails on any spill or
overflow outside ``SPILLING``; the smaller head dimensions it compiles for sm_90 in fp16.

On a GPU of another architecture (sm_86 and sm_89 have 99 KiB of shared memory per block,
sm_120 too) ``flash_triton`` also compiles each kept configuration for the GPU at hand and
drops those that do not fit, before the autotuner benchmarks any.

This module imports no Triton: ``interpreter`` decides first whether Triton is interpreted.
"""

from __future__ import annotations

#: Architectures (compute capability x 10) every configuration below was compiled for.
VERIFIED_ARCHS = (80, 90, 100)
#: The backward's preprocess kernel (D = rowsum(dO * O)): (BQ, num_warps). Memory-bound and
#: one pass over O and dO, so one fixed configuration.
PREPROCESS_CONFIG = (64, 4)

#: The FlashAttention kernels that autotune.
KERNELS = ("flash_forward", "flash_backward_kv", "flash_backward_q")
HEAD_DIMS = (16, 32, 64, 128)
#: Candidates the search compiles: tiles of 32 to 128, 4 or 8 warps, 2 to 4 stages.
CANDIDATES = [
    (bq, bk, warps, stages)
    for bq, bk in (
        (32, 32),
        (32, 64),
        (64, 32),
        (64, 64),
        (32, 128),
        (128, 32),
        (64, 128),
        (128, 64),
        (128, 128),
    )  # fmt: skip
    for warps in (4, 8)
    for stages in (2, 3, 4)
]

#: Kept configurations per kernel and head dimension, for 2-byte elements (fp16, bf16) and for
#: float32 (4-byte elements take twice the shared memory and registers): ``kernels.choose`` applied
#: to ``kernels.search``'s compiles (Triton 3.7.1; ``python -m perflab.tools.kernels search`` prints
#: it again). Listed smallest tile first.
KEPT = {
    ("flash_backward_kv", 2): {
        16: [(32, 32, 4, 4), (32, 64, 4, 4), (64, 32, 4, 4), (32, 128, 4, 4), (64, 64, 4, 4),
            (128, 32, 4, 4), (64, 128, 8, 4), (128, 64, 8, 4)],
        32: [(32, 32, 4, 4), (32, 64, 4, 4), (64, 32, 4, 4), (32, 128, 4, 4), (64, 64, 4, 4),
            (64, 128, 8, 4), (128, 64, 8, 4)],
        64: [(32, 32, 4, 4), (32, 64, 4, 4), (64, 32, 4, 4), (32, 128, 8, 4), (64, 64, 8, 3),
            (128, 32, 8, 4), (64, 128, 8, 4)],
        128: [(32, 32, 4, 4), (32, 64, 8, 4), (64, 32, 8, 4), (64, 64, 8, 4), (128, 32, 8, 3)],
    },
    ("flash_backward_q", 2): {
        16: [(32, 32, 4, 4), (32, 64, 4, 4), (64, 32, 4, 4), (32, 128, 4, 4), (64, 64, 4, 4),
            (128, 32, 4, 4), (64, 128, 8, 4), (128, 64, 8, 4), (128, 128, 8, 4)],
        32: [(32, 32, 4, 4), (32, 64, 8, 4), (64, 32, 4, 4), (32, 128, 8, 4), (64, 64, 4, 4),
            (128, 32, 4, 4), (64, 128, 8, 4), (128, 64, 8, 4)],
        64: [(32, 32, 4, 4), (32, 64, 4, 4), (64, 32, 4, 4), (32, 128, 8, 4), (64, 64, 4, 4),
            (128, 32, 8, 4), (128, 64, 8, 4)],
        # Chosen again (fp16 and bf16) when the causal dQ kernel began to take its heaviest
        # query tiles first: three of the earlier seven then spilled on sm_80.
        128: [(32, 32, 8, 4), (32, 64, 8, 4), (64, 32, 4, 4), (64, 64, 4, 4), (128, 32, 8, 4)],
    },
    ("flash_forward", 2): {
        16: [(32, 32, 4, 4), (32, 64, 4, 4), (64, 32, 4, 4), (32, 128, 4, 4), (64, 64, 8, 4),
            (128, 32, 8, 4), (64, 128, 8, 4), (128, 64, 4, 4), (128, 128, 8, 4)],
        32: [(32, 32, 4, 4), (32, 64, 4, 3), (64, 32, 4, 4), (32, 128, 4, 4), (64, 64, 8, 2),
            (128, 32, 4, 4), (64, 128, 8, 4), (128, 64, 4, 4), (128, 128, 8, 4)],
        # Chosen again when the causal forward began to take its heaviest query tiles first:
        # no (128, 64) configuration then fitted everywhere (4 warps spill on sm_80, 8 on
        # sm_100).
        64: [(32, 32, 4, 4), (32, 64, 4, 4), (64, 32, 4, 4), (64, 64, 4, 4), (128, 32, 4, 4),
            (64, 128, 8, 4), (128, 128, 8, 4)],
        128: [(32, 32, 8, 4), (32, 64, 4, 4), (64, 32, 4, 4), (32, 128, 8, 2), (64, 64, 4, 4),
            (128, 32, 8, 4), (64, 128, 8, 3), (128, 64, 8, 4)],
    },
    ("flash_backward_kv", 4): {
        16: [(16, 32, 4, 3), (32, 32, 4, 3), (32, 64, 4, 3), (64, 32, 8, 2)],
        32: [(16, 32, 4, 3), (32, 16, 4, 3), (32, 32, 4, 3), (32, 64, 8, 2), (64, 32, 8, 2)],
        64: [(16, 32, 4, 3), (32, 16, 4, 2), (32, 32, 8, 2)],
        128: [(32, 32, 8, 2)],
    },
    ("flash_backward_q", 4): {
        16: [(16, 32, 4, 3), (32, 16, 4, 3), (32, 32, 4, 2), (32, 64, 4, 3), (64, 32, 4, 3),
            (64, 64, 4, 3)],
        32: [(16, 32, 4, 3), (32, 16, 4, 3), (32, 32, 4, 2), (32, 64, 4, 3), (64, 32, 4, 3),
            (64, 64, 8, 2)],
        64: [(16, 32, 4, 3), (32, 16, 4, 3), (32, 32, 4, 3), (32, 64, 8, 2), (64, 32, 8, 2)],
        128: [(32, 16, 4, 2), (32, 64, 8, 2)],
    },
    ("flash_forward", 4): {
        16: [(16, 32, 4, 3), (32, 16, 4, 3), (32, 32, 4, 3), (32, 64, 4, 3), (64, 32, 4, 3),
            (64, 64, 4, 2)],
        32: [(16, 32, 4, 3), (32, 16, 4, 3), (32, 32, 4, 3), (32, 64, 4, 3), (64, 32, 4, 2),
            (64, 64, 8, 2)],
        64: [(16, 32, 4, 3), (32, 16, 4, 3), (32, 32, 8, 2), (32, 64, 8, 2), (64, 32, 8, 2)],
        128: [(32, 64, 8, 2)],
    },

}  # fmt: skip
#: Where no float32 configuration fits every target (``kernels.spilling`` of the float32 search), by
#: element size: ``kernels.choose`` kept the one that spills least, alone. float32 is this
#: workbook's correctness path (checked against float64), not its speed path.
SPILLING = {2: set(), 4: {("flash_backward_kv", 128), ("flash_forward", 128)}}


def _kept(name: str, element_size: int) -> dict[int, list[tuple[int, int, int, int]]]:
    key = (name, 2 if element_size <= 2 else 4)
    if key not in KEPT:
        raise ValueError(f"no configurations for {name!r}; valid: {', '.join(KERNELS)}")
    return KEPT[key]


def kept_configs(name: str, head_dim: int, element_size: int) -> list[tuple[int, int, int, int]]:
    """The configurations kept for kernel ``name`` at ``head_dim`` and ``element_size`` bytes."""
    table = _kept(name, element_size)
    if head_dim not in table:
        raise ValueError(f"head dimension {head_dim} unsupported; valid: {sorted(table)}")
    return table[head_dim]


def all_configs(name: str) -> list[tuple[int, int, int, int]]:
    """Every configuration kept for ``name`` at any head dimension or element size, once."""
    seen = {}
    for size in (2, 4):
        for configs in _kept(name, size).values():
            seen.update(dict.fromkeys(configs))
    return list(seen)


def autotune_configs(name: str) -> list:
    """``all_configs(name)`` as ``triton.Config`` objects (the autotuner's full list; its prune
    step keeps those of the launch's head dimension and element size)."""
    import triton

    return [
        triton.Config({"BQ": bq, "BK": bk}, num_warps=warps, num_stages=stages)
        for bq, bk, warps, stages in all_configs(name)
    ]


def as_tuple(config) -> tuple[int, int, int, int]:
    """(BQ, BK, num_warps, num_stages) of a ``triton.Config``."""
    return (config.kwargs["BQ"], config.kwargs["BK"], config.num_warps, config.num_stages)


def configs_for(name: str, head_dim: int, element_size: int, configs: list) -> list:
    """The ``triton.Config`` objects of ``configs`` kept for this kernel, head dimension and
    element size (the autotuner's early prune; pure Python, no compile)."""
    kept = set(kept_configs(name, head_dim, element_size))
    return [config for config in configs if as_tuple(config) in kept]


#: float32 candidates: tiles of 16 to 64 (4-byte tiles take twice the registers and shared
#: memory of 2-byte ones): 4 warps at 2 or 3 stages, 8 warps at 2.
CANDIDATES_FP32 = [
    *[(bq, bk, 4, stages) for bq, bk in ((16, 32), (32, 16), (32, 32), (32, 64), (64, 32),
                                         (64, 64)) for stages in (2, 3)],
    *[(bq, bk, 8, 2) for bq, bk in ((32, 32), (32, 64), (64, 32), (64, 64))],
]  # fmt: skip


def kept_table(head_dim: int, element_size: int = 2):
    """The kept configurations of every kernel at ``head_dim``, one row each (a DataFrame)."""
    import pandas as pd

    return pd.DataFrame(
        [{"kernel": name, "block_q": bq, "block_k": bk, "num_warps": warps, "num_stages": stages}
         for name in KERNELS for bq, bk, warps, stages in kept_configs(name, head_dim,
                                                                         element_size)]
    )  # fmt: skip
