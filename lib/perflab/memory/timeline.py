"""Memory over time, on either device, from a real allocator record.

- CUDA: ``torch.cuda.memory._record_memory_history`` records every allocation and free with
  its stack; ``_dump_snapshot`` saves the pickle that pytorch.org/memory_viz opens, and the
  timeline here is read from the same snapshot.
- CPU: ``torch.profiler`` with ``profile_memory=True`` writes a ``[memory]`` event for every
  allocation and free of the CPU allocator (bytes, running total); each is attributed to the
  innermost operator running at that moment.

Both give a ``MemoryTimeline``: one row per allocator event, bytes allocated since the
recording began. Used by notebook 04.
"""

from __future__ import annotations

import json
import pickle
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.profiler import ProfilerActivity

from perflab.device import synchronize
from perflab.profiling.capture import profiling

CPU_SOURCE = "torch.profiler memory events (CPU allocator)"
CUDA_SOURCE = "CUDA memory snapshot (torch.cuda.memory._record_memory_history)"


@dataclass(frozen=True)
class MemoryTimeline:
    """Allocator events in order: time_ms (from the first event), delta_bytes (+alloc, -free),
    allocated_bytes (running total since recording began) and the operator or stack frame
    responsible (``origin``)."""

    events: pd.DataFrame
    source: str
    snapshot_path: Path | None = None  # CUDA only: the pickle for pytorch.org/memory_viz

    @property
    def peak_bytes(self) -> int:
        """Most bytes allocated at once, above what was allocated when recording began."""
        return int(max(self.events["allocated_bytes"].max(), 0)) if len(self.events) else 0

    def largest_allocations(self, top: int = 10) -> pd.DataFrame:
        """The ``top`` largest single allocations and where they came from."""
        allocations = self.events[self.events["delta_bytes"] > 0]
        largest = allocations.nlargest(top, "delta_bytes")
        return largest[["time_ms", "delta_bytes", "origin"]].reset_index(drop=True)


def _innermost_op(ops: pd.DataFrame, events: pd.DataFrame) -> list[str]:
    """For each event (ts, tid), the innermost operator running on its thread at that moment.

    Operators on one thread nest, so one sweep in time order with a stack of open operators
    answers every event in O((ops + events) log) instead of comparing every pair.
    """
    origins = ["(no op)"] * len(events)
    for tid, thread_events in events.groupby("tid"):
        thread_ops = ops[ops["tid"] == tid].sort_values(["ts", "dur"], ascending=[True, False])
        starts = thread_ops["ts"].to_numpy()
        ends = starts + thread_ops["dur"].to_numpy()
        names = thread_ops["name"].to_numpy()
        stack: list[int] = []
        next_op = 0
        for position, t in sorted(
            zip(thread_events.index, thread_events["ts"], strict=True), key=lambda x: x[1]
        ):
            while next_op < len(starts) and starts[next_op] <= t:
                while stack and ends[stack[-1]] < starts[next_op]:
                    stack.pop()
                stack.append(next_op)
                next_op += 1
            while stack and ends[stack[-1]] < t:
                stack.pop()
            if stack:
                origins[position] = names[stack[-1]]
    return origins


def _cpu_timeline(fn: Callable[[], object]) -> MemoryTimeline:
    with profiling(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    memory = [
        e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type", 0) == 0
    ]
    ops = pd.DataFrame(
        [(e["name"], e["ts"], e["dur"], e.get("tid")) for e in events if e.get("cat") == "cpu_op"],
        columns=["name", "ts", "dur", "tid"],
    )
    times = np.array([e["ts"] for e in memory], dtype=float)
    located = pd.DataFrame({"ts": times, "tid": [e.get("tid") for e in memory]})
    frame = pd.DataFrame(
        {
            "time_ms": (times - times.min()) / 1e3 if len(times) else times,
            "delta_bytes": [int(e["args"]["Bytes"]) for e in memory],
            "origin": _innermost_op(ops, located),
        }
    )
    frame = frame.sort_values("time_ms", kind="stable").reset_index(drop=True)
    # The profiler's "Total Allocated" counter carries over from earlier recordings in the same
    # process, so the running total is summed from this recording's own events.
    frame.insert(2, "allocated_bytes", frame["delta_bytes"].cumsum())
    return MemoryTimeline(frame, CPU_SOURCE)


def _frame_origin(frames: list[dict]) -> str:
    """The innermost Python frame of a snapshot stack, as file:line function."""
    for frame in frames:
        filename = frame.get("filename", "")
        if filename.endswith(".py") and "/torch/" not in filename:
            return f"{Path(filename).name}:{frame.get('line')} {frame.get('name')}"
    return frames[0].get("name", "(unknown)") if frames else "(unknown)"


def timeline_from_snapshot(snapshot: dict, device_index: int = 0) -> pd.DataFrame:
    """Timeline rows from a CUDA memory snapshot's ``device_traces`` (alloc / free_completed).

    Entries carry ``time_us`` in recent PyTorch versions; without it, time_ms is the event's
    position in the trace (one event per "millisecond"), which keeps the order and the shape.
    """
    trace = snapshot["device_traces"][device_index]
    rows = []
    for position, entry in enumerate(trace):
        sign = {"alloc": 1, "free_completed": -1}.get(entry["action"])
        if sign is not None:
            time_us = entry.get("time_us", position * 1e3)
            rows.append((time_us, sign * entry["size"], _frame_origin(entry.get("frames", []))))
    frame = pd.DataFrame(rows, columns=["time_us", "delta_bytes", "origin"])
    frame["time_ms"] = (frame["time_us"] - frame["time_us"].min()) / 1e3
    frame["allocated_bytes"] = frame["delta_bytes"].cumsum()
    return frame[["time_ms", "delta_bytes", "allocated_bytes", "origin"]]


#: pytorch.org/memory_viz reads the snapshot with a JavaScript unpickler that knows protocols up
#: to 4; newer Pythons' default (5) breaks it.
SNAPSHOT_PICKLE_PROTOCOL = 4


def save_snapshot(snapshot: dict, path: Path) -> Path:
    """A CUDA memory snapshot as the pickle pytorch.org/memory_viz opens (protocol 4)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        pickle.dump(snapshot, f, protocol=SNAPSHOT_PICKLE_PROTOCOL)
    return path


def _cuda_timeline(fn: Callable[[], object], device: torch.device,
                   snapshot_path: Path | None) -> MemoryTimeline:  # fmt: skip
    synchronize(device)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    try:
        fn()
        synchronize(device)
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    if snapshot_path is not None:
        save_snapshot(snapshot, snapshot_path)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return MemoryTimeline(timeline_from_snapshot(snapshot, index), CUDA_SOURCE, snapshot_path)


def record_timeline(
    fn: Callable[[], object],
    device: torch.device,
    snapshot_path: str | Path | None = None,
) -> MemoryTimeline:
    """Run ``fn`` once and record every allocation and free it makes on ``device``.

    On CUDA the snapshot pickle is written to ``snapshot_path`` (if given) for
    pytorch.org/memory_viz; on CPU there is no snapshot and ``snapshot_path`` is ignored.
    """
    if device.type == "cuda":
        return _cuda_timeline(fn, device, Path(snapshot_path) if snapshot_path else None)
    return _cpu_timeline(fn)


def peak_memory(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes allocated by ``fn`` above what was allocated before it ran.

    CUDA: ``torch.cuda.max_memory_allocated`` after a reset; CPU: the peak of the profiler's
    allocator record (the CPU allocator keeps no peak counter of its own).
    """
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - before)
    return record_timeline(fn, device).peak_bytes
