"""Reading Chrome / Kineto traces (what ``torch.profiler`` exports), plain or gzipped JSON.

A trace is ``{"traceEvents": [...]}`` (or a bare list of events). The events used here are
complete events (``ph == "X"``) with a start ``ts`` and a duration ``dur`` in microseconds:
``cat == "kernel"`` for device kernels, ``"cpu_op"`` for PyTorch operators on the CPU,
``"user_annotation"`` / ``"gpu_user_annotation"`` for ``record_function`` ranges on the CPU and
device timelines, ``"cuda_runtime"`` for the CPU-side launch of each kernel (the two share
``args.correlation``). Bad input raises ``TraceError`` with one line saying what is wrong.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

KERNEL = "kernel"
CPU_OP = "cpu_op"
CPU_RANGE = "user_annotation"
GPU_RANGE = "gpu_user_annotation"
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")

EVENT_COLUMNS = ["name", "cat", "ts", "dur", "pid", "tid", "correlation"]

#: What a summary or hotspot table was computed from.
DEVICE_KERNELS = "device kernels"
CPU_OPERATORS = "CPU operators (self time; this trace has no device kernels)"


class TraceError(ValueError):
    """The file is not a usable Chrome/Kineto trace; the message says why."""


@dataclass(frozen=True)
class Trace:
    """The complete (``ph == "X"``) events of one trace file, as a DataFrame."""

    path: Path
    events: pd.DataFrame  # EVENT_COLUMNS, ts and dur in microseconds, correlation NaN if none

    def of(self, category: str) -> pd.DataFrame:
        """The events of one category (e.g. ``"kernel"``)."""
        return self.events[self.events["cat"] == category]

    @property
    def has_kernels(self) -> bool:
        return bool((self.events["cat"] == KERNEL).any())


def _read_json(path: Path) -> object:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip magic, whatever the file is called
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as error:
            raise TraceError(f"{path.name}: broken gzip data ({error})") from None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise TraceError(f"{path.name} is not a Chrome/Kineto trace: not JSON ({error})") from None


def load_trace(path: str | Path) -> Trace:
    """Load ``path`` (.json or .json.gz) and keep its complete events."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"no trace file at {path}")
    data = _read_json(path)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(
            f"{path.name} is not a Chrome/Kineto trace: no 'traceEvents' list of events"
        )
    complete = [
        e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e and "ts" in e
    ]
    if not complete:
        raise TraceError(f"{path.name} holds no timed events (ph 'X' with ts and dur)")
    frame = pd.DataFrame(
        {
            "name": [str(e.get("name", "")) for e in complete],
            "cat": [str(e.get("cat", "")) for e in complete],
            "ts": np.array([float(e["ts"]) for e in complete]),
            "dur": np.array([float(e["dur"]) for e in complete]),
            "pid": [str(e.get("pid", "")) for e in complete],
            "tid": [str(e.get("tid", "")) for e in complete],
            "correlation": [_correlation(e) for e in complete],
        }
    )
    return Trace(path, frame)


def _correlation(event: dict) -> float:
    args = event.get("args")
    value = args.get("correlation") if isinstance(args, dict) else None
    return float(value) if isinstance(value, int | float) else float("nan")


def kernels_launched_in(trace: Trace, ranges: pd.DataFrame) -> pd.DataFrame:
    """Device kernels whose CPU-side launch lies inside one of ``ranges`` (CPU spans).

    Kernels run later than they are launched, and Kineto draws device-side range spans only
    for the innermost range, so kernels are assigned to a range by their launch call (matched
    through ``correlation``), as Nsight's NVTX projection does.
    """
    kernels = trace.of(KERNEL)
    launches = trace.events[trace.events["cat"].isin(LAUNCH_CATEGORIES)]
    launches = launches.dropna(subset=["correlation"]).drop_duplicates("correlation")
    launch_ts = kernels["correlation"].map(launches.set_index("correlation")["ts"])
    launched = kernels.assign(launch_ts=launch_ts).dropna(subset=["launch_ts"])
    points = pd.DataFrame(
        {"ts": launched["launch_ts"].to_numpy(), "dur": 0.0}, index=launched.index
    )
    return launched.loc[within(points, ranges).index]


def within(events: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """The events that lie entirely inside one of ``ranges`` (events with ts and dur)."""
    if ranges.empty or events.empty:
        return events.iloc[0:0]
    starts = ranges["ts"].to_numpy()
    ends = starts + ranges["dur"].to_numpy()
    order = np.argsort(starts)
    starts, ends = starts[order], ends[order]
    # Ranges of one name do not overlap in a step-by-step trace; a running max of the ends
    # makes the test right even if they did.
    ends = np.maximum.accumulate(ends)
    ev_start = events["ts"].to_numpy()
    ev_end = ev_start + events["dur"].to_numpy()
    index = np.searchsorted(starts, ev_start, side="right") - 1
    inside = (index >= 0) & (ev_end <= ends[np.clip(index, 0, None)])
    return events[inside]


def self_times(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` with a ``self_us`` column: duration minus that of directly nested events on the
    same thread (how torch.profiler's "Self CPU" is defined), so nested operators such as
    aten::linear -> aten::addmm are not counted twice when summed."""
    frame = events.sort_values(["pid", "tid", "ts", "dur"], ascending=[True, True, True, False])
    durations = frame["dur"].to_numpy()
    self_us = durations.copy()
    ends = frame["ts"].to_numpy() + durations
    threads = list(zip(frame["pid"], frame["tid"], strict=True))
    stack: list[int] = []  # the chain of events enclosing the current one
    for i in range(len(frame)):
        while stack and (threads[stack[-1]] != threads[i] or ends[stack[-1]] < ends[i]):
            stack.pop()
        if stack:
            self_us[stack[-1]] -= durations[i]
        stack.append(i)
    return frame.assign(self_us=self_us)


def timed_events(trace: Trace, ranges: pd.DataFrame | None = None) -> tuple[pd.DataFrame, str]:
    """(events with a ``us`` column, source): the device kernels (those launched inside
    ``ranges`` when given), else, for a trace without kernels, the CPU operators' self time
    (those that ran inside ``ranges``). The one place that chooses between the two."""
    if trace.has_kernels:
        events = trace.of(KERNEL) if ranges is None else kernels_launched_in(trace, ranges)
        return events.assign(us=events["dur"]), DEVICE_KERNELS
    ops = trace.of(CPU_OP)
    if ops.empty:
        raise ValueError(
            f"{trace.path.name} has no device kernels (cat 'kernel') and no CPU operators "
            "(cat 'cpu_op'); nothing to analyse"
        )
    ops = self_times(ops)
    if ranges is not None:
        ops = within(ops, ranges)
    return ops.assign(us=ops["self_us"]), CPU_OPERATORS
