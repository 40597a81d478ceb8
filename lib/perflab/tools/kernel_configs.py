"""Every kept autotune configuration of the FlashAttention kernels, checked on a GPU.

The autotuner may pick any configuration ``flash_configs`` keeps for a kernel, head dimension and
element size, so each one is checked: that kernel pinned to it, the other two at their first kept
configuration (``flash_tuning.pinned_config``), forward and backward against the float64 reference
(``implementations.attention.correctness``, its tolerances) on ``CASES``: ragged lengths with
every mask compiled in, causal and not, and aligned lengths (``EVEN_Q`` and ``EVEN_K`` compiled
true, no bounds masks). The GPU-only test runs every job; ``perflab.tools.smoke`` the bfloat16 ones
at head dimensions 64 and 128, in parallel processes (each compile takes about a second on one
core).

In the Triton interpreter (a CPU) the kernels always run 16 x 16 tiles, whatever is pinned, so
a CPU run checks the host path and the kernels' arithmetic, not the configurations:
``tiles_pinned`` says which it was.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import astuple, dataclass

import pandas as pd

from perflab.implementations.attention.flash_configs import KERNELS, kept_configs
from perflab.measure.device import dtype_name, parse_dtype

#: (batch, n_q, n_k, causal): ragged causal with n_k > n_q (every mask), ragged non-causal with
#: n_k < n_q, aligned causal (256 is a multiple of every tile: no bounds masks compiled).
CASES = ((2, 129, 300, True), (1, 200, 77, False), (2, 256, 256, True))


@dataclass(frozen=True)
class ConfigJob:
    """One kernel pinned to one configuration, in one dtype at one head dimension."""

    kernel: str
    config: tuple[int, int, int, int]
    dtype: str  # "float16", "bfloat16", "float32"
    head_dim: int

    @property
    def label(self) -> str:
        return f"{self.kernel}-{'x'.join(map(str, self.config))}-{self.dtype}-d{self.head_dim}"


def config_jobs(
    dtypes=("float16", "bfloat16", "float32"),
    head_dims=(16, 32, 64, 128),
    kernels=KERNELS,
) -> list[ConfigJob]:
    """Every (kernel, kept configuration, dtype, head dimension): the configurations kept for
    that element size (2 bytes for float16 and bfloat16, 4 for float32)."""
    jobs = []
    for dtype in dtypes:
        size = parse_dtype(dtype).itemsize
        for d in head_dims:
            for kernel in kernels:
                jobs += [ConfigJob(kernel, c, dtype, d) for c in kept_configs(kernel, d, size)]
    return jobs


def check_config(job: ConfigJob, device: str = "cuda", cases=CASES) -> list[dict]:
    """``job``'s kernel pinned to its configuration, checked on ``cases``: one row per case
    with the errors, ``within_tolerance`` and ``launched_as_pinned`` (every launch of the
    kernel used the job's configuration; None in the interpreter, which runs fixed tiles); a
    launch that fails (a configuration this GPU cannot run) is one row with ``error`` set and
    ``within_tolerance`` False."""
    from perflab.implementations.attention.correctness import correctness_table
    from perflab.implementations.attention.flash_triton import INTERPRETED, FlashAttentionTriton
    from perflab.implementations.attention.flash_tuning import pinned_config, recorded_launches

    dtype = parse_dtype(job.dtype)
    described = {
        "kernel": job.kernel,
        "config": "x".join(map(str, job.config)),
        "tiles_pinned": not INTERPRETED,
    }
    cases = [(b, n_q, n_k, job.head_dim, causal) for b, n_q, n_k, causal in cases]
    try:
        with pinned_config({job.kernel: job.config}), recorded_launches() as launches:
            table = correctness_table(FlashAttentionTriton, cases, dtype, device)
    except Exception as error:  # a configuration that cannot launch is a row, not the end
        from triton.runtime.errors import OutOfResources

        first_line = (str(error).splitlines() or [""])[0][:200]
        return [
            {
                **described,
                "dtype": dtype_name(dtype),
                "d": job.head_dim,
                # more shared memory than this GPU has: the autotuner's pruner drops it here too
                "fits": not isinstance(error, OutOfResources),
                "within_tolerance": False,
                "error": f"{type(error).__name__}: {first_line}",
            }
        ]
    # The configurations this job's kernel was launched with (pinned tiles: a GPU; none in the
    # interpreter): exactly the job's, or the check did not check what it names.
    ran = {config for name, config in launches if name == job.kernel}
    described["launched_as_pinned"] = ran == {tuple(job.config)} if not INTERPRETED else None
    return [{**described, **row, "fits": True, "error": ""} for row in table.to_dict("records")]


def _check_in_child(job: tuple, device: str) -> list[dict]:
    kernel, config, dtype, d = job
    return check_config(ConfigJob(kernel, tuple(config), dtype, d), device)


#: Seconds one job may take in a worker (its compiles and three cases take seconds): past it
#: the workers are ended and the check fails, instead of holding the lease's command.
JOB_TIMEOUT_S = 300


def check_configs(jobs: list[ConfigJob], device: str = "cuda", workers: int = 1) -> pd.DataFrame:
    """``check_config`` of every job, one row per job and case; ``workers`` > 1 runs the jobs
    in that many fresh processes (spawned: a forked process cannot use CUDA), so that their
    compiles run in parallel. A worker that hangs (``JOB_TIMEOUT_S``) or dies ends the check
    with an error; the workers are ended with it."""
    from perflab.measure.progress import progress

    rows = []
    with progress(total=len(jobs), desc="kernel configurations", unit="config") as bar:
        if workers <= 1:
            for job in jobs:
                rows += check_config(job, device)
                bar.update()
            return pd.DataFrame(rows)
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        try:
            futures = [pool.submit(_check_in_child, astuple(job), device) for job in jobs]
            for future in futures:
                rows += future.result(timeout=JOB_TIMEOUT_S)
                bar.update()
        except BaseException:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()  # a hung worker would keep shutdown waiting
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    return pd.DataFrame(rows)


def config_check_line(table: pd.DataFrame) -> str:
    """How many configurations were checked and how many passed every case; those that do not
    fit this GPU's shared memory (the autotuner drops them) are counted apart."""
    keys = ["kernel", "config", "dtype", "d"]
    fits = table.groupby(keys)["fits"].all() if "fits" in table else None
    per_config = table.groupby(keys)["within_tolerance"].all()
    if fits is not None:
        per_config = per_config[fits]
    failed = per_config[~per_config]
    where = "pinned" if table["tiles_pinned"].all() else "the interpreter's 16 x 16 tiles"
    line = (
        f"{int(per_config.sum())} of {len(per_config)} kernel configurations within tolerance "
        f"on every case ({where})"
    )
    if fits is not None and not fits.all():
        line += f"; {int((~fits).sum())} do not fit this GPU's shared memory"
    if len(failed):
        line += "; failed: " + ", ".join("-".join(map(str, key)) for key in failed.index[:5])
    return line
