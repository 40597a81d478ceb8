"""One package per notebook: ``nb01_benchmarking`` to ``nb10_decoding`` each hold the
experiments that notebook alone runs, and its front door (the package's ``__init__``): the names
its notebook uses, imported from the lesson's own modules or from where they live in the shared
packages (each import line says where, for a reader who wants a name's source), so that a
notebook imports one perflab module, not a dozen. ``open_notebook`` opens a notebook's run: its
parameters recorded, its device, its results folder and the provenance every table it saves
carries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from perflab.measure.comparison import Comparison, comparison_frame
from perflab.measure.device import describe, resolve_device
from perflab.measure.paths import results_dir, save_figure, save_table
from perflab.settings import record_settings


@dataclass(frozen=True)
class NotebookRun:
    """A notebook's run, opened by ``open_notebook``: its parameters as recorded (``settings``),
    the device, the results folder (``out``) and the provenance each saved table carries (the
    settings and the machine)."""

    notebook: str
    settings: dict
    device: torch.device
    out: Path
    provenance: dict

    def save(self, table: pd.DataFrame | dict | list | Comparison, name: str) -> Path:
        """``table`` as ``name`` (a CSV) in the results folder, with the provenance beside it
        (``perflab.measure.paths.save_table``); a dict is saved as a table of one row, a list of
        dicts as one row each, a ``Comparison`` or a list of them as ``comparison_frame`` lays
        them out."""
        if isinstance(table, Comparison):
            table = [table]
        if isinstance(table, list) and table and all(isinstance(t, Comparison) for t in table):
            table = comparison_frame(table)
        if isinstance(table, dict):
            table = [table]
        if isinstance(table, list):
            table = pd.DataFrame(table)
        if not isinstance(table, pd.DataFrame):
            raise TypeError(
                f"save takes a DataFrame, a dict (one row), a list of dicts or a Comparison "
                f"or list of them, got {type(table).__name__}"
            )
        return save_table(table, self.out / name, self.provenance)

    def figure(self, fig, name: str) -> Path:
        """``fig`` as ``name`` (a PNG, with a PDF beside it) in the results folder
        (``perflab.measure.paths.save_figure``)."""
        return save_figure(fig, self.out / name)

    def say(self, sentences: Iterable[str]) -> None:
        """Print each of ``sentences`` (a findings function's) on its own line."""
        for sentence in sentences:
            print(sentence)

    def check(self) -> pd.DataFrame:
        """The results folder held against itself (``perflab check-results``'s rules): prints how
        many contradictions it found and returns them, one row each."""
        from perflab.tools.check_results import check_results, contradictions_line  # a tool: on use

        findings = check_results(self.out)
        print(contradictions_line(findings, self.out))
        return findings


def open_notebook(
    notebook: str, parameters: dict, *, device: str = "auto", yours: str | None = None
) -> NotebookRun:
    """Open ``notebook``'s run: its parameters read from ``parameters`` (the notebook's
    ``globals()``, after papermill's overrides) and recorded, ``device`` resolved ("auto": CUDA
    when present), and its results folder, ``data/results/<notebook>/<device>/``, or a folder of
    its own inside it for a student's code (``yours``: an adapters file or a model class, named
    by ``perflab.tools.adapters.results_name``)."""
    settings = record_settings(notebook, parameters)
    dev = resolve_device(device)
    from perflab.tools.adapters.loading import results_name  # a tool: imported when used

    folder = notebook + (f"/{results_name(yours)}" if yours else "")
    provenance = {"settings": settings, "machine": describe(dev)}
    return NotebookRun(notebook, settings, dev, results_dir(folder, dev), provenance)
