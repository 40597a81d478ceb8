"""Test-session setup shared by the unit tests and the nbval notebook run.

Notebooks executed by the tests write their results to a temporary folder
(``PERFLAB_DATA_DIR``, inherited by the notebook kernels), never over the committed ``data/``.
"""

import os
import tempfile


def pytest_configure(config):
    os.environ.setdefault("PERFLAB_DATA_DIR", tempfile.mkdtemp(prefix="perflab-data-"))
    os.environ.setdefault("MPLBACKEND", "Agg")
    # (Ranks go to Gloo where there is no GPU for each: ``launch`` decides per launch.)
    # Choose the Triton interpreter (as ``import perflab`` does) before any test module is
    # collected: one that imports Triton first (torch.utils.flop_counter does) would make
    # perflab's kernels refuse to load, depending on which files run.
    import perflab  # noqa: F401


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``-n 2 --dist loadgroup``, pyproject.toml), a notebook's cells share
    one kernel and run in order: every cell of a notebook goes to the same worker. The unit
    tests are handed out one by one."""
    import pytest

    for item in items:
        if item.nodeid.split("::")[0].endswith(".ipynb"):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
