"""The test run's share of the machine (conftest.py): on pytest-xdist's workers, each worker
and the processes it starts use the threads it was given, so that the workers together ask for
no more threads than there are cores."""

import os
import subprocess
import sys

import pytest
import torch

from perflab.measure.processes import usable_cores


def test_a_worker_and_what_it_starts_use_its_share_of_the_cores(threads_given):
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None:
        pytest.skip("one process (-n 0): torch keeps its own thread count")
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
        check=True,
    )
    threads = int(os.environ["OMP_NUM_THREADS"])
    assert torch.get_num_threads() == threads == int(child.stdout)
    if threads_given is None:
        pytest.skip(f"OMP_NUM_THREADS={threads} was set by the caller")
    assert threads == threads_given
    assert threads * int(workers) <= max(usable_cores(), int(workers))
