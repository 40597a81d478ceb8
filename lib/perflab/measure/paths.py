"""Where the workbook lives and where results land.

Results go to ``data/`` of the repository, or to ``$PERFLAB_DATA_DIR`` when set (the test
suite sets it, so that re-executing notebooks never touches committed results). Each device
gets its own results folder, so CPU and GPU runs of the same notebook never mix.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import torch

from perflab.measure.device import device_name

REPO_ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


def data_dir() -> Path:
    """``$PERFLAB_DATA_DIR`` if set, else the repository's ``data/``."""
    return Path(os.environ.get("PERFLAB_DATA_DIR") or REPO_ROOT / "data")


def device_slug(device: torch.device | str) -> str:
    """A folder name for a device: its lower-cased model name with runs of other characters
    turned into '-', e.g. 'nvidia-a100-sxm4-80gb'."""
    return re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-") or "unknown"


def results_dir(notebook: str, device: torch.device | str) -> Path:
    """``data/results/<notebook>/<device slug>/``, created if missing."""
    path = data_dir() / "results" / notebook / device_slug(device)
    path.mkdir(parents=True, exist_ok=True)
    return path


def results_elsewhere(notebook: str, filename: str, device: torch.device | str) -> dict:
    """``filename`` of ``notebook`` as measured on every other device whose results are in the
    data folder (e.g. the committed H100 rows, shown in a CPU run), as DataFrames by device
    slug; each table's ``source`` attribute says where the rows come from and, when the rows
    (a sweep's) or the JSON saved beside them (``save_table``'s) record them, when, at which
    commit, with which torch and by which library they were measured, and whether that is the
    library running here (rows of older code say so: what they measured may have changed)."""
    import pandas as pd

    here = device_slug(device)
    here_tree = library_tree()
    found = {}
    for path in sorted((data_dir() / "results" / notebook).glob(f"*/{filename}")):
        if path.parent.name == here or path.stat().st_size == 0:
            continue
        table = pd.read_csv(path)
        sidecar = path.with_suffix(".json")
        saved = json.loads(sidecar.read_text()) if sidecar.exists() else {}

        source = display_path(path)
        measured = _recorded(table, "measured_at", saved.get("saved_at"))
        if len(measured):
            commits = sorted({str(c) for c in _recorded(table, "commit", saved.get("commit"))})
            source += f", measured {measured.min()[:10]} to {measured.max()[:10]}"
            source += f" at commit {', '.join(commits)}" if commits else ""
        torch_version = saved.get("versions", {}).get("torch")
        versions = sorted({str(v) for v in _recorded(table, "torch", torch_version)})
        source += f" with torch {', '.join(versions)}" if versions else ""
        trees = recorded_trees(table, saved)
        shown = ", ".join(t[:10] for t in trees)
        if not trees:
            source += (
                "; a historical record, measured before rows recorded their library_tree: by "
                "older code than this library, which may have changed what they measure"
            )
        elif from_this_library(trees, here_tree):
            source += f"; library_tree {shown} (this library)"
        else:
            source += (
                f"; library_tree {shown}, not this library's ({str(here_tree)[:10]}): the code "
                "that measured these rows differs from the code this notebook runs"
            )
        table.attrs["source"] = source
        found[path.parent.name] = table
    return found


def recorded_trees(table, saved: dict) -> list[str]:
    """The library trees that measured ``table``'s rows (its column, else its JSON's)."""
    return sorted({str(t) for t in _recorded(table, "library_tree", saved.get("library_tree"))})


def from_this_library(trees: list[str], here_tree: str | None) -> bool:
    """Whether every recorded tree is the library running here (False when none is recorded,
    or this library's is unknown)."""
    return bool(trees) and bool(here_tree) and all(here_tree.startswith(t) for t in trees)


def _recorded(table, column: str, value):
    """A table's own column (without blanks), else the one ``value`` its JSON records for all
    of its rows (empty when it records none)."""
    import pandas as pd

    if column in table:
        return table[column].dropna()
    return pd.Series([value] if value else [], dtype=object)


def display_path(path: str | Path) -> str:
    """``path`` relative to the data folder's parent, so outputs carry no machine paths."""
    path = Path(path).resolve()
    base = data_dir().resolve().parent
    try:
        return str(path.relative_to(base))
    except ValueError:
        return path.name


def listing(directory: str | Path) -> str:
    """The files in ``directory``, one ``display_path`` a line (what a notebook saved)."""
    return "\n".join(display_path(path) for path in sorted(Path(directory).iterdir()))


#: The code that measures: '+dirty' means one of these differs from the commit. What a run
#: writes itself (results, executed notebooks) does not count, or every row of a run would say so.
MEASURING_CODE = ("lib/perflab", "notebooks/*.py")


def git_commit() -> str | None:
    """The repository's current commit (short hash, '+dirty' when ``MEASURING_CODE`` has
    uncommitted changes), or None outside a git checkout. ``$PERFLAB_COMMIT`` wins when set: a
    copy of the tree without its ``.git`` (a GPU box that was sent the files) still records
    what it ran."""
    if os.environ.get("PERFLAB_COMMIT"):
        return os.environ["PERFLAB_COMMIT"]

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        # New files count too: library_tree() hashes an untracked module of the library.
        dirty = bool(git("status", "--porcelain", "--untracked-files=all", "--", *MEASURING_CODE))
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def _git(*args: str, env: dict | None = None) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env=None if env is None else {**os.environ, **env},
    ).stdout.strip()


@functools.cache
def library_tree() -> str | None:
    """The git tree id of ``lib/perflab/`` as it is on disk (first asked in this process): the
    code that measured a row. Equal to ``git rev-parse HEAD:lib/perflab`` for a committed
    library; for uncommitted changes, the id the tree would have once committed (computed
    through a temporary index, leaving the repository's own untouched). ``$PERFLAB_LIBRARY_TREE``
    wins when set (a copy of the tree without its ``.git``); None outside a git checkout."""
    if os.environ.get("PERFLAB_LIBRARY_TREE"):
        return os.environ["PERFLAB_LIBRARY_TREE"]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            _git("add", "lib/perflab", env=env)
            return _git("write-tree", "--prefix=lib/perflab/", env=env)
    except (OSError, subprocess.SubprocessError):
        return None


def library_versions() -> dict[str, str]:
    """Python's, torch's and perflab's versions, recorded with every result."""
    import platform

    import perflab

    # The package's own version: a GPU box runs it from PYTHONPATH, not installed.
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "perflab": perflab.__version__,
    }


def save_figure(fig, path: str | Path) -> Path:
    """``fig`` as ``path`` (a PNG, 80 dpi, for the notebook and the HTML report) and as a PDF
    beside it (vectors, for ``perflab report``'s typeset write-up); returns the PNG's path."""
    path = Path(path)
    fig.savefig(path, dpi=80)
    fig.savefig(path.with_suffix(".pdf"), metadata={"CreationDate": None})
    return path


def save_table(table, path: str | Path, metadata: dict | None = None) -> Path:
    """``table`` (a DataFrame) as CSV at ``path``, and beside it ``<name>.json`` with
    ``metadata`` (the notebook's settings, the machine), the time, the commit, the library's
    tree (``library_tree``) and the library versions."""
    path = Path(path)
    table.to_csv(path, index=False)
    record = {
        **(metadata or {}),
        "saved_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "library_tree": library_tree(),
        "versions": library_versions(),
    }
    path.with_suffix(".json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path
