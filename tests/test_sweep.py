import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import torch

from perflab.bench import Sweep, is_out_of_memory


@pytest.fixture(autouse=True)
def _rows_without_a_library(monkeypatch, request):
    """The hand-written files below record no library_tree: resume them as rows of an
    unrecorded library (the library test sets its own trees)."""
    if "library" not in request.node.name:
        monkeypatch.setattr("perflab.measure.sweep.library_tree", lambda: None)


CONFIGS = [{"size": s, "name": f"cfg{s}"} for s in (1, 2, 3)]


def test_rows_are_written_and_a_rerun_skips_them(tmp_path):
    calls = []

    def measure(config):
        calls.append(config["size"])
        return {"value": config["size"] * 10}

    sweep = Sweep(tmp_path / "s.csv", key=["size", "name"], metadata={"what": "test"})
    first = sweep.run(CONFIGS, measure)
    assert calls == [1, 2, 3]
    assert first["value"].tolist() == [10, 20, 30]
    assert (first["status"] == "ok").all()
    again = Sweep(tmp_path / "s.csv", key=["size", "name"]).run(
        CONFIGS + [{"size": 4, "name": "x"}], measure
    )
    assert calls == [1, 2, 3, 4]
    assert again["value"].tolist() == [10, 20, 30, 40]
    meta = (tmp_path / "s.json").read_text()
    assert '"what": "test"' in meta and '"key"' in meta


def test_a_none_field_is_found_again_on_rerun_and_selected(tmp_path):
    """``None`` is written as an empty cell; the key must compare as read back, or the row is
    measured again on every run and ``select`` finds nothing."""
    configs = [{"size": 1, "group": None}, {"size": 2, "group": 8}, {"size": 3, "group": 0.5}]
    calls = []

    def measure(config):
        calls.append(config["size"])
        return {"value": config["size"]}

    first = Sweep(tmp_path / "s.csv", key=["size", "group"]).run(configs, measure)
    again = Sweep(tmp_path / "s.csv", key=["size", "group"]).run(configs, measure)
    assert calls == [1, 2, 3]
    assert first["value"].tolist() == again["value"].tolist() == [1, 2, 3]


def test_resume_false_measures_again_and_select_keeps_the_newest(tmp_path):
    sweep = Sweep(tmp_path / "s.csv", key=["size"])
    sweep.run([{"size": 1}], lambda c: {"value": 1})
    rows = sweep.run([{"size": 1}], lambda c: {"value": 2}, resume=False)
    assert rows["value"].tolist() == [2]
    assert len(sweep.read()) == 2


def test_out_of_memory_and_errors_become_rows_and_the_sweep_goes_on(tmp_path):
    def measure(config):
        if config["size"] == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        if config["size"] == 2:
            raise ZeroDivisionError("boom")
        return {"value": 3.5}

    sweep = Sweep(tmp_path / "s.csv", key=["size"])
    with pytest.warns(UserWarning, match="ZeroDivisionError: boom"):
        rows = sweep.run([{"size": 1}, {"size": 2}, {"size": 3}], measure)
    assert rows["status"].tolist() == ["oom", "error", "ok"]
    assert rows["error"].iloc[0].startswith("OutOfMemoryError: CUDA out of memory")
    # The first row had no result columns; the header grew when 'value' appeared.
    assert pd.isna(rows["value"].iloc[0]) and rows["value"].iloc[2] == 3.5


def test_is_out_of_memory():
    assert is_out_of_memory(torch.OutOfMemoryError("x"))
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(ValueError("out of memory"))


def test_a_line_cut_off_by_a_crash_is_measured_again(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("size,status,error,value\n1,ok,,10\n2,ok,,2")  # no newline: cut off
    calls = []
    rows = Sweep(path, key=["size"]).run(
        [{"size": 1}, {"size": 2}], lambda c: calls.append(c) or {"value": c["size"] * 10}
    )
    assert calls == [{"size": 2}]
    assert rows["value"].tolist() == [10, 20]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="must end in .csv"):
        Sweep(tmp_path / "s.txt", key=["a"])
    with pytest.raises(ValueError, match="lacks key fields"):
        Sweep(tmp_path / "s.csv", key=["a"]).run([{"b": 1}], lambda c: {})


KILLED_SWEEP = textwrap.dedent("""
    import os, random, signal, sys
    from perflab.bench import Sweep

    kill_at = int(sys.argv[2])

    def measure(config):
        if config["i"] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"value": random.random()}

    Sweep(sys.argv[1], key=["i"]).run([{"i": i} for i in range(8)], measure)
""")


def test_sweep_killed_midway_then_rerun_loses_and_duplicates_nothing(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(KILLED_SWEEP)
    path = tmp_path / "killed.csv"
    killed = subprocess.run([sys.executable, str(script), str(path), "5"], capture_output=True)
    assert killed.returncode == -9
    before = pd.read_csv(path)
    assert before["i"].tolist() == [0, 1, 2, 3, 4]

    finished = subprocess.run([sys.executable, str(script), str(path), "-1"], capture_output=True)
    assert finished.returncode == 0, finished.stderr.decode()
    after = pd.read_csv(path)
    assert after["i"].tolist() == list(range(8))
    # The rows measured before the kill are kept as they were, not measured again.
    pd.testing.assert_frame_equal(after.iloc[:5], before)


def test_rows_measured_earlier_are_announced_with_time_and_commit(tmp_path, capsys):
    sweep = Sweep(tmp_path / "s.csv", key=["n"])
    sweep.run([{"n": 1}], lambda c: {"x": c["n"]})
    assert capsys.readouterr().out == ""  # everything measured now: nothing to announce
    rows = Sweep(tmp_path / "s.csv", key=["n"]).run([{"n": 1}, {"n": 2}], lambda c: {"x": 1})
    out = capsys.readouterr().out
    assert "s.csv: 1 of 2 rows were measured earlier" in out
    assert rows["measured_at"].notna().all() and "commit" in rows


def test_an_older_file_without_a_new_key_field_still_answers_and_is_rewritten(tmp_path):
    path = tmp_path / "s.csv"
    Sweep(path, key=["size"]).run([{"size": 1}, {"size": 2}], lambda c: {"value": c["size"]})

    def older(row):  # rows written before "flavour" existed were measured plain
        return {} if row.get("flavour") else {"flavour": "plain"}

    calls = []

    def measure(config):
        calls.append((config["size"], config["flavour"]))
        return {"value": 10 * config["size"]}

    sweep = Sweep(path, key=["size", "flavour"], fill_key=older)
    configs = [{"size": 1, "flavour": "plain"}, {"size": 1, "flavour": "fused"}]
    rows = sweep.run(configs, measure)
    assert calls == [(1, "fused")]  # the plain one was found in the older rows
    assert rows["value"].tolist() == [1, 10]
    written = pd.read_csv(path)
    assert written["flavour"].tolist() == ["plain", "plain", "fused"]  # rewritten, filled in
    assert Sweep(path, key=["size", "flavour"]).todo(configs) == []


def test_rows_record_the_library_and_resume_only_its_own(tmp_path, monkeypatch):
    import perflab.measure.sweep as sweep_module

    monkeypatch.setattr(sweep_module, "library_tree", lambda: "tree-one")
    sweep = Sweep(tmp_path / "s.csv", key=["n"])
    calls = []
    sweep.run([{"n": 1}], lambda c: calls.append(c) or {"t": 1.0})
    assert sweep.read()["library_tree"].tolist() == ["tree-one"]
    sweep.run([{"n": 1}], lambda c: calls.append(c) or {"t": 1.0})
    assert len(calls) == 1  # the same library: resumed
    monkeypatch.setattr(sweep_module, "library_tree", lambda: "tree-two")
    sweep.run([{"n": 1}], lambda c: calls.append(c) or {"t": 1.0}, resume="any")
    assert len(calls) == 1  # told to reuse any library's rows
    sweep.run([{"n": 1}], lambda c: calls.append(c) or {"t": 1.0})
    assert len(calls) == 2  # another library: measured again
    assert sweep.read()["library_tree"].tolist() == ["tree-one", "tree-two"]
    with pytest.raises(ValueError, match="resume must be True, False or 'any'"):
        sweep.todo([{"n": 1}], resume="yes")


def test_library_tree_is_the_committed_tree_of_a_clean_library():
    import subprocess

    from perflab.measure.paths import REPO_ROOT, library_tree

    def git(*args):
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    tree = library_tree()
    assert tree and len(tree) == 40
    if not git("status", "--porcelain", "--", "lib/perflab"):
        assert tree == git("rev-parse", "HEAD:lib/perflab")
    else:  # uncommitted changes: the tree they would commit, not HEAD's
        assert tree != git("rev-parse", "HEAD:lib/perflab")
