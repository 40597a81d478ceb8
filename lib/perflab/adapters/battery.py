"""``perflab check --adapters``: every check of ``attention_checks``, ``kernel_compile`` and
``distributed_checks`` on one adapters module, as one table."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields

import pandas as pd
import torch

from perflab.adapters.attention_checks import attention_rows, record_launches
from perflab.adapters.distributed_checks import (
    AUTOCAST_TOLERANCE,
    BUCKET_SIZES_MB,
    DDP_ADAPTERS,
    FP32_TOLERANCE,
    LOW_PRECISION_TOLERANCE,
    OPTIMIZER_TOLERANCE,
    ddp_rank,
    fsdp_rank,
    sharded_optimizer_rank,
)
from perflab.adapters.kernel_compile import compile_rows
from perflab.adapters.loading import load_adapters, provided_names
from perflab.adapters.rows import FAILING, CheckRow
from perflab.device import triton_available

WORLD_SIZE = 2
#: Parts of the battery, in the order they run; ``check_adapters(parts=...)`` picks some.
PARTS = ("attention", "kernels", "ddp", "fsdp", "optimizer")


def check_adapters(spec: str, parts=PARTS, progress: Callable[[str], None] = lambda _: None,
                   device: str | None = None) -> pd.DataFrame:  # fmt: skip
    """The table of every check of the adapters ``spec`` names (a ``.py`` path or a dotted
    module): adapter, check, error, tolerance, status (pass, fail, error, not provided,
    skipped), detail. Raises ``AdapterLoadError`` (one line) if the module cannot be imported."""
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ValueError(f"unknown check parts {unknown}; valid: {', '.join(PARTS)}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    module = load_adapters(spec)
    rows: list[CheckRow] = []
    launches: list[dict] = []
    if "attention" in parts:
        progress("FlashAttention in PyTorch")
        rows += attention_rows(module, "pytorch", device)
    if "attention" in parts or "kernels" in parts:  # the kernels are those this run launches
        if not triton_available():
            rows.append(CheckRow("get_flashattention_autograd_function_triton",
                                 "forward and backward", status="skipped",
                                 detail="Triton is not installed here"))  # fmt: skip
        else:
            progress("FlashAttention in Triton")
            with record_launches(launches):
                rows += attention_rows(module, "triton", device)
    if "kernels" in parts and launches:
        progress(f"compiling {len(launches)} Triton kernel launch(es) for GPUs")
        rows += compile_rows(spec, launches)
    provided = set(provided_names(module))
    if "ddp" in parts:
        for getter in DDP_ADAPTERS:
            sizes = BUCKET_SIZES_MB if getter == "get_ddp_bucketed" else (None,)
            for size in sizes:
                for mode, tolerance in (("fp32", FP32_TOLERANCE),
                                        ("accumulation", FP32_TOLERANCE),
                                        ("bf16 autocast", AUTOCAST_TOLERANCE)):  # fmt: skip
                    label = mode if size is None else f"{mode}, buckets of {size:g} MB"
                    progress(f"{getter}: {label}")
                    check = f"vs one process ({label})"
                    rows.append(_distributed(getter, check, tolerance, provided, ddp_rank,
                                             spec, getter, mode, size))  # fmt: skip
    if "fsdp" in parts:
        for mode, check, tolerance in (
            ("fp32", "vs one process (fp32)", FP32_TOLERANCE),
            ("fp16 compute", "vs one process (fp16 compute, fp32 master)",
             LOW_PRECISION_TOLERANCE),
            ("accumulation", "vs one process (2 micro-batches)", FP32_TOLERANCE),
            ("gradients", "fp16 compute: gradients fp32, parameter-shaped (count wrong)", 0.0),
        ):  # fmt: skip
            progress(f"get_fsdp: {mode}")
            rows.append(_distributed("get_fsdp", check, tolerance, provided, fsdp_rank, spec,
                                     mode))  # fmt: skip
    if "optimizer" in parts:
        for mode, check in (("steps", "AdamW vs unsharded (5 steps)"),
                            ("round trip", "state_dict round trip, then 2 steps")):  # fmt: skip
            progress(f"get_sharded_optimizer: {mode}")
            rows.append(_distributed("get_sharded_optimizer", check, OPTIMIZER_TOLERANCE,
                                     provided, sharded_optimizer_rank, spec, mode))  # fmt: skip
    return pd.DataFrame([vars(row) for row in rows], columns=[f.name for f in fields(CheckRow)])


def _distributed(adapter: str, check: str, tolerance: float, provided: set, rank_fn,
                 *args) -> CheckRow:  # fmt: skip
    from perflab.distributed.launch import RankError, launch

    if adapter not in provided:
        return CheckRow(adapter, check, status="not provided", detail=f"{adapter} is not defined")
    try:
        results = launch(rank_fn, WORLD_SIZE, args, timeout_s=300)
    except (RankError, TimeoutError) as error:
        lines = str(getattr(error, "rank_traceback", error)).strip().splitlines()
        rank = getattr(error, "rank", None)
        where = f"rank {rank}: " if rank is not None else ""
        return CheckRow(adapter, check, status="error", detail=where + (lines[-1] if lines else ""))
    result = results[0]
    if result["status"] == "not provided":
        return CheckRow(adapter, check, status="not provided", detail=result["detail"])
    error = result["error"]
    return CheckRow.measured(adapter, check, error, tolerance, result.get("detail", ""))


def passed(table: pd.DataFrame) -> bool:
    """True when nothing failed or raised, and at least one check was measured."""
    return not table["status"].isin(FAILING).any() and (table["status"] == "pass").any()


def passing_adapters(table: pd.DataFrame) -> set[str]:
    """The adapters every one of whose checks in ``table`` passed (those worth timing)."""
    measured = table[table["status"] != "not provided"]
    return {name for name, rows in measured.groupby("adapter") if (rows["status"] == "pass").all()}


def format_table(table: pd.DataFrame) -> str:
    """The table as plain text: errors in scientific notation, blanks where not measured."""
    shown = table.copy()
    for column in ("error", "tolerance"):
        shown[column] = [("" if math.isnan(v) else f"{v:.1e}") for v in shown[column]]
    return shown.to_markdown(index=False)
