"""What autograd keeps for the backward pass, counted with ``saved_tensors_hooks``.

Every tensor an operation saves for its backward passes through the pack hook. We record its
shape, dtype and bytes, and the operation that produced it (its ``grad_fn``; "leaf" for inputs
and parameters) and, on request, the innermost module running when it was saved
(``torch.utils.module_tracker.ModuleTracker``). Bytes are counted per storage, once: a view
saved twice, or saved by two operations, costs its storage once; parameters are listed but do
not count as activations, since they live in memory anyway. Used by notebook 04.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from contextlib import nullcontext

import pandas as pd
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.module_tracker import ModuleTracker

from perflab.measure.device import dtype_name


def _producer(tensor: torch.Tensor) -> str:
    return type(tensor.grad_fn).__name__ if tensor.grad_fn is not None else "leaf"


#: The name given to what is saved outside every module (the loss, called on the logits).
NO_MODULE = "(no module: the loss)"


def _innermost(parents: set[str]) -> str:
    """The deepest of the modules running (ModuleTracker's fully qualified names, rooted at the
    top module's class name), without that root: "blocks.0.attn.qkv"."""
    names = [name for name in parents if name != "Global"]
    if not names:
        return NO_MODULE
    innermost = max(names, key=lambda name: (name.count("."), name))
    return innermost.partition(".")[2] or innermost


def saved_tensors(
    fn: Callable[[], object], parameters: Iterable[torch.Tensor] = (), track_modules: bool = False
) -> pd.DataFrame:
    """Run ``fn`` (a forward pass) and list every tensor saved for backward.

    Columns: producer (the operation that made the tensor), module (with ``track_modules``:
    the innermost ``nn.Module`` running when it was saved; otherwise empty), shape, dtype,
    bytes (of its storage), is_parameter, counted (True for the first save of each
    non-parameter storage: the rows whose bytes add up to the activation memory). Module
    tracking uses forward hooks, so leave it off around ``torch.compile(fullgraph=True)``.
    """
    # Storages are told apart by identity, not address: on the meta device (handout sizes
    # counted without memory) every address is 0.
    parameter_storages = {StorageWeakRef(p.untyped_storage()) for p in parameters}
    rows = []
    seen: set[StorageWeakRef] = set()
    tracker = ModuleTracker() if track_modules else None

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        identity = StorageWeakRef(storage)
        is_parameter = identity in parameter_storages
        counted = not is_parameter and identity not in seen
        seen.add(identity)
        rows.append(
            {
                "producer": _producer(tensor),
                "module": _innermost(tracker.parents) if tracker else "",
                "shape": tuple(tensor.shape),
                "dtype": dtype_name(tensor.dtype),
                "bytes": storage.nbytes(),
                "is_parameter": is_parameter,
                "counted": counted,
            }
        )
        return tensor

    with tracker or nullcontext(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    columns = ["producer", "module", "shape", "dtype", "bytes", "is_parameter", "counted"]
    return pd.DataFrame(rows, columns=columns)


def saved_bytes(saved: pd.DataFrame) -> int:
    """Activation bytes kept for backward: each non-parameter storage once."""
    return int(saved.loc[saved["counted"], "bytes"].sum())


def _summed_by(
    counted: pd.DataFrame, key: pd.Series | str, top: int | None, **extra
) -> pd.DataFrame:
    """The counted rows' tensors and bytes per ``key``, largest first, with their share."""
    table = counted.groupby(key).agg(tensors=("bytes", "size"), bytes=("bytes", "sum"), **extra)
    table["share"] = table["bytes"] / table["bytes"].sum()
    table = table.sort_values("bytes", ascending=False).reset_index()
    return table.head(top) if top else table


def saved_by_producer(saved: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """Activation bytes per producing operation, largest first, with their share."""
    return _summed_by(saved[saved["counted"]], "producer", top)


def module_kind(name: str) -> str:
    """A module's name with its block index replaced by "*" ("blocks.*.attn.qkv"), so that the
    same part of every block is summed together."""
    return re.sub(r"\.\d+(?=\.|$)", ".*", name)


def saved_by_module(
    saved: pd.DataFrame, top: int | None = None, per_block: bool = False
) -> pd.DataFrame:
    """Activation bytes per module that saved them (``saved_tensors(..., track_modules=True)``),
    largest first, with their share; the blocks' modules summed over blocks unless
    ``per_block``."""
    if (saved["module"] == "").all():
        raise ValueError(
            "these saved tensors carry no module: list them with "
            "saved_tensors(..., track_modules=True)"
        )
    counted = saved[saved["counted"]]
    modules = counted["module"] if per_block else counted["module"].map(module_kind)
    return _summed_by(
        counted,
        modules.rename("module"),
        top,
        producers=("producer", lambda p: ", ".join(sorted(set(p)))),
    )
