"""The smoke command of a GPU lease (``perflab.tools.smoke``, ``.ci/gpu-check smoke``), run end to
end on this CPU at its CPU sizes: every stage runs or says why not, and its rows land where the
lease's results are collected."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from perflab.measure.paths import REPO_ROOT, library_tree
from perflab.tools import smoke
from perflab.tools.cli import _from_here

REPO = REPO_ROOT


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="CPU sizes on a CPU; a GPU box runs the smoke command itself"
)
def test_the_smoke_command_runs_every_stage_on_a_cpu(tmp_path):
    """``.ci/gpu-check smoke`` with a relative ``GPU_CHECK_DIR`` (resolved against the
    repository, not against notebooks/ where papermill's kernels start): every stage ok but the
    autotuner's (the interpreter does not autotune), the summary and each stage's rows under
    the command's folder, and ``check-results`` finds them consistent."""
    folder = f"smoke-test-{os.getpid()}"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "GPU_CHECK_DIR": folder,
        "SMOKE_SIZES": "cpu",
        "SMOKE_BUDGET_S": "3600",  # a slow runner runs every stage too (the budget is a GPU's)
        # the library on disk, committed or not: the script would take HEAD's
        "PERFLAB_LIBRARY_TREE": library_tree(),
    }
    try:
        done = subprocess.run(
            ["bash", str(REPO / ".ci" / "gpu-check"), "smoke"],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        out = REPO / folder / "smoke"
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "exit 0" in done.stdout
        summary = pd.read_csv(out / "smoke_summary.csv").set_index("stage")
        assert list(summary.index) == list(smoke.STAGE_NAMES)
        expected = {name: "ok" for name in smoke.STAGE_NAMES} | {"autotune": "skipped"}
        assert summary["status"].to_dict() == expected, summary["line"].to_dict()
        assert "does not autotune" in summary.loc["autotune", "line"]
        assert summary.loc["kernels", "line"].startswith("3 of 3 kernel configurations")
        results = out / "data" / "results"
        for stage in smoke.STAGES:
            if stage.name != "autotune":
                assert list((results / stage.notebook).glob("*/smoke_*.csv")), stage.name
        checked = subprocess.run(
            [sys.executable, "-m", "perflab", "check-results", str(results)],
            capture_output=True,
            text=True,
            env=env,
        )
        assert checked.returncode == 0 and "0 contradictions" in checked.stdout, checked.stdout
    finally:
        subprocess.run(["rm", "-rf", str(REPO / folder)], check=False)


def test_a_stage_that_does_not_fit_the_budget_is_skipped_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_DATA_DIR", str(tmp_path))
    summary = smoke.run_smoke(["memory"], "cpu", budget_s=1, out=tmp_path / "smoke")
    assert summary["status"].tolist() == ["skipped"]
    estimate = next(stage.estimate_s for stage in smoke.STAGES if stage.name == "memory")
    assert summary["line"].iloc[0].startswith(f"out of time: 0 s spent, {estimate} s estimated")
    assert smoke._main(["--stages", "memory", "--sizes", "cpu", "--budget-s", "1"]) == 3
    assert (tmp_path / "smoke" / "smoke_summary.csv").exists()
    # Every stage within the budget: exit 0 (a stand-in stage that answers at once).
    quick = tuple(
        smoke.Stage(s.name, s.notebook, s.question, 1, lambda *_: "answered")
        if s.name == "memory"
        else s
        for s in smoke.STAGES
    )
    monkeypatch.setattr(smoke, "STAGES", quick)
    assert smoke._main(["--stages", "memory", "--sizes", "cpu", "--budget-s", "60"]) == 0


def test_a_failing_stage_is_a_row_and_the_next_still_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_DATA_DIR", str(tmp_path))

    def broken(sizes, device, folder):
        raise RuntimeError("no such kernel")

    stages = tuple(
        s if s.name != "memory" else smoke.Stage(s.name, s.notebook, s.question, 1, broken)
        for s in smoke.STAGES
    )
    monkeypatch.setattr(smoke, "STAGES", stages)
    summary = smoke.run_smoke(["memory", "trace"], "cpu", out=tmp_path)
    assert summary["status"].tolist() == ["error", "ok"]
    assert summary["line"].iloc[0] == "RuntimeError: no such kernel"


@pytest.mark.parametrize(
    "stages, sizes, message",
    [
        (["kernels", "lunch"], "cpu", r"unknown stages \['lunch'\]; valid: kernels, flash"),
        (None, "tpu", "unknown sizes 'tpu'; valid: gpu, cpu"),
    ],
)
def test_bad_stages_and_sizes_get_one_line(stages, sizes, message):
    with pytest.raises(ValueError, match=message):
        smoke.run_smoke(stages, sizes)


def test_gpu_sizes_need_cuda(monkeypatch):
    monkeypatch.setattr(smoke.torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="sizes 'gpu' need CUDA, which is not available here"):
        smoke.run_smoke(["memory"], "gpu")


def test_launches_are_counted_by_the_profiler_s_names():
    names = ["cudaGraphLaunch", "aten::mm", "cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpy"]
    assert smoke.launch_counts(names) == {"graph_launches": 1, "kernel_launches": 2}


def test_autotune_choices_reads_each_kernel_s_cache(monkeypatch):
    """The autotuner's cache, keyed as ``flash_tuning.AUTOTUNE_KEY`` plus the dtypes, as one
    row per kernel and key (faked here: the interpreter does not autotune)."""
    pytest.importorskip("triton")
    from types import SimpleNamespace

    from perflab.implementations.attention import flash_triton as ft

    def config(bq, bk, warps, stages):
        return SimpleNamespace(kwargs={"BQ": bq, "BK": bk}, num_warps=warps, num_stages=stages)

    caches = {
        "_forward": {(4096, 4096, 64, True, 1, "torch.bfloat16"): config(64, 64, 4, 4),
                     (4096, 4096, 64, True, 16, "torch.bfloat16"): config(128, 64, 4, 4)},
        "_backward_kv": {(4096, 4096, 64, True, 16, "torch.bfloat16"): config(64, 128, 8, 4)},
        "_backward_q": {},
    }  # fmt: skip
    for name, cache in caches.items():
        monkeypatch.setattr(ft, name, SimpleNamespace(cache=cache))
    table = smoke.autotune_choices()
    assert table[["kernel", "BATCH_BUCKET", "config"]].values.tolist() == [
        ["flash_forward", 1, "64x64x4x4"],
        ["flash_forward", 16, "128x64x4x4"],
        ["flash_backward_kv", 16, "64x128x8x4"],
    ]


def test_the_autotune_stage_pins_each_buckets_choice_and_compares_them(monkeypatch, tmp_path):
    """The autotune stage as a GPU runs it, its GPU parts faked (the interpreter does not
    autotune): each bucket's choice read from the autotuner's cache, the larger head count run
    on both choices pinned (the pinned configurations reach the launches), compared, and its
    rows saved."""
    pytest.importorskip("triton")
    from perflab.bench import attention_timing
    from perflab.implementations.attention import flash_triton as ft
    from perflab.implementations.attention import flash_tuning

    sizes = smoke.SIZES["cpu"]
    n, (few, many) = sizes["autotune_seq_len"], sizes["autotune_heads"]
    pinned_at_call = []

    def fake_calls(name, heads, seq_len, head_dim, dtype, causal, device):
        assert (name, seq_len, head_dim, causal) == ("flash_triton", n, 64, True)
        return None, lambda: pinned_at_call.append(list(flash_tuning._pinned[-1:]))  # [] unpinned

    chosen = {few: "32x32x4x2", many: "64x32x4x3"}
    choices = pd.DataFrame(
        [
            {"kernel": kernel, "N_Q": n, "N_K": n, "D": 64, "IS_CAUSAL": True,
             "BATCH_BUCKET": bucket, "dtypes": "torch.float32", "config": chosen[heads]}
            for kernel in ("flash_forward", "flash_backward_kv", "flash_backward_q")
            for heads, bucket in ((few, flash_tuning.batch_bucket(few)),
                                  (many, flash_tuning.batch_bucket(many)))
        ]
    )  # fmt: skip
    monkeypatch.setattr(ft, "INTERPRETED", False)
    monkeypatch.setattr(attention_timing, "_attention_calls", fake_calls)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(smoke, "autotune_choices", lambda: choices)
    line = smoke.autotune_stage(sizes, torch.device("cpu"), tmp_path)
    assert line.startswith(f"3 of 3 kernels chose another configuration at {many} heads")
    tiles = {tuple(int(x) for x in name.split("x")) for name in chosen.values()}
    timed = [pins[0] for pins in pinned_at_call if pins]  # the compared calls, pinned
    assert timed and all(set(pin.values()) <= tiles and len(pin) == 3 for pin in timed)
    assert {next(iter(pin.values())) for pin in timed} == tiles  # both choices ran
    versus = pd.read_csv(tmp_path / "smoke_autotune_vs.csv")
    assert versus[["heads", "seq_len"]].values.tolist() == [[many, n]]
    assert len(pd.read_csv(tmp_path / "smoke_autotune_choices.csv")) == 6


def test_perflab_run_makes_a_relative_data_folder_absolute(monkeypatch, tmp_path):
    """papermill starts the kernels in notebooks/, and they inherit ``PERFLAB_DATA_DIR``: a
    relative one would file their rows under notebooks/."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PERFLAB_DATA_DIR", "gpu-check/A2/data")
    _from_here({})
    assert os.environ["PERFLAB_DATA_DIR"] == str(tmp_path / "gpu-check" / "A2" / "data")


def test_the_stages_estimates_fit_the_lease_plans_smoke_command():
    """The budget check skips a stage on its estimate: together they fit the time the lease plan
    gives the command, and the most valued stages fit a 170 s budget (an H200 lease skipped
    flash there when its estimate was 120 s)."""
    from perflab.tools.lease import PLAN

    planned = next(command.estimate_s for command in PLAN if command.name == "smoke")
    estimates = {stage.name: stage.estimate_s for stage in smoke.STAGES}
    assert sum(estimates.values()) <= planned
    assert estimates["kernels"] + estimates["flash"] <= 170
