"""The plan that verifies the whole workbook on GPU boxes lent ``LEASE_MINUTES`` at a time (a
lease's machine start and its idle waits included), one command of at most ``COMMAND_LIMIT_S``
per call.

The smoke command comes first (``perflab.tools.smoke``: the central GPU questions in minutes), with
the GPU-only unit tests; then, ordered by value, the FlashAttention notebook, benchmarking, the
other unit tests on CUDA, and the remaining notebooks at their lease sizes
(``perflab.settings.LEASE_SIZES``, ``perflab run --lease``), each command within one call and
each lease's commands, with its start, within its minutes.

``.ci/gpu-check next`` runs the first command that the log (``LOG``, committed) does not
record as done, and records its outcome there, so each lease continues where the last stopped:
after a lease, copy the log back with the rows and commit both.

Each command's estimate is a plan, not a measurement: its basis says where it comes from (a
lease's log in ``data/GPU_CHECKS.md``, or the CPU run's seconds and the compilations and model
sizes the lease sizes imply). ``.ci/gpu-check plan`` prints the table.
"""

from __future__ import annotations

import csv
import datetime
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

#: Minutes of one lease, its machine's start and idle waits included.
LEASE_MINUTES = 15
#: Minutes a lease spends starting its machine (one to three).
START_MINUTES = 3
#: Seconds one command may run (a call allows 10 minutes; a minute is kept for the transfers).
COMMAND_LIMIT_S = 540
#: The log of what ran: one row per command run on a lease, committed (``$PERFLAB_LEASE_LOG``
#: names another file, for a trial run).
LOG = Path(
    os.environ.get("PERFLAB_LEASE_LOG")
    or Path(__file__).resolve().parents[3] / "data" / "gpu_leases.csv"
)
LOG_FIELDS = ("command", "status", "seconds", "commit", "library_tree", "gpu", "finished_at")
#: Python packages a notebook command needs that a lease box lacks (torch, pandas, matplotlib,
#: seaborn and tqdm are there): carried as wheels (``.ci/gpu-check wheels``, run here). The
#: unit tests need them too: four test modules import nbformat, papermill or ipywidgets.
NOTEBOOK_WHEELS = (
    "papermill", "nbclient", "nbformat", "jupyter-client", "jupyter-core", "traitlets",
    "fastjsonschema", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py",
    "tenacity", "ipykernel", "comm", "debugpy", "ipython", "ipython-pygments-lexers", "jedi",
    "parso", "matplotlib-inline", "nest-asyncio", "pyzmq", "tornado", "pexpect", "ptyprocess",
    "prompt-toolkit", "wcwidth", "stack-data", "executing", "asttokens", "pure-eval",
    "platformdirs", "decorator", "ipywidgets", "widgetsnbextension", "jupyterlab-widgets",
    "entrypoints", "nest-asyncio2",
)  # fmt: skip


@dataclass(frozen=True)
class LeaseCommand:
    """One command: the smoke command, unit tests, or notebooks at their lease sizes."""

    lease: int
    name: str  # "smoke", "tests-gpu", "tests-rest", or the notebooks' numbers: "02-04"
    notebooks: tuple[str, ...]  # empty: smoke or tests
    estimate_s: int
    basis: str

    @property
    def what(self) -> str:
        if self.notebooks:
            return ", ".join(self.notebooks)
        return {
            "smoke": "the smoke command (perflab.tools.smoke)",
            "tests-gpu": "the GPU-only unit tests",
            "tests-rest": "the other unit tests on CUDA",
        }[self.name]

    @property
    def wheels(self) -> str:
        wheels = "papermill, ipykernel, ipywidgets and their needs"
        return "none" if self.name == "smoke" else wheels


PLAN = (
    LeaseCommand(1, "smoke", (), 240,
                 "H200 leases: all seven stages in 152 s at 2dad7d6 (2026-11-27) and in 126 s "
                 "at d50dab1 (2026-11-28: kernels 55 s, decode 24 s, distributed 16 s); at 0c43b1e "
                 "(2026-11-28) six in 119 s under a 170 s budget that skipped flash for its "
                 "old 120 s estimate, flash alone then in 15 s"),
    LeaseCommand(1, "tests-gpu", (), 300,
                 "H200 leases 2026-11-27 under pytest -n 8: 261 tests in 222 s at 7408627 (four "
                 "modules not collected: no papermill); at 2dad7d6, with the wheels, 265 of 270 "
                 "started in 260 s; at d50dab1 (2026-11-28) 267 passed and 4 skipped in 253 s"),
    LeaseCommand(2, "06", ("06_flash_attention",), 420,
                 "H100 lease 2026-11-23: the sweep, checks and compiles of three lengths in "
                 "250 s; the comparisons and the leaderboard case add about 3 minutes (H200 "
                 "2026-11-28 at fea474e: the whole notebook in 215 s, 240 s logged)"),
    LeaseCommand(2, "01", ("01_benchmarking",), 240,
                 "H100 lease 2026-11-23: five presets at full sizes in about 200 s; the lease "
                 "times three, with the warm-up study (H200 2026-11-27: the three timed in "
                 "about 50 s, then stopped by a 93 s limit in the warm-up study; H200 "
                 "2026-11-28: the whole notebook in 124 s, 153 s with the command's start)"),
    LeaseCommand(3, "tests-rest", (), 480,
                 "H200 lease 2026-11-27: not finished in 320 s under -n 12; the CPU's "
                 "2-core run, divided among 8 workers, with the compiling tests"),
    LeaseCommand(4, "02-04", ("02_profiling", "04_memory"), 180,
                 "02: traces of small at three contexts; 04: snapshots and peaks of small and "
                 "the checkpointing sweeps (H200 2026-11-28 at fea474e, one call each: 02 in "
                 "37 s, 04 in 40 s, 58 and 59 s with each call's start)"),
    LeaseCommand(4, "05", ("05_attention_compile",), 270,
                 "three lengths at d 64 (seconds each), the small model compiled in two "
                 "modes: max-autotune benchmarks its matmul shapes, the bulk of the time"),
    LeaseCommand(5, "07-08", ("07_distributed_ddp", "08_sharding"), 390,
                 "one GPU: the ranks on Gloo (07 with CUDA tensors, 08 on the CPU at its "
                 "lease model sizes); the smoke command's all-reduce and DDP sweeps took 18 s"),
    LeaseCommand(5, "03", ("03_mixed_precision",), 240,
                 "three presets, float32 against bfloat16 in 20-second budgets (H200 "
                 "2026-11-28: the whole notebook in 65 s, 94 s with the command's start)"),
    LeaseCommand(6, "09", ("09_training_step",), 360,
                 "the ladder's rungs at 10 s per comparison with their checks, the compile "
                 "rung's compilation, the sharded step on two Gloo ranks of a small model"),
    LeaseCommand(7, "10", ("10_decoding",), 480,
                 "the 8B model in bfloat16 (16 GB): four compiles of its step (batch 1 and "
                 "16 under reduce-overhead, the int8 comparison's two; the smoke command "
                 "compiled small's in 18 s), grouped-query attention eager at 1,024 tokens"),
)  # fmt: skip
COMMAND_NAMES = tuple(c.name for c in PLAN)


def lease_minutes(lease: int, plan: tuple[LeaseCommand, ...] = PLAN) -> float:
    """A lease's estimated minutes: its commands in ``plan`` and the machine's start."""
    return START_MINUTES + sum(c.estimate_s for c in plan if c.lease == lease) / 60


def plan_problems(
    plan: tuple[LeaseCommand, ...] = PLAN,
    log: Path = LOG,
    notebooks: list[str] | None = None,
) -> list[str]:
    """What keeps ``plan`` from fitting its leases, one sentence each (empty: none): a command
    longer than a call allows, a lease whose commands and start exceed its minutes, an estimate
    below the seconds a logged run of that command took on a GPU (a stopped run included: it
    needed more), a notebook (default: those in ``notebooks/``) planned twice or not at all."""
    problems = []
    for c in plan:
        if c.estimate_s > COMMAND_LIMIT_S:
            problems.append(f"{c.name}: {c.estimate_s} s is over a call's {COMMAND_LIMIT_S} s")
    for lease in sorted({c.lease for c in plan}):
        minutes = lease_minutes(lease, plan)
        if minutes > LEASE_MINUTES:
            problems.append(f"lease {lease}: {minutes:.1f} minutes, over {LEASE_MINUTES}")
    runs = read_log(log)
    runs = runs[runs["gpu"] != NO_GPU]
    for c in plan:
        logged = pd.to_numeric(runs.loc[runs["command"] == c.name, "seconds"]).max()
        if logged > c.estimate_s:
            problems.append(f"{c.name}: estimated {c.estimate_s} s, a logged run took {logged:g} s")
    if notebooks is None:
        from perflab.measure.paths import NOTEBOOKS_DIR

        notebooks = [path.stem for path in NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")]
    planned = [notebook for c in plan for notebook in c.notebooks]
    for notebook in sorted(set(notebooks) | set(planned)):
        times = planned.count(notebook)
        if times != 1:
            problems.append(f"{notebook}: planned {times} times (once is right)")
    return problems


def plan_table() -> pd.DataFrame:
    """One row per command: lease, command, what it runs, estimated minutes, wheels, basis."""
    return pd.DataFrame(
        [
            {
                "lease": c.lease,
                "command": c.name,
                "runs": c.what,
                "estimate_min": round(c.estimate_s / 60, 1),
                "wheels": c.wheels,
                "basis": c.basis,
            }
            for c in PLAN
        ]
    )


def command(name: str) -> LeaseCommand:
    """The command called ``name``, or one clear error listing the valid names."""
    for candidate in PLAN:
        if candidate.name == name:
            return candidate
    raise ValueError(f"unknown command {name!r}; valid: {', '.join(COMMAND_NAMES)}")


def read_log(path: Path = LOG) -> pd.DataFrame:
    """The log's rows (``LOG_FIELDS``), empty when there is none yet."""
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame(columns=list(LOG_FIELDS))
    return pd.read_csv(path, dtype=str).fillna("")


def next_command(path: Path = LOG) -> LeaseCommand | None:
    """The first command of the plan that the log does not record as done on a GPU (None: all
    done); a trial run on a machine without one does not count."""
    log = read_log(path)
    done = set(log[(log["status"] == "done") & (log["gpu"] != NO_GPU)]["command"])
    return next((c for c in PLAN if c.name not in done), None)


#: What ``.ci/gpu-check`` logs as the GPU of a machine without one.
NO_GPU = "no GPU"
#: The smoke command's exit status when it skipped a stage for lack of time
#: (``perflab.tools.smoke``).
PARTIAL_EXIT = 3


def record(name: str, exit_status: int, seconds: float, gpu: str, path: Path = LOG) -> dict:
    """Append one run of command ``name`` to the log, with the commit and library that ran it:
    done (exit 0), partial (3: the smoke command skipped a stage for time), stopped (124: its
    time limit) or failed (anything else, 137 included: killed, by the limit's second signal or
    for memory). Only done counts for ``next_command``."""
    from perflab.measure.paths import git_commit, library_tree

    command(name)
    status = {0: "done", PARTIAL_EXIT: "partial", 124: "stopped"}.get(exit_status, "failed")
    row = {
        "command": name,
        "status": status,
        "seconds": round(seconds),
        "commit": git_commit() or "",
        "library_tree": library_tree() or "",
        "gpu": gpu,
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=LOG_FIELDS)
        if new:
            writer.writeheader()
        writer.writerow(row)
    return row


def _main(argv: list[str]) -> int:
    """``plan``: the table; ``command NAME`` or ``next``: one line "NAME NOTEBOOKS... ESTIMATE_S"
    (no notebooks: "-"), for ``.ci/gpu-check``; ``record NAME EXIT SECONDS GPU``: log a run."""
    try:
        if argv[:1] == ["plan"]:
            table = plan_table()
            with pd.option_context("display.max_colwidth", 100, "display.width", 250):
                print(table.to_string(index=False))
            for lease in sorted(table["lease"].unique()):
                print(
                    f"lease {lease}: {lease_minutes(lease):.1f} minutes estimated with "
                    f"{START_MINUTES} for the machine's start, of {LEASE_MINUTES}"
                )
            for problem in plan_problems():
                print(f"does not fit: {problem}")
            upcoming = next_command()
            print(f"next: {upcoming.name if upcoming else 'nothing: every command is done'}")
            return 0
        if argv[:1] in (["command"], ["next"]) and len(argv) == (2 if argv[0] == "command" else 1):
            chosen = command(argv[1]) if argv[0] == "command" else next_command()
            if chosen is None:  # exit 3, not 0: a script's loop over `next` ends here
                print(
                    "perflab.tools.lease: every command of the plan is logged as done",
                    file=sys.stderr,
                )
                return 3
            print(chosen.name, " ".join(chosen.notebooks) or "-", chosen.estimate_s)
            return 0
        if argv[:1] == ["record"] and len(argv) == 5:
            record(argv[1], int(argv[2]), float(argv[3]), argv[4])
            return 0
    except ValueError as error:
        print(f"perflab.tools.lease: {error}", file=sys.stderr)
        return 2
    print(
        "usage: python -m perflab.tools.lease plan | next | command NAME"
        " | record NAME EXIT SECONDS GPU",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
