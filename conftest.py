"""Test-session setup shared by the unit tests and the nbval notebook run.

Notebooks executed by the tests write their results to a temporary folder
(``PERFLAB_DATA_DIR``, inherited by the notebook kernels), never over the committed ``data/``.

The tests run on pytest-xdist's workers (``-n auto --dist loadfile`` in pyproject's addopts:
whole files per worker, so a notebook's cells share one kernel), one per usable core, at most
``MAX_WORKERS``. Each worker gets its share of the cores as torch threads, and so do the
notebook kernels and commands it starts (they inherit ``THREAD_VARIABLES``) and the ranks it
launches (``launch`` splits its threads among them, at least one each); process pools
(inductor's compile workers, ``map_forked``) still start one process per core. At torch's
default of a thread per core, two workers on 2 cores ran longer than one process (306fb98).
"""

import os
import tempfile

import pytest

#: Workers at most, whatever the cores: each may run a notebook's kernel or a launch of ranks
#: besides itself, so memory, not cores, bounds a large machine.
MAX_WORKERS = 8

#: Where a process reads its thread count: OpenMP's (torch's CPU operators, inductor's C++
#: kernels) and MKL's (its matmuls); a process that a worker starts inherits them.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

#: The threads this worker was given here (None: one process, or the caller set a count).
_threads_given = None


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, which -p no:xdist leaves out
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per usable core, at most ``MAX_WORKERS``, unless
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` says how many (pytest-xdist's own rule)."""
    from perflab.measure.processes import usable_cores

    try:
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    except (KeyError, ValueError):
        return min(usable_cores(), MAX_WORKERS)


def pytest_configure(config):
    global _threads_given
    os.environ.setdefault("PERFLAB_DATA_DIR", tempfile.mkdtemp(prefix="perflab-data-"))
    os.environ.setdefault("MPLBACKEND", "Agg")
    # Choose the Triton interpreter (as ``import perflab`` does) before any test module is
    # collected: one that imports Triton first (torch.utils.flop_counter does) would make
    # perflab's kernels refuse to load, depending on which files run.
    # (Ranks go to Gloo where there is no GPU for each: ``launch`` decides per launch.)
    from perflab.measure.processes import usable_cores

    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")  # set in a worker only
    if workers and not any(name in os.environ for name in THREAD_VARIABLES):  # the caller's
        _threads_given = max(1, usable_cores() // int(workers))  # its share of the cores
        for name in THREAD_VARIABLES:  # for the processes it starts
            os.environ[name] = str(_threads_given)
        import torch  # imported with perflab, before the variables were set

        torch.set_num_threads(_threads_given)


@pytest.fixture
def threads_given():
    """The torch threads this worker was given (None: one process, or the caller's count)."""
    return _threads_given
