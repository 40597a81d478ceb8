"""Sweeps whose every configuration is measured on all ranks of a distributed run.

``launch_sweep`` groups the configurations by ``world_size``, launches each group once (a
launch costs seconds) and lets rank 0 append each row to the ``Sweep`` CSV the moment it is
measured, so a run that dies keeps every finished row. If a rank fails, its configuration
becomes an "error" row with the rank's message and the rest of the group is launched again;
a world size the machine cannot hold becomes "error" rows too. The sweep always goes on.
With ``together=True`` one call measures the whole group (variants that take turns, as in
notebook 07's DDP benchmark), and a failure turns the whole unfinished group into error rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pandas as pd
import torch.distributed as dist

from perflab.distributed.launch import RankError, check_world_size, launch
from perflab.measure.progress import progress
from perflab.measure.sweep import Sweep


def _sweep_rank(path, key, configs, measure_rank, args) -> None:
    sweep = Sweep(path, key)
    for config in configs:
        row = measure_rank(config, *args)
        if dist.get_rank() == 0:
            sweep.record({**config, "status": "ok", "error": "", **row, **config})
        # No rank starts the next configuration before rank 0 has the row on disk: a failure
        # there then cannot kill rank 0 mid-write and get the finished row blamed for it.
        dist.barrier()


def _group_rank(path, key, configs, measure_group, args) -> None:
    rows = measure_group(configs, *args)
    if dist.get_rank() == 0:
        sweep = Sweep(path, key)
        for config, row in zip(configs, rows, strict=True):
            sweep.record({**config, "status": "ok", "error": "", **row, **config})


def error_message(error: BaseException) -> str:
    """One line for a sweep row: the failing rank's last traceback line, or the error's."""
    if isinstance(error, RankError):
        last = [line for line in error.rank_traceback.splitlines() if line.strip()][-1:]
        return f"rank {error.rank}: {last[0] if last else 'failed'}"
    return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"


def launch_sweep(
    sweep: Sweep,
    configs: Iterable[dict],
    measure_rank: Callable[..., dict],
    args: tuple = (),
    *,
    resume: bool = True,
    timeout_s: float = 600,
    desc: str = "configurations",
    together: bool = False,
    collectives=None,
) -> pd.DataFrame:
    """Measure every configuration (each with a ``world_size``) not yet in ``sweep``:
    ``measure_rank(config, *args)`` runs on every rank and returns the row (rank 0's is kept);
    with ``together``, ``measure_rank(configs, *args)`` measures a world size's configurations
    in one call and returns their rows in order on rank 0; ``collectives`` as ``launch`` takes
    them (where the ranks may run). Returns the rows of ``configs``."""
    configs = list(configs)
    todo = sweep.todo(configs, resume=resume)
    bar = progress(total=len(todo), desc=desc, unit="config")
    for world_size in dict.fromkeys(c["world_size"] for c in todo):
        group = [c for c in todo if c["world_size"] == world_size]
        while group:
            done_before = sweep.done()
            try:
                check_world_size(world_size)
                launch(
                    _group_rank if together else _sweep_rank,
                    world_size,
                    (str(sweep.path), sweep.key, group, measure_rank, args),
                    timeout_s=timeout_s,
                    collectives=collectives,
                )
                bar.update(len(group))
                group = []
            except (ValueError, RankError, TimeoutError) as error:
                finished = sweep.done() - done_before
                rest = [c for c in group if sweep.key_of(c) not in finished]
                failed = rest if together or isinstance(error, ValueError) else rest[:1]
                for config in failed:
                    sweep.record({**config, "status": "error", "error": error_message(error)})
                bar.update(len(group) - len(rest) + len(failed))
                group = rest[len(failed) :]
    bar.close()
    rows = sweep.select(configs)
    note = sweep.earlier_rows_note(rows, len(todo))
    if note:
        print(note)
    return rows
