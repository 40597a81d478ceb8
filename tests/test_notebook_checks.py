"""Cells whose outputs nbval compares (``# NBVAL_CHECK_OUTPUT``) must print the same on every
device: a checked cell that prints the compile backend (``aot_eager_decomp_partition`` on a
CPU, ``inductor`` on CUDA) or the device name fails nbval on a GPU box.

Two scans of every notebook: the checked cells' source must not call what reports the device
or depends on it, and their committed outputs must not contain a device-specific word.
"""

import json
import re
from pathlib import Path

import pytest

from perflab.measure.device import device_name

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
#: Calls whose result names or depends on the device, backend or machine.
DEVICE_DEPENDENT_CALLS = re.compile(
    r"\b(compile_backend|resolve_backend|device_name|describe|measure_peak_matmul|rank_device"
    r"|get_device_name|get_device_capability|max_world_size)\s*\(|torch\.cuda\.|torch\.version"
    r"|platform\.|print\(\s*dev\b"
)
#: Words that only a device-dependent value would print.
DEVICE_WORDS = re.compile(
    r"aot_eager|inductor|\bgloo\b|\bnccl\b|cuda:\d|device\(type=|" + re.escape(device_name("cpu")),
    re.IGNORECASE,
)


def _checked_cells(path: Path) -> list[tuple[int, str, str]]:
    cells = json.loads(path.read_text())["cells"]
    found = []
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or "# NBVAL_CHECK_OUTPUT" not in source:
            continue
        text = ""
        for output in cell.get("outputs", []):
            text += "".join(output.get("text", ""))
            text += "".join(output.get("data", {}).get("text/plain", ""))
        found.append((index, source, text))
    return found


def test_there_are_checked_cells():
    assert sum(len(_checked_cells(path)) for path in NOTEBOOKS) > 10


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_checked_cells_print_nothing_that_depends_on_the_device(path):
    for index, source, text in _checked_cells(path):
        calls = [
            m.group(0)
            for line in source.splitlines()
            for m in [DEVICE_DEPENDENT_CALLS.search(line)]
            if m
        ]
        assert not calls, f"{path.name} cell {index} calls {calls}: move it to an unchecked cell"
        words = DEVICE_WORDS.findall(text)
        assert not words, f"{path.name} cell {index} prints {words}: device-dependent output"


def test_the_scan_finds_what_it_looks_for():
    """Negative control: the cell notebook 04 used to check."""
    source = 'print(f"compile backend here: {compile_backend(dev)}")'
    assert DEVICE_DEPENDENT_CALLS.search(source)
    assert DEVICE_WORDS.search("compile backend here: aot_eager_decomp_partition")
    assert DEVICE_WORDS.search("compile backend here: inductor")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_and_its_py_twin_hold_the_same_cells_and_no_error(path):
    """``jupytext --sync`` takes the newer file as the source: a notebook that failed under
    papermill and was synced leaves papermill's error banner in both, or the twins apart."""
    import jupytext

    cells = json.loads(path.read_text())["cells"]
    twin = jupytext.read(path.with_suffix(".py"))["cells"]
    assert ["".join(c["source"]) for c in cells] == [c["source"] for c in twin]
    for cell in cells:
        assert "papermill-error-cell-tag" not in cell.get("metadata", {}).get("tags", [])
        assert all(o.get("output_type") != "error" for o in cell.get("outputs", []))
