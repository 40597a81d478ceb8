"""The plan that verifies the whole workbook on one GPU box: two leases of at most
``LEASE_MINUTES`` GPU-minutes each, split into commands of at most ``COMMAND_LIMIT_S`` (a
lease's machine runs one command at a time, 10 minutes at most).

Lease A: the unit tests on CUDA (the GPU-only ones first), then the FlashAttention notebook
(whose GPU speeds matter most), benchmarking, profiling, mixed precision and memory. Lease B:
attention and compile, the two distributed notebooks, the training step and decoding. Every
notebook runs at its full sizes (``perflab.settings.FULL_SIZES``) cut by ``LEASE_SIZES`` to
fit, the same on any GPU box (``perflab run --lease``).

Each command's estimate is a plan, not a measurement: its basis says where it comes from (the
H100 lease of 2026-11-23, which ran notebooks 01 and 06 and the GPU-only tests, or the CPU
run's seconds and the compilations and model sizes the lease sizes imply). ``.ci/gpu-check
plan`` prints the table; ``.ci/gpu-check lease A`` runs lease A's commands, ``lease A 2`` its
second alone.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pandas as pd

#: GPU-minutes of one lease, its machine's start included (a lease has 30).
LEASE_MINUTES = 28
#: Seconds a command may run (a lease's machine allows 10 minutes a command).
COMMAND_LIMIT_S = 570
#: Minutes a lease spends starting its machine before the first command.
START_MINUTES = 3


@dataclass(frozen=True)
class LeaseCommand:
    """One command of a lease: the unit tests, or notebooks at their lease sizes."""

    lease: str
    number: int
    notebooks: tuple[str, ...]  # empty: the unit tests on CUDA
    estimate_s: int
    basis: str

    @property
    def name(self) -> str:
        return f"{self.lease}{self.number}"

    @property
    def what(self) -> str:
        return ", ".join(self.notebooks) if self.notebooks else "unit tests on CUDA"


PLAN = (
    LeaseCommand(
        "A",
        1,
        (),
        330,
        "H100 lease: the GPU-only tests took about 200 s with their kernels pinned; "
        "the rest under pytest -n 8 (two minutes of CPU work on 16 cores)",
    ),
    LeaseCommand(
        "A",
        2,
        ("06_flash_attention",),
        420,
        "H100 lease: the sweep, checks and compiles of three lengths took 250 s; the "
        "comparisons and the leaderboard case add about 3 minutes of autotuned kernels",
    ),
    LeaseCommand(
        "A",
        3,
        ("01_benchmarking", "02_profiling"),
        300,
        "H100 lease: 01 at full sizes took about 200 s with five presets (the lease "
        "times three); 02: traces of small at three contexts, about 2 minutes",
    ),
    LeaseCommand(
        "A",
        4,
        ("03_mixed_precision", "04_memory"),
        330,
        "03: three presets, float32 against bfloat16 in 20-second budgets; 04: snapshots "
        "and peaks of small and the checkpointing sweeps, about 2 minutes",
    ),
    LeaseCommand(
        "B",
        1,
        ("05_attention_compile",),
        270,
        "three lengths at d 64 (seconds each), the small model compiled in two modes: "
        "max-autotune benchmarks its matmul shapes, the bulk of the time",
    ),
    LeaseCommand(
        "B",
        2,
        ("07_distributed_ddp", "08_sharding"),
        390,
        "one GPU: the ranks on Gloo (07 with CUDA tensors, 08 on the CPU at its lease "
        "model sizes); the CPU run takes 150 s for both at smaller sizes",
    ),
    LeaseCommand(
        "B",
        3,
        ("09_training_step",),
        360,
        "the ladder's rungs at 10 s per comparison with their checks, the compile "
        "rung's compilation, the sharded step on two Gloo ranks of a small model",
    ),
    LeaseCommand(
        "B",
        4,
        ("10_decoding",),
        420,
        "the 8B model in bfloat16 (16 GB): one compile per batch size timed (two), "
        "int8's own, about a minute each; grouped-query attention eager",
    ),
)


def plan_table() -> pd.DataFrame:
    """One row per command: lease, command, what it runs, estimated minutes and the basis."""
    return pd.DataFrame(
        [
            {
                "lease": c.lease,
                "command": c.name,
                "runs": c.what,
                "estimate_min": round(c.estimate_s / 60, 1),
                "basis": c.basis,
            }
            for c in PLAN
        ]
    )


def lease_minutes(lease: str) -> float:
    """A lease's estimated GPU-minutes: its commands and the machine's start."""
    return START_MINUTES + sum(c.estimate_s for c in PLAN if c.lease == lease) / 60


def commands(lease: str, number: int | None = None) -> list[LeaseCommand]:
    """Lease ``lease``'s commands, or its command ``number`` alone; one clear error otherwise."""
    leases = sorted({c.lease for c in PLAN})
    if lease not in leases:
        raise ValueError(f"unknown lease {lease!r}; valid: {', '.join(leases)}")
    chosen = [c for c in PLAN if c.lease == lease and number in (None, c.number)]
    if not chosen:
        valid = ", ".join(str(c.number) for c in PLAN if c.lease == lease)
        raise ValueError(f"lease {lease} has no command {number}; valid: {valid}")
    return chosen


def _main(argv: list[str]) -> int:
    """``plan``: the table; ``commands LEASE [N]``: one line per command, "NAME NOTEBOOKS...
    ESTIMATE_S" (no notebooks: the unit tests), for ``.ci/gpu-check``."""
    if argv[:1] == ["plan"]:
        table = plan_table()
        with pd.option_context("display.max_colwidth", 90, "display.width", 200):
            print(table.to_string(index=False))
        for lease in sorted(table["lease"].unique()):
            print(
                f"lease {lease}: {lease_minutes(lease):.1f} GPU-minutes estimated with "
                f"{START_MINUTES} for the machine's start, of {LEASE_MINUTES}"
            )
        return 0
    if argv[:1] == ["commands"] and len(argv) in (2, 3):
        try:
            chosen = commands(argv[1], int(argv[2]) if len(argv) == 3 else None)
        except ValueError as error:
            print(f"perflab.lease: {error}", file=sys.stderr)
            return 2
        for command in chosen:
            print(command.name, " ".join(command.notebooks) or "-", command.estimate_s)
        return 0
    print("usage: python -m perflab.lease plan | commands LEASE [NUMBER]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
