import json
import subprocess
import sys

import nbformat
import pytest

from perflab.measure.device import triton_available
from perflab.tools.cli import main, parse_parameter_value, resolve_notebook


def perflab(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "perflab", *args], capture_output=True, text=True, **kwargs
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["bench", "--preset", "huge", "--mode", "forward"], "choose from 'cpu-tiny'"),
        (["bench", "--preset", "small", "--mode", "backward"], "choose from 'forward'"),
        (["bench", "--preset", "small", "--mode", "forward", "--steps", "0"], "0 is not >= 1"),
        (["bench", "--preset", "small", "--mode", "forward", "--warmup", "-1"], "-1 is not >= 0"),
        (
            ["bench", "--preset", "small", "--mode", "forward", "--context-length", "0"],
            "0 is not >= 1",
        ),
        (
            ["bench", "--preset", "small", "--mode", "forward", "--dtype", "int8"],
            "choose from 'float32'",
        ),
        (
            ["bench", "--preset", "small", "--mode", "forward", "--d-model", "100"],
            "d_model (100) must be divisible by num_heads (12)",
        ),
        (
            ["bench", "--preset", "small", "--mode", "forward", "--head", "chunky"],
            "choose from 'plain', 'fused'",
        ),
        (
            ["bench", "--preset", "cpu-small", "--mode", "decode", "--cache", "paged", "--compile"],
            "compile needs the fixed-shape step",
        ),
        (
            ["bench", "--preset", "cpu-small", "--mode", "decode", "--head", "fused"],
            "--head applies to the training modes, not to --mode decode",
        ),
        (
            ["bench", "--preset", "small", "--mode", "forward", "--cache", "paged"],
            "--cache applies to --mode decode only",
        ),
        (
            ["bench", "--preset", "small", "--mode", "forward", "--freeze"],
            "--freeze applies to --mode decode only",
        ),
        (
            ["bench", "--preset", "cpu-small", "--mode", "decode", "--freeze"],
            "freeze applies to a compiled step: add --compile",
        ),
        (["run", "99_nothing"], "valid: 01_benchmarking"),
        (
            ["run", "01", "-p", "no_such_parameter", "1"],
            "no parameter no_such_parameter in 01_benchmarking; valid: batch_size, context_length",
        ),
        (["frobnicate"], "choose from 'run', 'bench'"),
        (["kernels", "--target", "sm_75"], "choose from 'sm_80', 'sm_90', 'sm_100'"),
        (["kernels", "--dtype", "fp8"], "choose from 'fp32', 'fp16', 'bf16'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message, capfd):
    """In this process (a new one per case costs an import of torch and perflab each):
    ``main`` as the console script calls it, its exit status and standard error, C-level
    writes included (Python's warnings go to pytest here: the cases below run as a user runs
    them)."""
    try:
        status = main(list(args))
    except SystemExit as exit:
        status = exit.code
    stderr = capfd.readouterr().err
    assert status == 2
    assert stderr.count("\n") == 1, stderr
    assert message in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["bench", "--preset", "small", "--mode", "forward", "--d-model", "100"],
            "d_model (100) must be divisible by num_heads (12)",
        ),
        (
            ["bench", "--preset", "cpu-small", "--mode", "decode", "--freeze"],
            "freeze applies to a compiled step: add --compile",
        ),
        (["run", "99_nothing"], "valid: 01_benchmarking"),
        (["kernels", "--target", "sm_75"], "choose from 'sm_80', 'sm_90', 'sm_100'"),
    ],
)
def test_a_bad_argument_on_the_command_line_exits_2_with_one_line(args, message):
    """The training and decoding benchmarks, the notebooks' runner and the kernel compiler,
    each through ``python -m perflab`` in a fresh process: nothing else on standard error (no
    warning of a first import, no traceback)."""
    done = perflab(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_bench_prints_json_with_every_sample():
    done = perflab(
        "bench",
        "--preset",
        "cpu-tiny",
        "--context-length",
        "16",
        "--mode",
        "train-step",
        "--warmup",
        "1",
        "--steps",
        "3",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert len(row["samples_s"]) == 3
    assert row["tokens_per_step"] == 4 * 16 and row["mode"] == "train-step"
    assert row["min_s"] <= row["median_s"] <= row["max_s"]


def test_bench_table_output():
    done = perflab(
        "bench",
        "--preset",
        "cpu-tiny",
        "--context-length",
        "8",
        "--mode",
        "forward",
        "--warmup",
        "0",
        "--steps",
        "2",
    )
    assert done.returncode == 0, done.stderr
    assert "median_s" in done.stdout and "cpu-tiny" in done.stdout


def test_bench_with_a_shape_the_recipe_flags_and_memory():
    from perflab.bench.steps import BenchConfig

    shape = ["--d-model", "64", "--num-heads", "2", "--num-layers", "1", "--vocab-size", "256"]
    recipe = ["--attention", "flash", "--head", "fused", "--optimizer", "foreach"]
    done = perflab(
        "bench",
        "--preset",
        "cpu-tiny",
        "--context-length",
        "16",
        "--mode",
        "train-step",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--checkpoint-group",
        "1",
        *shape,
        *recipe,
        "--memory",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    config = BenchConfig(
        "cpu-tiny", 16, "train-step", d_model=64, num_heads=2, num_layers=1, vocab_size=256
    )
    assert row["num_parameters"] == config.model_config().num_parameters()
    assert (row["attention"], row["head"], row["optimizer"]) == ("flash", "fused", "foreach")
    assert row["checkpoint_group"] == 1 and row["compile"] is False
    assert row["peak_bytes"] > 0 and row["peak_MiB"] == row["peak_bytes"] / 2**20


def _notebook(path, *code, parameters="x = 1"):
    """A notebook at ``path`` with a ``parameters`` cell and then ``code`` cells."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    params = nbformat.v4.new_code_cell(parameters)
    params.metadata["tags"] = ["parameters"]
    notebook.cells = [params, *map(nbformat.v4.new_code_cell, code)]
    nbformat.write(notebook, path)


def test_run_executes_a_notebook_with_parameters(tmp_path):
    path = tmp_path / "07_tiny.ipynb"
    _notebook(path, "open('result.txt', 'w').write(str(x * 2))")
    done = perflab(
        "run", str(path), "-p", "x", "21", "--output", str(tmp_path / "out"), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "result.txt").read_text() == "42"
    executed = nbformat.read(tmp_path / "out" / "07_tiny.ipynb", 4)
    assert "papermill" not in executed.metadata  # no times: a re-run leaves the same metadata
    assert not any({"papermill", "execution"} & set(c.metadata) for c in executed.cells)
    assert "1 notebooks" in done.stdout and "0 failed" in done.stdout
    done = perflab(
        "run",
        str(path),
        "-p",
        "x",
        "1",
        "--keep-timings",
        "--output",
        str(tmp_path / "timed"),
        cwd=tmp_path,
    )
    timed = nbformat.read(tmp_path / "timed" / "07_tiny.ipynb", 4)
    assert timed.metadata["papermill"]["input_path"] == "07_tiny.ipynb"  # no machine path
    assert all("duration" in c.metadata["papermill"] for c in timed.cells)


def test_run_writes_into_perflabs_output_not_the_folder_it_runs_from(tmp_path):
    """A student runs it from their course checkout: nothing lands there (the submission
    script would zip it); the executed notebook goes to perflab's output/, named in full."""
    from perflab.measure.paths import REPO_ROOT

    path = tmp_path / "07_output_place_test.ipynb"
    _notebook(path, "y = x")
    target = REPO_ROOT / "output" / path.name
    try:
        done = perflab("run", str(path), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert not (tmp_path / "output").exists()
        assert target.is_file()
        assert f"-> {target}" in done.stdout
    finally:
        target.unlink(missing_ok=True)


def test_run_passes_each_notebook_only_its_own_parameters(tmp_path):
    first, second = tmp_path / "05_first.ipynb", tmp_path / "06_second.ipynb"
    _notebook(first, "open('first.txt', 'w').write(str(x))")
    _notebook(second, "open('second.txt', 'w').write(str(z))", parameters="z = 2")
    done = perflab(
        "run",
        str(first),
        str(second),
        "-p",
        "x",
        "7",
        "-p",
        "z",
        "9",
        "--output",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "first.txt").read_text() == "7"
    assert (tmp_path / "second.txt").read_text() == "9"
    injected = [
        c.source
        for c in nbformat.read(tmp_path / "out" / "06_second.ipynb", 4).cells
        if "injected-parameters" in c.metadata.get("tags", [])
    ]
    assert len(injected) == 1 and "z = 9" in injected[0] and "x" not in injected[0]


def test_run_reports_a_failing_notebook_and_exits_1(tmp_path):
    path = tmp_path / "08_fails.ipynb"
    _notebook(path, "1 / 0")
    done = perflab("run", str(path), "--output", str(tmp_path / "out"))
    assert done.returncode == 1
    assert "08_fails failed in cell 2: ZeroDivisionError" in done.stderr


def test_notebook_names_resolve():
    assert resolve_notebook("01").name == "01_benchmarking.ipynb"
    assert resolve_notebook("01_benchmarking").name == "01_benchmarking.ipynb"
    assert resolve_notebook("01_benchmarking.ipynb").name == "01_benchmarking.ipynb"


@pytest.mark.parametrize(
    "text, value",
    [
        ("10", 10),
        ("0.5", 0.5),
        ("True", True),
        ("None", None),
        ("['small', 'xl']", ["small", "xl"]),
        ("full", "full"),
    ],
)
def test_parameter_values(text, value):
    assert parse_parameter_value(text) == value


@pytest.mark.skipif(not triton_available(), reason="Triton is not installed")
def test_kernels_compiles_for_a_target_and_prints_the_table():
    done = perflab(
        "kernels",
        "--kernel",
        "weighted_sum_forward",
        "flash_forward",
        "--target",
        "sm_90",
        "--head-dim",
        "64",
        "--summary",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["kernel", "target", "compiles", "failed"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    from perflab.implementations.attention.flash_configs import kept_configs

    compiles = 2 * len(kept_configs("flash_forward", 64, 2))  # each kept one, causal and not
    assert rows["flash_forward"][1:4] == ["sm_90", str(compiles), "0"]
    assert rows["weighted_sum_forward"][1:4] == ["sm_90", "1", "0"]


def test_version_names_perflab_and_torch(capsys):
    import torch

    import perflab
    from perflab.tools.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    expected = f"perflab {perflab.__version__} (torch {torch.__version__})"
    assert capsys.readouterr().out.strip() == expected


def test_cleaning_keeps_a_progress_bars_text_and_drops_a_controls_view(tmp_path):
    from perflab.tools.cli import WIDGET_VIEW, _clean_executed

    view = {WIDGET_VIEW: {"model_id": "abc", "version_major": 2, "version_minor": 0}}
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [
        nbformat.v4.new_output("display_data", {**view, "text/plain": "interactive(children=("}),
        nbformat.v4.new_output("display_data", {**view, "text/plain": "sweep: 100%|##| 4/4"}),
        nbformat.v4.new_output("display_data", view),
        nbformat.v4.new_output("stream", name="stdout", text="printed\n"),
        nbformat.v4.new_output("stream", name="stdout", text="flushed apart\n"),
        nbformat.v4.new_output("stream", name="stderr", text="a warning\n"),
        nbformat.v4.new_output("stream", name="stdout", text="after it\n"),
    ]
    notebook = nbformat.v4.new_notebook(cells=[cell], metadata={"widgets": {"state": {}}})
    path = tmp_path / "n.ipynb"
    nbformat.write(notebook, path)
    _clean_executed(path)
    cleaned = nbformat.read(path, 4)
    assert "widgets" not in cleaned.metadata
    outputs = cleaned.cells[0].outputs
    assert [o.get("data", {}).get("text/plain", o.get("text")) for o in outputs] == [
        "sweep: 100%|##| 4/4",
        "printed\nflushed apart\n",  # one stream's consecutive outputs, merged
        "a warning\n",
        "after it\n",
    ]
