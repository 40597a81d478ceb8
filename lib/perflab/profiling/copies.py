"""Where a step copies memory (notebook 02, section 8): every ``aten::copy_`` of a profiled
step, attributed to the operator that asked for it.

A copy rarely shows up under its own name in the code: ``.to()``, ``.contiguous()``,
``.reshape()`` of a non-contiguous tensor, ``clone()`` and out-of-place ops such as
``masked_fill`` all end in ``aten::copy_``. Walking up from each ``copy_`` past those wrappers
names what made it (an autograd node's name for the copies of backward), and the table sums
the copies' time per maker and phase of the step (the workbook's "forward", "backward" and
"optimizer" ranges), so one sees which to remove first and what it could save at most: an
out-of-place op's forward copy and the copy its backward makes are separate rows.
"""

from __future__ import annotations

import pandas as pd
import torch

#: Operators that only pass a copy through; the first parent not among them made the copy.
WRAPPERS = (
    "aten::copy_",
    "aten::_to_copy",
    "aten::to",
    "aten::clone",
    "aten::contiguous",
    "aten::reshape",
    "aten::_reshape_alias",
)


def _is_operator(event) -> bool:
    """An ATen operator or an autograd node ("aten::mul", "autograd::engine::..."), as against
    a range a program opened around its code (``record_function("forward")``)."""
    return "::" in event.name


def _maker(event) -> tuple[str, str]:
    """(the operator that made ``event``'s copy, the wrappers between them)."""
    via, parent = [], event.cpu_parent
    while parent is not None and parent.name in WRAPPERS:
        via.append(parent.name)
        parent = parent.cpu_parent
    if parent is None or not _is_operator(parent):
        # A wrapper called from Python (x.reshape(...), x.to(...)), at the top level or inside a
        # range such as the step's "forward": the range did not ask for the copy.
        return f"{via.pop()} (called directly)", " < ".join(via)
    name = parent.name.removeprefix("autograd::engine::evaluate_function: ")
    return name, " < ".join(via)


#: The step's ranges (``perflab.bench.steps.make_step``) a copy is placed in.
PHASES = ("forward", "backward", "optimizer")


def _phase(event) -> str:
    """The innermost of ``PHASES`` around ``event``. Without those ranges (a step that does not
    annotate itself, or CUDA's backward on its own thread): "optimizer" inside the range torch's
    optimizers open ("Optimizer.step#AdamW.step"), "backward" inside an autograd node, else
    "forward"."""
    parent, inferred = event.cpu_parent, None
    while parent is not None:
        if parent.name in PHASES:
            return parent.name
        if inferred is None and parent.name.startswith("Optimizer.step#"):
            inferred = "optimizer"
        if inferred is None and parent.name.startswith("autograd::engine::evaluate_function"):
            inferred = "backward"
        parent = parent.cpu_parent
    return inferred or "forward"


def copy_sites(profile: torch.profiler.profile) -> pd.DataFrame:
    """One row per maker of copies and phase of the step in ``profile`` (a finished
    ``torch.profiler.profile``): calls, the copies' own time in ms (``copy_``'s CPU time), and
    its share of the time of all the profile's outermost operators (the step's operator time);
    largest first."""
    events = profile.events()
    total_us = sum(e.cpu_time_total for e in events if e.cpu_parent is None) or 1.0
    rows = []
    for event in events:
        if event.name == "aten::copy_":
            maker, via = _maker(event)
            rows.append((maker, via, _phase(event), event.cpu_time_total))
    table = pd.DataFrame(rows, columns=["made_by", "via", "phase", "time_us"])
    if table.empty:
        return pd.DataFrame(
            columns=["made_by", "via", "phase", "calls", "time_ms", "share_of_step"]
        )
    sites = table.groupby(["made_by", "via", "phase"], as_index=False).agg(
        calls=("time_us", "size"), time_us=("time_us", "sum")
    )
    sites["time_ms"] = sites.pop("time_us") / 1e3
    sites["share_of_step"] = sites["time_ms"] * 1e3 / total_us
    return sites.sort_values("time_ms", ascending=False, ignore_index=True)
