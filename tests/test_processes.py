"""Child processes that leave nothing behind (``perflab.measure.processes``): work mapped over
forked workers in order, a child in a group of its own killed whole when its caller stops
waiting (a timeout, an interrupt while its output streams), and a child that ends its group
when its caller is killed outright. No Triton needed: the children here fork sleepers."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perflab.measure.processes import alive, map_forked, own_group, usable_cores

#: The pytest process: a forked worker has another pid.
TEST_PROCESS = os.getpid()
needs_proc = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="reads processes from /proc"
)


def _slow_first(item: int) -> tuple[int, int]:
    if item == 0:
        time.sleep(0.3)  # returned last, were results taken as they finish
    return item, os.getpid()


def _dies_in_a_worker(item: int) -> int:
    if item == 2 and os.getpid() != TEST_PROCESS:  # a compiler crash, in a worker only
        os.kill(os.getpid(), signal.SIGKILL)
    return item


def test_work_is_spread_over_forked_workers_and_comes_back_in_order():
    """``map_forked``: in the order of the items whatever worker finished first, run in
    forked workers; one item, or one worker, run here. Where a worker dies, what it had not
    returned runs here, one at a time (a crash then ends this process with its own
    message)."""
    results = list(map_forked(_slow_first, range(4), workers=2))
    assert [item for item, _ in results] == [0, 1, 2, 3]
    assert TEST_PROCESS not in {pid for _, pid in results}
    assert list(map_forked(_slow_first, [1], workers=2)) == [(1, TEST_PROCESS)]
    assert {pid for _, pid in map_forked(_slow_first, range(1, 4), workers=1)} == {TEST_PROCESS}
    assert list(map_forked(_dies_in_a_worker, range(5), workers=2)) == [0, 1, 2, 3, 4]
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)


@needs_proc
def test_workers_end_when_the_process_that_forked_them_is_killed(tmp_path):
    """A process killed outright (SIGKILL, the OOM killer) while its workers run: they exit
    too, instead of waiting on its queue forever with its output open."""
    script = (
        "import os, signal, threading, time\n"
        "from perflab.measure.processes import map_forked\n"
        "def work(item):\n"
        f"    open(os.path.join({str(tmp_path)!r}, str(os.getpid())), 'w').close()\n"
        "    time.sleep(300)\n"
        "def kill_me():\n"
        f"    while len(os.listdir({str(tmp_path)!r})) < 2:\n"
        "        time.sleep(0.05)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "threading.Thread(target=kill_me, daemon=True).start()\n"
        "list(map_forked(work, range(2), workers=2))\n"
    )
    subprocess.run([sys.executable, "-c", script], timeout=120)
    workers = [int(path.name) for path in tmp_path.iterdir()]
    assert len(workers) == 2 and _all_end(workers), workers


@needs_proc
def test_a_zombie_counts_as_ended():
    """``alive``: a child that exited but was not yet reaped has ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        assert alive(child.pid)
    finally:
        child.kill()
    deadline = time.monotonic() + 5
    while alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child.pid) and child.returncode is None  # not reaped: a zombie
    child.wait()
    assert not alive(child.pid)


def _forks_a_sleeper(pids: Path, then: str = "", before: str = "") -> list[str]:
    """A child that runs ``before``, forks a worker that sleeps, writes both pids whole, runs
    ``then``, then sleeps itself."""
    script = (
        "import os, sys, time\n"
        f"{before}\n"
        "worker = os.fork()\n"
        "if worker == 0:\n"
        "    time.sleep(300)\n"
        "    os._exit(0)\n"
        f"open({str(pids)!r} + '.part', 'w').write(f'{{os.getpid()}} {{worker}}')\n"
        f"os.replace({str(pids)!r} + '.part', {str(pids)!r})\n"
        f"{then}\n"
        "time.sleep(300)\n"
    )
    return [sys.executable, "-c", script]


def _all_end(pids: list[int], within_s: float = 10) -> bool:
    """Whether every one of ``pids`` ends within ``within_s``; those that do not are killed,
    so that a failing test leaves no sleeper behind."""
    deadline = time.monotonic() + within_s
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return not left


@needs_proc
def test_a_child_past_its_time_is_killed_with_every_worker_it_forked(tmp_path):
    """The compiling child forks its workers: past the time allowed, all of them are killed,
    none is left running. A child that ends in time gives its output and status."""
    pids = tmp_path / "pids"
    with pytest.raises(subprocess.TimeoutExpired):
        with own_group(_forks_a_sleeper(pids), dict(os.environ)) as child:
            child.communicate("", timeout=6)
    assert _all_end([int(pid) for pid in pids.read_text().split()])
    with own_group([sys.executable, "-c", "print(input())"], dict(os.environ)) as child:
        assert child.communicate("in", timeout=30) == ("in\n", "")
    assert child.returncode == 0


@needs_proc
def test_a_child_that_fails_takes_its_workers_with_it(tmp_path):
    """A child that crashes while its workers run (here: exits 1 after forking a sleeper)
    leaves none of them running once the block is left."""
    pids = tmp_path / "pids"
    with own_group(_forks_a_sleeper(pids, then="sys.exit(1)"), dict(os.environ)) as child:
        child.stdin.close()
        child.wait(timeout=60)  # its output stays open while the sleeper holds it
    assert child.returncode == 1
    assert _all_end([int(pid) for pid in pids.read_text().split()])


@needs_proc
def test_an_interrupt_while_the_output_streams_kills_the_child_and_its_workers(tmp_path):
    """``compile_table`` reads its child's rows as they come (for the progress bar): a
    ``KeyboardInterrupt`` or an error there ends the child and the workers it forked."""
    pids = tmp_path / "pids"
    command = _forks_a_sleeper(pids, then="print('first row', flush=True)")
    with pytest.raises(KeyboardInterrupt):
        with own_group(command, dict(os.environ)) as child:
            child.stdin.close()
            assert child.stdout.readline() == "first row\n"
            raise KeyboardInterrupt
    assert _all_end([int(pid) for pid in pids.read_text().split()])


WATCH = "from perflab.measure.processes import end_group_with_caller\nend_group_with_caller()"


@needs_proc
@pytest.mark.parametrize("late", [False, True], ids=["watching", "watching only once orphaned"])
def test_the_child_and_its_workers_end_when_their_caller_is_killed(tmp_path, late):
    """A caller killed outright (SIGKILL: no finally runs) leaves its child in a group of its
    own: the child notices and kills its group, its forked workers with it; also when it
    starts watching only after its caller died (its caller's pid came with ``own_group``)."""
    pids = tmp_path / "pids"
    before = "first = os.getppid()" if late else WATCH
    then = "while os.getppid() == first:\n    time.sleep(0.05)\n" + WATCH if late else ""
    child = _forks_a_sleeper(pids, then, before)
    caller = (
        "import os, signal, time\n"
        "from perflab.measure.processes import own_group\n"
        f"with own_group({child!r}, dict(os.environ)):\n"
        f"    while not os.path.exists({str(pids)!r}):\n"
        "        time.sleep(0.05)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", caller], timeout=120)
    started = [int(pid) for pid in pids.read_text().split()]
    assert _all_end(started), started


@needs_proc
def test_a_parent_whose_pid_looks_alive_is_still_seen_gone(tmp_path):
    """``when_caller_ends`` where the caller is the parent: killed, the parent is seen gone
    by the parent change (an orphan is given another parent at once) even where its pid seems
    to run on, as when a new process takes it at once. Here ``alive`` is made to say so."""
    ready, acted = tmp_path / "ready", tmp_path / "acted"
    child = (
        "import os, time\n"
        "from perflab.measure import processes\n"
        "processes.alive = lambda pid: True  # the parent's pid taken again at once\n"
        f"processes.when_caller_ends(lambda: open({str(acted)!r}, 'w').close(), os.getppid())\n"
        f"open({str(ready)!r} + '.part', 'w').write(str(os.getpid()))\n"
        f"os.replace({str(ready)!r} + '.part', {str(ready)!r})\n"
        f"while not os.path.exists({str(acted)!r}):\n"
        "    time.sleep(0.05)\n"
    )
    caller = (
        "import os, signal, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        f"while not os.path.exists({str(ready)!r}):\n"
        "    time.sleep(0.05)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", caller], timeout=120)
    deadline = time.monotonic() + 10
    while not acted.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen_gone = acted.exists()
    ended = _all_end([int(ready.read_text())])  # killed if it still watches: none left behind
    assert seen_gone, "the watcher did not see its parent gone"
    assert ended, "the child did not end once its watcher acted (killed)"


#: Prints whether the caller's watcher runs in this process.
WATCHING = "print('perflab-caller-watch' in [t.name for t in threading.enumerate()])\n"


def test_only_a_child_in_a_group_of_its_own_watches_its_caller():
    """A compiling child started by hand, in its caller's group, must not kill that group
    when its caller ends: it starts no watcher."""
    probe = (
        "import threading\n"
        "from perflab.measure.processes import end_group_with_caller\n"
        "end_group_with_caller()\n" + WATCHING
    )
    watching = [
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, start_new_session=own
        ).stdout.split()
        for own in (False, True)
    ]
    assert watching == [["False"], ["True"]]


@pytest.mark.parametrize(
    "main, request_text",
    [
        ("perflab.tools.kernels import _main as main; sys.argv = ['kernels', '1']", "[]"),
        (
            "perflab.tools.adapters.kernel_compile import main",
            '{"spec": "perflab.cs336", "launches": [], "targets": []}',
        ),
    ],
    ids=["compile_table's child", "perflab check's child"],
)
def test_both_compiling_children_watch_their_caller(main, request_text):
    """The compiling children of ``compile_table`` and of ``perflab check`` each end their
    group with their caller: started in a group of their own, each runs the watcher."""
    probe = f"import sys, threading\nfrom {main}\nmain()\n" + WATCHING
    done = subprocess.run(
        [sys.executable, "-c", probe],
        input=request_text,
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "True"
