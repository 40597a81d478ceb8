"""``perflab run NN -p adapters FILE`` (and ``-p model`` for notebook 01): your code is checked
with ``perflab check``'s rules, then timed beside perflab's in the notebook's own sweeps,
only what passed, its results in a folder of its own. Apart from ``test_adapters_check.py``,
whose checks alone these build on, so that two test workers share the work."""

import pandas as pd
import pytest
from test_adapters_check import FIXTURES, perflab_cli


def _flash_adapters(tmp_path):
    """A student's repository whose adapters file hands out perflab's PyTorch FlashAttention."""
    student = tmp_path / "my-repo" / "tests"
    student.mkdir(parents=True)
    (student / "adapters.py").write_text(
        "from perflab.cs336 import get_flashattention_autograd_function_pytorch  # noqa\n"
    )
    return student


def test_notebook_06_checks_and_times_adapters_outside_the_repository(tmp_path):
    """``perflab run 06 -p adapters FILE``: your FlashAttention is checked, timed beside
    perflab's and compared with naive attention, in a results folder of its own."""
    student = _flash_adapters(tmp_path)
    done = perflab_cli(
        "run",
        "06",
        "-p",
        "adapters",
        str(student / "adapters.py"),
        "-p",
        "seq_lens",
        "[128]",
        "--output",
        str(tmp_path / "out"),
        env={"PERFLAB_DATA_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (yours,) = (tmp_path / "results" / "06_flash_attention").glob("yours-*")  # name + file hash
    (folder,) = yours.iterdir()
    flash = pd.read_csv(folder / "flash.csv")
    assert (flash[flash.implementation == "yours_pytorch"].status == "ok").all()
    assert "yours_pytorch" in set(flash.implementation)
    verdicts = pd.read_csv(folder / "against_naive.csv")
    assert "yours_pytorch" in set(verdicts.b)
    memory = pd.read_csv(folder / "long_context_memory.csv")
    assert "yours_pytorch" in set(memory.implementation)
    notebook = (tmp_path / "out" / "06_flash_attention.ipynb").read_text()
    assert "get_flashattention_autograd_function_pytorch" in notebook and "| pass" in notebook


STUDENT_DISTRIBUTED = """
from perflab.cs336 import (  # noqa: F401
    ddp_bucketed_on_after_backward,
    ddp_bucketed_on_train_batch_start,
    fsdp_gather_full_params,
    fsdp_on_after_backward,
    get_ddp_bucketed,
    get_fsdp,
)


def get_ddp(module):
    return module  # never broadcasts nor averages: checked, failed, not timed


def ddp_on_after_backward(ddp_model, optimizer):
    pass


def get_sharded_optimizer(params, optimizer_cls, **kwargs):
    return optimizer_cls(params, **kwargs)  # unsharded but correct: passes, and is timed
"""


@pytest.fixture
def student_distributed(tmp_path):
    folder = tmp_path / "my-repo" / "tests"
    folder.mkdir(parents=True)
    (folder / "adapters.py").write_text(STUDENT_DISTRIBUTED)
    return str(folder / "adapters.py")


def test_only_adapters_whose_every_check_passed_are_timed():
    from perflab.tools.adapters import passing_adapters

    table = pd.DataFrame(
        {
            "adapter": [
                "get_ddp",
                "get_ddp",
                "get_fsdp",
                "get_fsdp",
                "get_fsdp",
                "get_sharded_optimizer",
            ],
            "scope": ["handout", "handout", "handout", "handout", "beyond the handout", "handout"],
            "status": ["pass", "fail", "pass", "not provided", "fail", "not provided"],
        }
    )
    # a finding beyond the handout does not keep an adapter from being timed
    assert passing_adapters(table) == {"get_fsdp"}


def test_your_wrappers_take_turns_with_perflabs_in_one_launch(tmp_path, student_distributed):
    from perflab.distributed.ddp_benchmark import (
        ZERO_KEY,
        ddp_comparisons,
        ddp_configs,
        ddp_sweep,
        zero_configs,
    )
    from perflab.tools.adapters.timing import (
        adapters_setup,
        yours_ddp_configs,
        yours_zero_comparisons,
        yours_zero_configs,
    )

    passing = {"get_ddp_bucketed", "get_fsdp", "get_sharded_optimizer"}
    configs = ddp_configs(2, "toy", [1]) + yours_ddp_configs(
        student_distributed, passing, 2, "toy", 1
    )
    assert [c["variant"] for c in configs[-1:]] == ["yours bucketed"]  # get_ddp did not pass
    frame = ddp_sweep(
        tmp_path / "ddp.csv",
        configs,
        batch_size=2,
        seq_len=8,
        warmup=0,
        rounds=2,
        setup=adapters_setup,
    )
    assert (frame["status"] == "ok").all(), frame["error"].tolist()
    yours = frame[frame["variant"] == "yours bucketed"].iloc[0]
    assert yours.held_fraction == 1  # data parallel: every parameter
    assert "yours bucketed 1 MB" in {c.name_b for c in ddp_comparisons(frame)}
    zero = ddp_sweep(
        tmp_path / "zero.csv",
        zero_configs(2, "toy") + yours_zero_configs(student_distributed, passing, 2, "toy"),
        batch_size=2,
        seq_len=8,
        warmup=0,
        rounds=2,
        key=ZERO_KEY,
        setup=adapters_setup,
    )
    assert (zero["status"] == "ok").all(), zero["error"].tolist()
    named = [f"{row.variant} + {row.optimizer}" for row in zero.itertuples()]
    assert named[2:] == ["fsdp + adamw", "yours fsdp + adamw", "flat + yours sharded-adamw"]
    held = zero.set_index("variant")["held_fraction"]
    assert held["yours fsdp"] < 0.75 and held["fsdp"] < 0.75  # sharded over 2 ranks
    pairs = [(c.name_a, c.name_b) for c in yours_zero_comparisons(zero)]
    assert pairs == [
        ("fsdp + adamw", "yours fsdp + adamw"),
        ("flat + sharded-adamw", "flat + yours sharded-adamw"),
    ]


@pytest.mark.parametrize(
    "notebook, params, timed",
    [
        (
            "07",
            [
                "-p",
                "sizes_mb",
                "[1, 4]",
                "-p",
                "world_sizes",
                "[2]",
                "-p",
                "parity_models",
                '["toy"]',
                "-p",
                "ddp_model",
                "lm:64:2",
                "-p",
                "bucket_sizes_mb",
                "[1]",
                "-p",
                "ring_sizes_mb",
                "[1, 2]",
                "-p",
                "ring_world_sizes",
                "[2]",
                "-p",
                "rounds",
                "2",
                "-p",
                "warmup",
                "0",
            ],
            ("ddp_steps.csv", {"yours bucketed"}),
        ),
        (
            "08",
            [
                "-p",
                "zero_rounds",
                "2",
                "-p",
                "zero_warmup",
                "0",
                "-p",
                "memory_model",
                "lm:64:2",
                "-p",
                "zero_time_model",
                "lm:64:2",
                "-p",
                "prefetch_rounds",
                "2",
            ],
            ("yours_step.csv", {"yours fsdp", "flat"}),
        ),
    ],
)
def test_notebooks_07_and_08_check_then_time_your_distributed_code(
    tmp_path, student_distributed, notebook, params, timed
):
    """``perflab run 07|08 -p adapters FILE``: the check table in the notebook, and only the
    adapters that passed it timed, in a results folder of their own."""
    done = perflab_cli(
        "run",
        notebook,
        "-p",
        "adapters",
        student_distributed,
        *params,
        "--output",
        str(tmp_path / "out"),
        env={"PERFLAB_DATA_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    name = {"07": "07_distributed_ddp", "08": "08_sharding"}[notebook]
    (yours,) = (tmp_path / "results" / name).glob("yours-*")  # name + file hash
    (folder,) = yours.iterdir()
    check = pd.read_csv(folder / "yours_check.csv")
    steps = pd.read_csv(folder / timed[0])
    assert (steps["status"] == "ok").all()
    yours = steps.filter(["variant", "optimizer"]).apply(lambda c: c.str.startswith("yours"))
    assert set(steps.loc[yours.any(axis=1), "variant"]) == timed[1]
    if notebook == "07":
        assert (check.loc[check.adapter == "get_ddp", "status"] == "fail").any()
        assert (check.loc[check.adapter == "get_ddp_bucketed", "status"] == "pass").all()
    else:
        assert (check["status"] == "pass").all()
    conclusions = pd.read_csv(folder / "conclusions.csv")
    assert conclusions["key"].str.contains("yours").any()


def test_notebook_05_checks_then_times_your_flashattention(tmp_path):
    """``perflab run 05 -p adapters FILE``: checked against float64, then timed over the grid
    beside naive attention and compared with it at the largest size."""
    _flash_adapters(tmp_path)
    done = perflab_cli(
        "run",
        "05",
        "-p",
        "adapters",
        "my-repo/tests/adapters.py",
        "-p",
        "head_dims",
        "[16]",
        "-p",
        "seq_lens",
        "[64]",
        "-p",
        "steps",
        "2",
        "-p",
        "model_batch_size",
        "1",
        "-p",
        "compile_modes",
        '["default"]',  # max-autotune's tuning is the notebook's to show, not this test's
        "--output",
        str(tmp_path / "out"),
        env={"PERFLAB_DATA_DIR": str(tmp_path)},
        cwd=tmp_path,  # the path is relative to where perflab run starts, not to notebooks/
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (yours,) = (tmp_path / "results" / "05_attention_compile").glob("yours-*")  # name + file hash
    (folder,) = yours.iterdir()
    check = pd.read_csv(folder / "yours_check.csv").set_index("adapter")["status"]
    assert (check["get_flashattention_autograd_function_pytorch"] == "pass").all()
    timed = pd.read_csv(folder / "attention.csv")
    assert set(timed["implementation"]) == {"naive", "naive_compiled", "yours_pytorch"}
    assert (timed["status"] == "ok").all()
    keys = set(pd.read_csv(folder / "conclusions.csv")["key"])
    assert {"yours_pytorch vs naive", "yours_pytorch vs naive_compiled"} <= keys


def test_notebook_01_times_your_model_class_against_perflabs(tmp_path):
    """``perflab run 01 -p model package.module:Class``: your class in the preset's shape,
    timed in every mode, in the fresh-process warm-up study, and against perflab's model."""
    spec = "course_model:CourseShapedLM"
    done = perflab_cli(
        "run",
        "01",
        "-p",
        "model",
        spec,
        "-p",
        "presets",
        '["cpu-tiny"]',
        "-p",
        "steps",
        "2",
        "-p",
        "warmup",
        "1",
        "-p",
        "warmup_study_steps",
        "2",
        "--output",
        str(tmp_path / "out"),
        env={"PERFLAB_DATA_DIR": str(tmp_path)},
        cwd=FIXTURES,  # the model's module imports from where perflab run starts
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (results,) = (tmp_path / "results" / "01_benchmarking").glob(
        "yours-course-model-courseshapedlm-*"
    )
    (folder,) = results.iterdir()
    timings = pd.read_csv(folder / "timings.csv")
    assert set(timings["model"]) == {spec} and len(timings) == 3
    assert set(pd.read_csv(folder / "warmup.csv")["model"]) == {spec}
    conclusions = pd.read_csv(folder / "conclusions.csv").set_index("key")["sentence"]
    assert spec in conclusions["yours vs perflab's train-step (cpu-tiny)"]
