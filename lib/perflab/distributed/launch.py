"""Start a function on N ranks, from a notebook or the shell, and bring back what each returned.

``launch(fn, world_size, args)`` starts ``world_size`` processes (``torch.multiprocessing``,
forkserver with torch preloaded, so that only the first launch pays for importing torch), sets
the ``torchrun`` environment variables in each (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT`` on a free port), joins the process group and calls
``fn(*args)``. Where the ranks run is decided per launch (``place_ranks``): NCCL with one GPU
per rank when there are enough GPUs; otherwise Gloo, with CUDA tensors on shared GPUs when the
function's collectives are ones Gloo runs on CUDA, else on the CPU (a one-GPU box runs two
ranks this way); a GPU-sized model is refused on CPU ranks. ``fn`` must live in an
importable module (never in a notebook): child processes import it by name.

Failure handling: the first rank to raise ends the run; the other ranks are killed (they may be
blocked in a collective waiting for the dead one) and ``RankError`` carries the failing rank
and its traceback into the caller. A rank whose return value cannot be pickled fails the same
way, at once. A rank that dies without a traceback (a signal, a segfault) and a run longer than
``timeout_s`` end it the same way. Ranks also end when the caller dies, so no process is left
behind.

Fresh code: the forkserver has perflab imported, so after a perflab source file is edited (and
reloaded in a notebook) its ranks would run the old code. ``launch`` fingerprints perflab's
sources (paths, sizes, modification times) and starts a new forkserver when they changed.

Under ``torchrun`` (several machines, or ``python -m perflab.distributed``), the same ``fn``
runs after ``init_process_group_from_env()``, which reads the variables torchrun sets.
"""

from __future__ import annotations

import datetime
import hashlib
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import queue
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from perflab.measure.paths import library_tree
from perflab.measure.processes import when_caller_ends

#: Gloo ranks may share cores (a collective still works, only slower); beyond this many ranks
#: per core a CPU run measures the scheduler rather than the communication.
GLOO_RANKS_PER_CORE = 4
#: Seconds a collective may block before the process group gives up.
COLLECTIVE_TIMEOUT_S = 120


class RankError(RuntimeError):
    """A rank of a distributed run failed; ``rank`` and ``rank_traceback`` say where and how."""

    def __init__(self, rank: int, rank_traceback: str):
        self.rank = rank
        self.rank_traceback = rank_traceback
        super().__init__(f"rank {rank} failed:\n{rank_traceback}")


#: Collectives Gloo runs on CUDA tensors (ProcessGroupGloo implements all-reduce and broadcast
#: for CUDA; all-gather, reduce-scatter and point-to-point take CPU tensors).
GLOO_CUDA_COLLECTIVES = frozenset({"all_reduce", "broadcast"})
#: A model above this many parameters is GPU-sized: on CPU ranks of a GPU box it would run for
#: hours or exhaust the host's memory (1B float32 parameters with AdamW: 16 GB per rank).
CPU_RANK_MAX_PARAMETERS = 1e9
_BACKENDS = ("auto", "gloo", "nccl")


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_backend(backend: str = "auto", world_size: int = 1) -> str:
    """``"auto"`` -> ``$PERFLAB_DIST_BACKEND`` when set, else NCCL when the machine has a GPU for
    each of ``world_size`` ranks, else Gloo (a one-GPU box runs two ranks on Gloo): decided per
    launch, never by a setting for the whole run."""
    if backend not in _BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(_BACKENDS)}")
    if backend == "auto":
        chosen = os.environ.get("PERFLAB_DIST_BACKEND")
        if chosen is None:
            return "nccl" if 0 < world_size <= _gpus() else "gloo"
        if chosen not in _BACKENDS[1:]:
            raise ValueError(f"PERFLAB_DIST_BACKEND={chosen!r}; valid: gloo, nccl")
        backend = chosen
    if backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("backend 'nccl' needs CUDA, which is not available; valid here: gloo")
    return backend


@dataclass(frozen=True)
class Placement:
    """Where the ranks of one launch run: the backend, and the device of a rank's tensors
    (each rank its own GPU under NCCL; under Gloo the GPUs shared, or the CPU)."""

    world_size: int
    backend: str
    device: str  # "cuda" or "cpu"
    gpus: int

    def describe(self) -> str:
        """One sentence for a notebook: where the ranks run and why."""
        ranks = f"{self.world_size} rank{'s' if self.world_size != 1 else ''}"
        if self.backend == "nccl":
            return f"{ranks} on NCCL, one GPU each"
        if self.gpus == 0:
            return f"{ranks} on Gloo, CPU tensors (no GPU here)"
        why = f"{self.gpus} GPU(s) for {self.world_size} ranks, and NCCL needs one each"
        if self.device == "cuda":
            return f"{ranks} on Gloo, CUDA tensors on shared GPUs ({why})"
        return (
            f"{ranks} on Gloo, CPU tensors ({why}; Gloo runs all-gather, reduce-scatter and "
            "point-to-point on CPU tensors only)"
        )


def place_ranks(world_size: int, collectives=None, backend: str = "auto") -> Placement:
    """The placement of ``world_size`` ranks whose code uses ``collectives`` (names such as
    "all_reduce"; None: any): NCCL with a GPU per rank where there are enough GPUs, else Gloo
    with CUDA tensors when every collective is one Gloo runs on CUDA (``GLOO_CUDA_COLLECTIVES``),
    else Gloo on the CPU."""
    chosen = resolve_backend(backend, world_size)
    gpus = _gpus()
    if chosen == "nccl":
        return Placement(world_size, "nccl", "cuda", gpus)
    on_cuda = gpus > 0 and collectives is not None and set(collectives) <= GLOO_CUDA_COLLECTIVES
    return Placement(world_size, "gloo", "cuda" if on_cuda else "cpu", gpus)


def max_world_size(backend: str = "auto") -> int:
    """How many ranks this machine holds: one GPU per NCCL rank; up to
    ``GLOO_RANKS_PER_CORE`` Gloo ranks per CPU core (``"auto"``: whichever is more, since ranks
    beyond the GPUs run on Gloo)."""
    gloo = GLOO_RANKS_PER_CORE * (os.cpu_count() or 1)
    if backend == "auto" and os.environ.get("PERFLAB_DIST_BACKEND") is None:
        return max(_gpus(), gloo)
    if resolve_backend(backend) == "nccl":
        return _gpus()
    return gloo


def check_world_size(world_size: int, backend: str = "auto") -> None:
    """One clear ValueError for a world size that is not positive or that the machine cannot
    hold."""
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    limit = max_world_size(backend)
    if world_size > limit:
        raise ValueError(
            f"world_size {world_size} does not fit this machine: "
            f"{resolve_backend(backend, world_size)} holds 1 to {limit} ranks here"
        )


def refuse_gpu_sized_on_cpu(placement: Placement, parameters: float | None, what: str) -> None:
    """One clear ValueError when a GPU-sized model (``CPU_RANK_MAX_PARAMETERS``) would run on
    CPU ranks of a machine that has GPUs, too few for the ranks."""
    if (
        parameters is None
        or placement.device != "cpu"
        or placement.gpus == 0
        or parameters <= CPU_RANK_MAX_PARAMETERS
    ):
        return
    raise ValueError(
        f"{what} ({parameters / 1e9:.1f}B parameters) would run on {placement.world_size} CPU "
        f"ranks: this machine has {placement.gpus} GPU(s) for {placement.world_size} ranks; run "
        f"it where there is a GPU per rank, or choose a smaller model"
    )


def free_port() -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_device() -> torch.device:
    """This rank's device: as ``launch`` placed it (``PERFLAB_RANK_DEVICE``: under Gloo on a
    GPU box, a shared GPU or the CPU), else (torchrun) its own GPU (``LOCAL_RANK``) under
    NCCL and the CPU under Gloo."""
    local = int(os.environ.get("LOCAL_RANK", 0))
    placed = os.environ.get("PERFLAB_RANK_DEVICE")
    if placed == "cuda":
        return torch.device("cuda", local % max(torch.cuda.device_count(), 1))
    if placed == "cpu":
        return torch.device("cpu")
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", local)
    return torch.device("cpu")


def local_world_size() -> int:
    """Ranks on this machine, from torchrun's environment (``LOCAL_WORLD_SIZE``, else
    ``WORLD_SIZE``: one machine), 1 when neither is set."""
    return int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("WORLD_SIZE") or 1)


def init_process_group_from_env(backend: str = "auto") -> None:
    """Join the process group described by torchrun's environment variables; under NCCL each
    rank takes GPU ``LOCAL_RANK``. ``"auto"`` is decided as ``launch`` decides it
    (``resolve_backend``): NCCL only when this machine has a GPU for each of its ranks, so
    ``torchrun --nproc-per-node 2`` on a one-GPU box runs Gloo instead of asking for a
    second GPU."""
    backend = resolve_backend(backend, local_world_size())
    device_id = None
    if backend == "nccl":
        device_id = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device_id)
    dist.init_process_group(
        backend, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S), device_id=device_id
    )


def _die_with_caller(caller_pid: int) -> None:
    """End this rank when the process that launched it dies (no orphans even if the caller is
    killed with SIGKILL). The ranks' parent is the forkserver, which outlives the caller while
    it has children, so the parent-death signal alone would not do: the caller is watched by
    its pid."""
    when_caller_ends(lambda: os._exit(1), caller_pid)


def _run_rank(rank, world_size, port, placement, threads, fn, args, results, caller) -> None:
    _die_with_caller(caller)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        PERFLAB_RANK_DEVICE=placement.device,
    )
    backend = placement.backend
    torch.set_num_threads(threads)
    try:
        init_process_group_from_env(backend)
        result = fn(*args)
        try:  # here, not in the queue's feeder thread, which would only print the error
            payload = pickle.dumps(result)
        except Exception as error:
            raise TypeError(
                f"rank {rank}: the return value of {getattr(fn, '__name__', fn)} cannot be "
                f"pickled to send it to the caller ({type(result).__name__}): {error}"
            ) from error
        results.put((rank, "ok", payload))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


_CONTEXT = None
_SOURCES_SEEN: str | None = None
PERFLAB_DIR = Path(__file__).resolve().parents[1]


def source_fingerprint(root: Path = PERFLAB_DIR) -> str:
    """A digest of every .py file's path, size and modification time under ``root``: changes
    when a source file is edited, added or removed."""
    digest = hashlib.sha1()
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()


def _context():
    """A forkserver that has imported torch, ``perflab.distributed`` and ``rank_preload``'s
    packages (pandas, sympy, matplotlib) once; each rank is forked from it. Started anew when
    perflab's sources changed since the last launch (its ranks would run the old code)."""
    global _CONTEXT, _SOURCES_SEEN
    if _CONTEXT is None:
        # The server imports perflab, which asks torch.cuda.is_available(): by default that
        # initialises the CUDA driver, and a process forked after it cannot use CUDA ("CUDA
        # error: initialization error" at a rank's first CUDA call, seen on an H100 box in
        # AdamW's graph-capture check). Asked through NVML instead, the server stays fork-safe.
        os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
        _CONTEXT = multiprocessing.get_context("forkserver")
        # A rank imports its function's module, and a lesson's module runs its front door:
        # what that imports beside perflab is imported once, here (``rank_preload``).
        _CONTEXT.set_forkserver_preload(
            [
                "torch",
                "torch.distributed",
                "perflab.distributed",
                "perflab.distributed.rank_preload",
            ]
        )
    sources = source_fingerprint()
    if _SOURCES_SEEN is not None and sources != _SOURCES_SEEN:
        # The next process start launches a fresh server. ``_stop`` is the standard library's
        # own way to stop it (used by its tests); no rank of an earlier launch is still alive.
        multiprocessing.forkserver._forkserver._stop()
    _SOURCES_SEEN = sources
    return _CONTEXT


def _stop(processes, grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()


def launch(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple = (),
    *,
    backend: str = "auto",
    timeout_s: float = 600,
    threads_per_rank: int | None = None,
    collectives=None,
    parameters: float | None = None,
) -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` ranks; return each rank's result, by rank.

    Where the ranks run is decided here, for this launch (``place_ranks``: ``collectives`` the
    ones ``fn`` uses, None for any); ``rank_device()`` tells a rank its device. ``parameters``
    (the model's size, when ``fn`` trains one) refuses a GPU-sized model on CPU ranks.
    ``threads_per_rank`` defaults to this process's torch threads divided among the ranks, at
    least one each: under torch's default the physical cores, where the process was given
    fewer (a test worker's ``OMP_NUM_THREADS``) its share, so that the ranks ask for no more
    threads than it had unless there are more ranks than threads.
    Raises ``RankError`` (rank + traceback) as soon as any rank fails, ``TimeoutError`` after
    ``timeout_s``; either way every rank is stopped before this returns.
    """
    check_world_size(world_size, backend)
    placement = place_ranks(world_size, collectives, backend)
    refuse_gpu_sized_on_cpu(placement, parameters, getattr(fn, "__name__", "the model"))
    if getattr(fn, "__module__", "__main__") in ("__main__", "__mp_main__"):
        raise ValueError(
            f"{getattr(fn, '__name__', fn)!r} is defined in __main__ (a notebook or script); "
            "ranks can only run functions importable from a module, e.g. in perflab"
        )
    threads = threads_per_rank or max(1, torch.get_num_threads() // world_size)
    # The ranks record the rows they measure with the launching process's library_tree (read
    # once here, not by each rank from a disk that may have changed since).
    tree = library_tree()
    if tree and not os.environ.get("PERFLAB_LIBRARY_TREE"):
        os.environ["PERFLAB_LIBRARY_TREE"] = tree
    context = _context()
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(
            target=_run_rank,
            args=(rank, world_size, port, placement, threads, fn, args, results, os.getpid()),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    returned: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(returned) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                running = sorted(set(range(world_size)) - set(returned))
                raise TimeoutError(
                    f"distributed run did not finish within {timeout_s} s; "
                    f"ranks still running: {running}"
                )
            try:
                rank, status, payload = results.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                for rank, process in enumerate(processes):
                    if rank not in returned and process.exitcode not in (None, 0):
                        raise RankError(
                            rank, f"process exited with code {process.exitcode} (no traceback)"
                        ) from None
                continue
            if status == "error":
                raise RankError(rank, payload)
            returned[rank] = pickle.loads(payload)
    except BaseException:
        _stop(processes, grace_s=0)
        raise
    _stop(processes, grace_s=30)
    return [returned[rank] for rank in range(world_size)]


def parent_pid() -> int:
    """This rank's parent process: the forkserver it was forked from (tests use it to see
    that a new forkserver starts after perflab's sources change)."""
    return os.getppid()


def unpicklable_result() -> object:
    """A return value that cannot be sent back (a lambda): the launcher must report it at
    once, naming the rank, instead of waiting for the timeout."""
    return lambda: None


def raise_on_rank(failing_rank: int, message: str = "this rank failed on purpose") -> int:
    """Rank ``failing_rank`` raises; the others wait in an all-reduce that can never complete.
    What a failure looks like (notebook 07, tests): the launcher reports the rank and its
    traceback and stops the waiting ranks instead of hanging."""
    if dist.get_rank() == failing_rank:
        raise RuntimeError(message)
    dist.all_reduce(torch.ones(1))
    return dist.get_rank()


def late_row_then_failure(config: dict) -> dict:
    """A sweep measure function that fails on purpose (tests of ``launch_sweep``): every
    configuration ends in an all-reduce, as real ones do; rank 0 returns from configuration
    "late" half a second after the others, and rank 1 raises on configuration "fail". A
    finished row must survive the failure that follows it."""
    if config["name"] == "fail" and dist.get_rank() == 1:
        raise RuntimeError("rank 1 failed on purpose")
    dist.all_reduce(torch.ones(1))
    if config["name"] == "late" and dist.get_rank() == 0:
        time.sleep(0.5)
    return {"value": 1}


def placed_device_rank() -> str:
    """This rank's device type, as ``launch`` placed it (tests of the placement)."""
    return rank_device().type
