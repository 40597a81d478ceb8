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
import os
import pickle
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.profiler import ProfilerActivity

from perflab.measure.capture import profiling
from perflab.measure.device import synchronize

CPU_SOURCE = "torch.profiler memory events (CPU allocator)"
CUDA_SOURCE = "CUDA memory snapshot (torch.cuda.memory._record_memory_history)"


@dataclass(frozen=True)
class MemoryTimeline:
    """Allocator events in order: time_ms (from the first event), delta_bytes (+alloc, -free),
    allocated_bytes (running total since recording began) and the operator or stack frame
    responsible (``origin``), the innermost frames of the Python code that ran it
    (``python_stack``: "file:line function < ...", innermost first), and the block's
    ``address`` (a tensor's ``untyped_storage().data_ptr()`` finds its allocation)."""

    events: pd.DataFrame
    source: str
    snapshot_path: Path | None = None  # CUDA only: the pickle for pytorch.org/memory_viz

    @property
    def peak_bytes(self) -> int:
        """Most bytes allocated at once, above what was allocated when recording began."""
        return int(max(self.events["allocated_bytes"].max(), 0)) if len(self.events) else 0

    def at_peak(self) -> dict:
        """The allocation that reached the peak: when (``time_share`` of the recording), how
        much was allocated then and at the end, and which operator and Python code made it."""
        if not len(self.events):
            raise ValueError("the timeline has no allocator events")
        row = self.events.loc[self.events["allocated_bytes"].idxmax()]
        span = self.events["time_ms"].iloc[-1] or 1.0
        return {
            "time_share": row["time_ms"] / span,
            "peak_bytes": int(row["allocated_bytes"]),
            "end_bytes": int(self.events["allocated_bytes"].iloc[-1]),
            "origin": row["origin"],
            "python_stack": row["python_stack"],
        }

    def largest_allocations(self, top: int = 10) -> pd.DataFrame:
        """The ``top`` largest single allocations and where they came from: the operator and
        the innermost Python frames of the code that ran it (``python_stack``)."""
        allocations = self.events[self.events["delta_bytes"] > 0]
        largest = allocations.nlargest(top, "delta_bytes")
        columns = ["time_ms", "delta_bytes", "origin", "python_stack"]
        return largest[columns].reset_index(drop=True)


def _open_spans(spans: pd.DataFrame, events: pd.DataFrame) -> list[list[str]]:
    """For each event (ts, tid), the names of the spans (name, ts, dur, tid) open on its thread
    at that moment, outermost first.

    Spans on one thread nest, so one sweep in time order with a stack of open spans answers
    every event in O((spans + events) log) instead of comparing every pair.
    """
    open_at: list[list[str]] = [[] for _ in range(len(events))]
    for tid, thread_events in events.groupby("tid"):
        thread_spans = spans[spans["tid"] == tid].sort_values(
            ["ts", "dur"], ascending=[True, False]
        )
        starts = thread_spans["ts"].to_numpy()
        ends = starts + thread_spans["dur"].to_numpy()
        names = thread_spans["name"].to_numpy()
        stack: list[int] = []
        next_span = 0
        for position, t in sorted(
            zip(thread_events.index, thread_events["ts"], strict=True), key=lambda x: x[1]
        ):
            while next_span < len(starts) and starts[next_span] <= t:
                while stack and ends[stack[-1]] < starts[next_span]:
                    stack.pop()
                stack.append(next_span)
                next_span += 1
            while stack and ends[stack[-1]] < t:
                stack.pop()
            open_at[position] = [names[i] for i in stack]
    return open_at


def _innermost_op(ops: pd.DataFrame, events: pd.DataFrame) -> list[str]:
    """For each event (ts, tid), the innermost operator running on its thread at that moment."""
    return [spans[-1] if spans else "(no op)" for spans in _open_spans(ops, events)]


#: Python frames that say nothing about who allocated: PyTorch's, the measuring core's (this
#: recorder, the profiler capture it drives, the timer), built-ins and the standard library's
#: (the profiler names its files relative to the stdlib folder).
_PLUMBING = ("/torch/", "/perflab/measure/")
_STDLIB = sysconfig.get_paths()["stdlib"]


def _is_plumbing(path: str) -> bool:
    if path.startswith("<") or any(part in "/" + path for part in _PLUMBING):
        return True
    return path.startswith(_STDLIB) or os.path.exists(os.path.join(_STDLIB, path))


def _python_stack(frames: list[str], depth: int = 3) -> str:
    """The ``depth`` innermost frames of ``frames`` (the profiler's "path(line): function" and
    "nn.Module: Name_i" spans, outermost first) that are not plumbing, innermost first, as
    "file:line function" or the module's name, joined by " < ". The line is where the function
    begins (for a frame already running when recording began: the line it was on). Backward's
    allocations come from autograd's engine, whose Python stack ends at the frame that called
    ``backward``."""
    kept = [f for f in frames if not _is_plumbing(f.split("(")[0])]
    shown = []
    for frame in reversed(kept[-depth:]):
        if frame.startswith("nn.Module: "):  # the profiler's span of a module's call
            shown.append(frame.removeprefix("nn.Module: ").rstrip(": "))
            continue
        path, _, rest = frame.partition("(")
        line, _, function = rest.partition("): ")
        shown.append(f"{Path(path).name}:{line} {function}")
    return " < ".join(shown) or "(no Python frame)"


def _cpu_timeline(fn: Callable[[], object], python_stack: bool) -> MemoryTimeline:
    with profiling(
        activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=python_stack
    ) as profiler:
        fn()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    memory = [
        e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type", 0) == 0
    ]

    def spans(category: str) -> pd.DataFrame:
        return pd.DataFrame(
            [
                (e["name"], e["ts"], e["dur"], e.get("tid"))
                for e in events
                if e.get("cat") == category
            ],
            columns=["name", "ts", "dur", "tid"],
        )

    times = np.array([e["ts"] for e in memory], dtype=float)
    located = pd.DataFrame({"ts": times, "tid": [e.get("tid") for e in memory]})
    frame = pd.DataFrame(
        {
            "time_ms": (times - times.min()) / 1e3 if len(times) else times,
            "delta_bytes": [int(e["args"]["Bytes"]) for e in memory],
            "origin": _innermost_op(spans("cpu_op"), located),
            "python_stack": [
                _python_stack(f) for f in _open_spans(spans("python_function"), located)
            ]
            if python_stack
            else "(not recorded)",
            "address": [e["args"].get("Addr") for e in memory],
        }
    )
    frame = frame.sort_values("time_ms", kind="stable").reset_index(drop=True)
    frame = frame[_own_blocks(frame)].reset_index(drop=True)
    # The profiler's "Total Allocated" counter carries over from earlier recordings in the same
    # process, so the running total is summed from this recording's own events.
    frame.insert(2, "allocated_bytes", frame["delta_bytes"].cumsum())
    return MemoryTimeline(frame, CPU_SOURCE)


def _own_blocks(frame: pd.DataFrame) -> list[bool]:
    """Which events to keep: every allocation, and the frees of blocks this recording
    allocated. The profiler reports the free of an older block only when an earlier recording
    in the process saw it allocated (else it warns and drops it), so counting such frees
    would make a peak depend on what was profiled before; without them the peak is that of
    the recorded code's own allocations, the same whatever ran earlier."""
    live, keep = set(), []
    for delta, address in zip(frame["delta_bytes"], frame["address"], strict=True):
        if delta > 0:
            live.add(address)
            keep.append(True)
        else:
            keep.append(address in live)
            live.discard(address)
    return keep


def _frame_origin(frames: list[dict]) -> str:
    """The innermost Python frame of a snapshot stack, as file:line function."""
    for frame in frames:
        filename = frame.get("filename", "")
        if filename.endswith(".py") and "/torch/" not in filename:
            return f"{Path(filename).name}:{frame.get('line')} {frame.get('name')}"
    return frames[0].get("name", "(unknown)") if frames else "(unknown)"


def _snapshot_stack(frames: list[dict]) -> str:
    """A snapshot's frames (innermost first) as ``_python_stack`` shows the profiler's."""
    names = [
        f"{f.get('filename', '')}({f.get('line')}): {f.get('name')}"
        for f in reversed(frames)
        if f.get("filename", "").endswith(".py")
    ]
    return _python_stack(names)


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
            frames = entry.get("frames", [])
            rows.append(
                (
                    time_us,
                    sign * entry["size"],
                    _frame_origin(frames),
                    _snapshot_stack(frames),
                    entry.get("addr"),
                )
            )
    columns = ["time_us", "delta_bytes", "origin", "python_stack", "address"]
    frame = pd.DataFrame(rows, columns=columns)
    frame["time_ms"] = (frame["time_us"] - frame["time_us"].min()) / 1e3
    frame["allocated_bytes"] = frame["delta_bytes"].cumsum()
    return frame[["time_ms", "delta_bytes", "allocated_bytes", "origin", "python_stack", "address"]]


#: pytorch.org/memory_viz reads the snapshot with a JavaScript unpickler that knows protocols up
#: to 4; newer Pythons' default (5) breaks it.
SNAPSHOT_PICKLE_PROTOCOL = 4


def save_snapshot(snapshot: dict, path: Path) -> Path:
    """A CUDA memory snapshot as the pickle pytorch.org/memory_viz opens (protocol 4)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        pickle.dump(snapshot, f, protocol=SNAPSHOT_PICKLE_PROTOCOL)
    return path


def _cuda_timeline(
    fn: Callable[[], object], device: torch.device, snapshot_path: Path | None
) -> MemoryTimeline:
    synchronize(device)
    # Python frames only: recording C++ stacks for every allocation (the default, "all") costs
    # far more and adds nothing a Python reader can act on.
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
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
    python_stack: bool = False,
) -> MemoryTimeline:
    """Run ``fn`` once and record every allocation and free it makes on ``device``.

    On CUDA the snapshot pickle is written to ``snapshot_path`` (if given) for
    pytorch.org/memory_viz; on CPU there is no snapshot and ``snapshot_path`` is ignored.
    ``python_stack``: on CPU, also record the Python code behind each allocation (the
    profiler's ``with_stack``: slow and memory-hungry for long Python loops, so off unless
    asked; CUDA's snapshot records its stacks anyway).
    """
    if device.type == "cuda":
        return _cuda_timeline(fn, device, Path(snapshot_path) if snapshot_path else None)
    return _cpu_timeline(fn, python_stack)


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
