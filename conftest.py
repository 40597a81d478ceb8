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

