"""The test run's share of the machine (conftest.py): on pytest-xdist's workers, each worker
and the processes it starts use the torch threads it was given, its share of the cores (the
ranks it launches split them: test_distributed.py)."""

import os
import subprocess
import sys

import pytest
import torch


def test_a_worker_and_what_it_starts_use_its_share_of_the_cores(threads_given):
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers is None:
        pytest.skip("one process (-n 0): torch keeps its own thread count")
    if threads_given is None:
        pytest.skip("the caller set the thread count")
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert torch.get_num_threads() == int(child.stdout) == threads_given
