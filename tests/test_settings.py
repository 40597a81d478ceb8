"""Each notebook declares its settings in its parameters cell; ``perflab.settings`` holds only
the full sizes, which must name real parameters of the right kind."""

import papermill
import pytest

from perflab.measure.paths import REPO_ROOT
from perflab.settings import FULL_SIZES, LEASE_SIZES, parameter_names, record_settings
from perflab.tools import cli
from perflab.tools.kernel_client import LookingKernelManager

NOTEBOOKS = [p.stem for p in cli.available_notebooks()]


def test_every_notebook_has_full_sizes_or_is_the_same_everywhere():
    assert NOTEBOOKS and set(FULL_SIZES) <= set(NOTEBOOKS)


@pytest.mark.parametrize("notebook", sorted(FULL_SIZES))
def test_full_sizes_name_parameters_of_their_notebook_with_the_same_kind_of_value(notebook):
    declared = papermill.inspect_notebook(str(cli.resolve_notebook(notebook)))
    for name, value in FULL_SIZES[notebook].items():
        assert name in declared, f"{notebook} has no parameter {name!r}"
        default = eval(declared[name]["default"])  # the cell's committed (CPU) value
        assert type(value) is type(default), (notebook, name, value, default)
        assert value != default, f"{notebook}.{name}: the full size equals the CPU one"


def test_record_settings_takes_the_parameters_from_the_namespace():
    names = parameter_names("04_memory")
    assert "preset" in names and "resume" in names
    namespace = {name: i for i, name in enumerate(names)} | {"unrelated": 1}
    assert record_settings("04_memory", namespace) == {n: i for i, n in enumerate(names)}
    with pytest.raises(ValueError, match="unknown notebook '99_nothing'; valid: 01_benchmarking"):
        parameter_names("99_nothing")


def test_run_full_applies_the_full_sizes_and_p_wins(monkeypatch, tmp_path):
    seen = {}

    def execute(notebook, target, parameters, cwd, kernel_manager_class):
        seen[notebook] = parameters
        assert kernel_manager_class is LookingKernelManager  # no endless wait for a reply

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.setattr(cli, "_clean_executed", lambda path, keep_timings: None)
    status = cli.main(
        ["run", "04", "--full", "-p", "preset", "cpu-tiny", "--output", str(tmp_path)]
    )
    assert status == 0
    (parameters,) = seen.values()
    assert parameters == {**FULL_SIZES["04_memory"], "preset": "cpu-tiny"}
    seen.clear()
    assert cli.main(["run", "04", "--output", str(tmp_path)]) == 0
    assert list(seen.values()) == [{}]


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_papermill_reads_every_line_of_the_parameters_cell(notebook):
    """A line papermill cannot parse (it warns and skips it) is a setting ``-p`` cannot set."""
    import nbformat

    cells = nbformat.read(cli.resolve_notebook(notebook), 4).cells
    (cell,) = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assigned = [
        line.split("=")[0].strip()
        for line in cell.source.splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert assigned == list(parameter_names(notebook))


def test_commit_is_read_from_git_or_from_perflab_commit(monkeypatch):
    from perflab.measure.paths import git_commit

    monkeypatch.delenv("PERFLAB_COMMIT", raising=False)
    from_git = git_commit()
    assert from_git is None or len(from_git.removesuffix("+dirty")) >= 7
    monkeypatch.setenv("PERFLAB_COMMIT", "abc1234")
    assert git_commit() == "abc1234"


def test_a_commit_is_dirty_only_when_the_measuring_code_changed(monkeypatch, tmp_path):
    """Results and executed notebooks that a run writes leave the commit clean; a change to the
    library or to a notebook's script, or a new module of the library, marks it '+dirty'."""
    import shutil
    import subprocess

    from perflab.measure import paths

    if shutil.which("git") is None:
        pytest.skip("needs git")

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    for name in ("lib/perflab/timer.py", "notebooks/01_x.py", "notebooks/01_x.ipynb", "data/r.csv"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "commit", "-q",
        "-m", "x")  # fmt: skip
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.delenv("PERFLAB_COMMIT", raising=False)
    clean = paths.git_commit()
    assert clean is not None and not clean.endswith("+dirty")
    (tmp_path / "data/r.csv").write_text("2\n")
    (tmp_path / "notebooks/01_x.ipynb").write_text("2\n")
    assert paths.git_commit() == clean
    for name in ("notebooks/01_x.py", "lib/perflab/timer.py"):
        (tmp_path / name).write_text("2\n")
        assert paths.git_commit() == clean + "+dirty"
        git("checkout", "--", name)
    (tmp_path / "lib/perflab/new_module.py").write_text("1\n")
    assert paths.git_commit() == clean + "+dirty"


def test_results_elsewhere_reads_other_devices_rows_with_their_source(monkeypatch, tmp_path):
    from perflab.measure import paths
    from perflab.measure.paths import device_slug, results_elsewhere

    monkeypatch.setenv("PERFLAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(paths, "library_tree", lambda: "083dbbc35ed6d9fb" + "0" * 24)
    for slug in (device_slug("cpu"), "nvidia-h100-80gb-hbm3"):
        folder = tmp_path / "data" / "results" / "06_x" / slug
        folder.mkdir(parents=True)
        (folder / "flash.csv").write_text(
            "implementation,measured_at,commit\nsdpa,2026-11-23T05:00:00+00:00,fd8348d\n"
        )
    found = results_elsewhere("06_x", "flash.csv", "cpu")
    assert list(found) == ["nvidia-h100-80gb-hbm3"]
    assert found["nvidia-h100-80gb-hbm3"].attrs["source"] == (
        "data/results/06_x/nvidia-h100-80gb-hbm3/flash.csv, measured 2026-11-23 to 2026-11-23 "
        "at commit fd8348d; a historical record, measured before rows recorded their "
        "library_tree: by older code than this library, which may have changed what they measure"
    )
    assert results_elsewhere("06_x", "other.csv", "cpu") == {}
    # a table saved whole (save_table): what its rows lack, the JSON beside them records
    folder = tmp_path / "data" / "results" / "06_x" / "nvidia-h200"
    folder.mkdir()
    (folder / "flash.csv").write_text("a,b,verdict\nsdpa,flash_triton,slower\n")
    (folder / "flash.json").write_text(
        '{"saved_at": "2026-11-27T13:52:00+00:00", "commit": "ba8372d", '
        '"library_tree": "083dbbc35ed6d9fb", "versions": {"torch": "2.11.0+cu130"}}'
    )
    assert results_elsewhere("06_x", "flash.csv", "cpu")["nvidia-h200"].attrs["source"] == (
        "data/results/06_x/nvidia-h200/flash.csv, measured 2026-11-27 to 2026-11-27 at commit "
        "ba8372d with torch 2.11.0+cu130; library_tree 083dbbc35e (this library)"
    )
    monkeypatch.setattr(paths, "library_tree", lambda: "f" * 40)
    assert (
        results_elsewhere("06_x", "flash.csv", "cpu")["nvidia-h200"]
        .attrs["source"]
        .endswith(
            "library_tree 083dbbc35e, not this library's (ffffffffff): the code that "
            "measured these rows differs from the code this notebook runs"
        )
    )


@pytest.mark.parametrize("notebook", sorted(LEASE_SIZES))
def test_lease_sizes_name_parameters_of_their_notebook_with_the_same_kind_of_value(notebook):
    declared = papermill.inspect_notebook(str(cli.resolve_notebook(notebook)))
    for name, value in LEASE_SIZES[notebook].items():
        assert name in declared, f"{notebook} has no parameter {name!r}"
        assert type(value) is type(eval(declared[name]["default"])), (notebook, name, value)


def test_run_lease_applies_the_full_sizes_cut_by_the_lease(monkeypatch, tmp_path):
    seen = {}

    def execute(notebook, target, parameters, cwd, kernel_manager_class):
        seen["p"] = parameters

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    monkeypatch.setattr(cli, "_clean_executed", lambda path, keep_timings: None)
    assert cli.main(["run", "10", "--lease", "--output", str(tmp_path)]) == 0
    assert seen["p"] == {**FULL_SIZES["10_decoding"], **LEASE_SIZES["10_decoding"]}
    assert seen["p"]["preset"] == "leaderboard-8B" and seen["p"]["batch_sizes"] == [1, 16]


def test_the_lease_plan_covers_every_notebook_and_fits_leases_of_15_minutes(tmp_path):
    """The committed plan has no problem: every notebook in one command, each command within a
    call's limit, each lease (with its start) within its minutes, and no estimate below a run
    the committed GPU log measured. Each kind of problem, planted, is found. The smoke command
    comes first, with the GPU-only tests."""
    from dataclasses import replace

    from perflab.tools.lease import PLAN, command, plan_problems

    assert sorted(n for c in PLAN for n in c.notebooks) == sorted(NOTEBOOKS)
    assert plan_problems(notebooks=NOTEBOOKS) == []
    assert [c.name for c in PLAN[:2]] == ["smoke", "tests-gpu"] and PLAN[0].lease == 1
    assert {c.name for c in PLAN} >= {"smoke", "tests-gpu", "tests-rest"}
    assert [c.lease for c in PLAN] == sorted(c.lease for c in PLAN)  # leases in order
    wheels = "papermill, ipykernel, ipywidgets and their needs"
    assert all(c.wheels == ("none" if c.name == "smoke" else wheels) for c in PLAN)

    smoke, tests, notebook = PLAN[0], PLAN[1], PLAN[2]
    log = tmp_path / "leases.csv"
    log.write_text(
        "command,status,seconds,commit,library_tree,gpu,finished_at\n"
        f"smoke,stopped,{smoke.estimate_s + 60},abc,def,NVIDIA H100,2026-11-27T00:00:00\n"
        f"tests-gpu,done,{tests.estimate_s + 60},abc,def,no GPU,2026-11-27T00:00:00\n"
    )
    assert plan_problems(PLAN, log, NOTEBOOKS) == [
        f"smoke: estimated {smoke.estimate_s} s, a logged run took {smoke.estimate_s + 60} s"
    ]  # the run on a machine without a GPU does not count
    long = (replace(smoke, estimate_s=600), replace(tests, estimate_s=300), notebook)
    found = plan_problems(long, tmp_path / "none.csv", [*notebook.notebooks, "11_new"])
    assert found == [
        "smoke: 600 s is over a call's 540 s",
        "lease 1: 18.0 minutes, over 15",
        "11_new: planned 0 times (once is right)",
    ]
    twice = (notebook, replace(notebook, name="again", lease=notebook.lease + 1))
    assert plan_problems(twice, tmp_path / "none.csv", list(notebook.notebooks)) == [
        f"{notebook.notebooks[0]}: planned 2 times (once is right)"
    ]
    with pytest.raises(ValueError, match="unknown command 'A2'; valid: smoke, tests-gpu, 06"):
        command("A2")


def test_next_is_the_first_command_not_logged_as_done(tmp_path, monkeypatch):
    """``.ci/gpu-check next`` continues where the last lease stopped: a failed or stopped
    command comes again, a done one does not; each run is logged with the code that ran it."""
    from perflab.tools import lease

    log = tmp_path / "gpu_leases.csv"
    assert lease.next_command(log).name == "smoke"
    from perflab.measure import paths

    monkeypatch.setenv("PERFLAB_COMMIT", "abc1234")
    monkeypatch.setattr(paths, "library_tree", lambda: "f" * 40)  # cached per process: patched
    lease.record("smoke", 0, 130.4, "NVIDIA H200", log)
    lease.record("tests-gpu", 1, 222, "NVIDIA H200", log)
    assert lease.next_command(log).name == "tests-gpu"
    lease.record("tests-gpu", 124, 540, "NVIDIA H200", log)
    lease.record("tests-gpu", 137, 560, "NVIDIA H200", log)  # killed: the limit's KILL, or memory
    lease.record("smoke", lease.PARTIAL_EXIT, 480, "NVIDIA H200", log)
    rows = lease.read_log(log)
    assert rows["status"].tolist() == ["done", "failed", "stopped", "failed", "partial"]
    assert rows.loc[0, "seconds"] == "130" and rows.loc[0, "commit"] == "abc1234"
    assert rows.loc[0, "library_tree"] == "f" * 40
    lease.record("tests-gpu", 0, 20, lease.NO_GPU, log)  # a trial on a CPU counts for nothing
    assert lease.next_command(log).name == "tests-gpu"
    lease.record("tests-gpu", 0, 200, "NVIDIA H200", log)
    assert lease.next_command(log).name == "06"
    for c in lease.PLAN:
        lease.record(c.name, 0, 1, "NVIDIA H200", log)
    assert lease.next_command(log) is None
    with pytest.raises(ValueError, match="unknown command 'lunch'"):
        lease.record("lunch", 0, 1, "x", log)


def test_gpu_check_prints_the_plan_and_refuses_unknown_commands(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = REPO_ROOT / ".ci" / "gpu-check"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(script), "plan"], capture_output=True, text=True, env=env, check=True
    )
    assert "10_decoding" in done.stdout and "lease 7:" in done.stdout
    assert "\nnext: " in done.stdout
    wrong = subprocess.run(
        ["bash", str(script), "run", "B9"], capture_output=True, text=True, env=env
    )
    assert wrong.returncode == 2
    assert wrong.stderr.strip().startswith(
        "perflab.tools.lease: unknown command 'B9'; valid: smoke, "
    )


def test_the_package_keeps_triton_to_versions_that_run_block_pointers():
    """Installed without constraints.txt (a student's ``uv pip install -e``), pip would take
    the newest Triton: 3.9 removed block pointers, 3.8's interpreter breaks ``.advance()``."""
    import tomllib

    from perflab.measure.paths import REPO_ROOT

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    (triton,) = [d for d in project["dependencies"] if d.startswith("triton")]
    assert triton.startswith("triton>=3.5,<3.8"), triton  # 3.5: torch 2.9's (the 2025 course)
    constraints = (REPO_ROOT / "constraints.txt").read_text()
    assert "\ntriton==3.7.1\n" in constraints  # inside the range: the tested version
