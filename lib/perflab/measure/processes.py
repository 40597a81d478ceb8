"""Child processes that leave nothing behind: work mapped over forked workers, a child run in a
process group of its own (killed whole when its caller stops waiting), and a watcher that acts
when the caller is gone (killed outright, so that no ``finally`` of its ran).

The kernel compiles (``perflab check``'s and ``perflab.tools.kernels``') and the ranks of
``perflab.distributed.launch`` use them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, which a cpuset such as a
    container's or ``taskset`` narrows), not the host's count that ``os.cpu_count`` gives."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def map_forked(
    work: Callable, items: Iterable, workers: int | None = None, chunksize: int = 1
) -> Iterator:
    """``work`` of each item, in order, over ``workers`` processes at a time (default: one per
    usable core), for CPU-bound work such as a kernel compile (Python, C++ and ``ptxas``). The
    workers are forked, so they hold what this process imported (a student's adapters loaded
    from a file among them); one item, or one core, runs here without a pool. Where a worker
    dies (a compiler that crashes, a kill), the items not yet returned run here one at a time,
    so that a crash ends this process with its own message, as without a pool. Workers exit
    when this process dies: they would otherwise wait on its queue forever, holding its
    output open."""
    items = list(items)
    workers = min(workers or usable_cores(), len(items))
    returned = 0
    if workers > 1:
        try:
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(workers, context, _end_with_forker) as pool:
                for result in pool.map(work, items, chunksize=chunksize):
                    yield result
                    returned += 1
            return
        except BrokenProcessPool:
            pass
    yield from map(work, items[returned:])


#: Where ``own_group`` tells its child which process started it, so that a child that looks
#: only after its caller died still knows whose end to watch for (not its new parent's).
CALLER_PID = "PERFLAB_CALLER_PID"


def _end_with_forker() -> None:
    """A forked worker's first act: exit when the process that forked it is gone."""
    when_caller_ends(lambda: os._exit(1), os.getppid())


@contextlib.contextmanager
def own_group(command: list[str], env: dict, stderr=subprocess.PIPE) -> Iterator[subprocess.Popen]:
    """``command`` started in a process group of its own, its stdin and stdout pipes of text
    (``stderr`` a pipe too unless given a file). Left before the child ended (past a timeout,
    on an error or a ``KeyboardInterrupt``), or after it failed (a crash can leave its workers
    behind), the whole group is killed, the child and every worker it forked: killing the
    child alone would leave its workers running. A caller killed outright runs no ``finally``:
    the child guards against that itself (``end_group_with_caller``, told the caller's pid in
    ``CALLER_PID``)."""
    with subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**env, CALLER_PID: str(os.getpid())},
        start_new_session=True,
    ) as child:
        try:
            yield child
        finally:
            # Running or unreaped, its pid names its group; reaped, the group's number stays
            # taken while any worker lives. A child that exited 0 has ended its workers.
            if child.returncode != 0:
                with contextlib.suppress(ProcessLookupError):  # no process left in the group
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def alive(pid: int) -> bool:
    """Whether ``pid`` names a process that runs on (a zombie, awaiting its reaper, has died)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process
            return True
        return True


def when_caller_ends(action: Callable[[], object], caller_pid: int) -> None:
    """Run ``action`` once the caller is gone, however it ended (SIGKILL included, short of
    its pid taken by a new process between two looks): a daemon thread checks twice a second
    whether ``caller_pid`` still runs and, where the caller is this process's parent, whether
    it still is (an orphan is given another parent at once, which no reuse of the pid can
    hide). The caller need not be the parent (a forkserver's children). Forked children do
    not inherit the thread."""
    is_parent = os.getppid() == caller_pid

    def watch() -> None:
        while alive(caller_pid) and (not is_parent or os.getppid() == caller_pid):
            time.sleep(0.5)
        action()

    threading.Thread(target=watch, name="perflab-caller-watch", daemon=True).start()


def end_group_with_caller() -> None:
    """For a child started by ``own_group``: kill its whole group (itself and its workers)
    when its caller ends, however it ended, even before this was called (the caller's pid
    comes from ``CALLER_PID``, else this process's parent). In a group of its own the child
    is out of reach of the signals that end its caller's group (a terminal's Ctrl-C, Jupyter's
    interrupt, and the kill of a kernel that did not shut down in time, which signal the
    kernel's group). A child that does not lead its group (started inside its caller's group)
    shares its caller's signals and kills nobody's group; one started from an interactive
    shell leads a group of its own and is watched."""
    caller = int(os.environ.pop(CALLER_PID, os.getppid()))  # not passed on to its children
    if os.getpgrp() == os.getpid():
        when_caller_ends(lambda: os.killpg(0, signal.SIGKILL), caller)
