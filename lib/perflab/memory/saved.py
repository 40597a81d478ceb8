"""What autograd keeps for the backward pass, counted with ``saved_tensors_hooks``.

Every tensor an operation saves for its backward passes through the pack hook. We record its
shape, dtype and bytes, and the operation that produced it (its ``grad_fn``; "leaf" for inputs
and parameters). Bytes are counted per storage, once: a view saved twice, or saved by two
operations, costs its storage once; parameters are listed but do not count as activations,
since they live in memory anyway. Used by notebook 04.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pandas as pd
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from perflab.device import dtype_name


def _producer(tensor: torch.Tensor) -> str:
    return type(tensor.grad_fn).__name__ if tensor.grad_fn is not None else "leaf"


def saved_tensors(fn: Callable[[], object], parameters: Iterable[torch.Tensor] = ()
                  ) -> pd.DataFrame:  # fmt: skip
    """Run ``fn`` (a forward pass) and list every tensor saved for backward.

    Columns: producer (the operation that made the tensor), shape, dtype, bytes (of its
    storage), is_parameter, counted (True for the first save of each non-parameter storage:
    the rows whose bytes add up to the activation memory).
    """
    # Storages are told apart by identity, not address: on the meta device (handout sizes
    # counted without memory) every address is 0.
    parameter_storages = {StorageWeakRef(p.untyped_storage()) for p in parameters}
    rows = []
    seen: set[StorageWeakRef] = set()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        identity = StorageWeakRef(storage)
        is_parameter = identity in parameter_storages
        counted = not is_parameter and identity not in seen
        seen.add(identity)
        rows.append(
            {
                "producer": _producer(tensor),
                "shape": tuple(tensor.shape),
                "dtype": dtype_name(tensor.dtype),
                "bytes": storage.nbytes(),
                "is_parameter": is_parameter,
                "counted": counted,
            }
        )
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    columns = ["producer", "shape", "dtype", "bytes", "is_parameter", "counted"]
    return pd.DataFrame(rows, columns=columns)


def saved_bytes(saved: pd.DataFrame) -> int:
    """Activation bytes kept for backward: each non-parameter storage once."""
    return int(saved.loc[saved["counted"], "bytes"].sum())


def saved_by_producer(saved: pd.DataFrame, top: int | None = None) -> pd.DataFrame:
    """Activation bytes per producing operation, largest first, with their share."""
    counted = saved[saved["counted"]]
    table = counted.groupby("producer").agg(tensors=("bytes", "size"), bytes=("bytes", "sum"))
    table["share"] = table["bytes"] / table["bytes"].sum()
    table = table.sort_values("bytes", ascending=False).reset_index()
    return table.head(top) if top else table
