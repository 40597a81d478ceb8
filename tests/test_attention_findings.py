"""Notebook 05's attention sentences (``perflab.findings.attention``) on frames made by
hand and stand-in comparisons: each states the numbers it was given, each branch taken."""

import pandas as pd
import pytest
import torch

from perflab.findings import attention as say
from perflab.measure.comparison import Comparison

GiB = 2**30


def comparison(ratio, low, high, names=("naive", "naive_compiled")):
    return Comparison(*names, (1.0,) * 6, (ratio,) * 6, ratio, (low, high), 0.03, 0.968)


def test_oom_lines_with_and_without_a_failure():
    results = pd.DataFrame(
        {
            "implementation": ["naive", "naive", "naive"],
            "head_dim": [64, 64, 128],
            "seq_len": [1024, 8192, 4096],
            "status": ["ok", "oom", "oom"],
        }
    )
    first, full = say.oom_lines(results, 8, 10.0, device_memory_bytes=80 * GiB)
    assert first.startswith("smallest failing size: seq 4096, d 128 (naive): forward peak by")
    assert first.endswith(", against 80.0 GiB on the device")
    assert "needs 16.2 GiB at the forward peak" in full  # 8 x 16384^2 float32, twice
    assert full.endswith("more than a 10.0 GiB GPU has")
    none, _ = say.oom_lines(results.assign(status="ok"), 8, 79.2)
    assert none == "no configuration ran out of memory on this device at these sizes"
    assert say.oom_lines(results, 1, 2000.0)[1].endswith("it fits a 2000.0 GiB GPU")


def test_the_grid_tally_and_the_largest_point():
    comparisons = [
        comparison(0.8, 0.75, 0.85).with_labels(head_dim=64, seq_len=256),
        comparison(1.0, 0.99, 1.01).with_labels(head_dim=64, seq_len=1024),
        comparison(0.9, 0.7, 1.2).with_labels(head_dim=128, seq_len=1024),
    ]
    rows = [
        {"implementation": impl, "head_dim": d, "seq_len": n, "peak_bytes": peak, "status": "ok"}
        for d, n in ((64, 256), (64, 1024), (128, 1024))
        for impl, peak in (("naive", 100.0), ("naive_compiled", 60.0))
    ]
    grid = say.compiled_grid(comparisons, pd.DataFrame(rows))
    assert grid["peak_memory_ratio"].tolist() == [0.6, 0.6, 0.6]
    tally, finding = say.grid_findings(grid, comparisons)
    assert tally == (
        "compiled attention over 3 grid points: 1 faster, 1 the same within the noise band, 0 "
        "slower, 1 inconclusive"
    )
    assert finding.sentence.endswith("at d 128, n 1024; peak memory 0.60x of naive")
    assert finding.comparison is comparisons[-1] and finding.verdict == "inconclusive"


def test_yours_are_compared_with_naive_and_compiled(monkeypatch):
    calls = []

    def fake_compare(a, b, **kwargs):
        calls.append((a, b, kwargs["seq_len"]))
        return comparison(0.5, 0.45, 0.55, names=(a, b))

    monkeypatch.setattr(say, "compare_attention", fake_compare)
    findings = say.yours_against_naive(["yours_torch"], 64, 512, 2, "cpu", rounds=6, warmup=1)
    assert calls == [("naive", "yours_torch", 512), ("naive_compiled", "yours_torch", 512)]
    assert [f.key for f in findings] == ["yours_torch vs naive", "yours_torch vs naive_compiled"]
    assert findings[0].sentence.endswith("at d 64, n 512")
    assert say.yours_against_naive([], 64, 512, 2, "cpu", rounds=6, warmup=1) == []


def test_matmul_shapes_line():
    model = pd.DataFrame({"matmul_shapes": [3, 11]})
    assert say.matmul_shapes_line(model).startswith("the train step runs 11 distinct matmul shapes")


def test_against_naive_compares_at_the_longest_length_both_ran(monkeypatch):
    calls = []

    def fake_compare(a, b, **kwargs):
        calls.append((b, kwargs["seq_len"], kwargs["dtype"]))
        return comparison(0.5, 0.45, 0.55, names=(a, b))

    monkeypatch.setattr(say, "compare_attention", fake_compare)
    longest = pd.Series({"naive": 512, "sdpa": 1024, "flash_torch": 256})
    frame, findings = say.against_naive(
        ["sdpa", "flash_torch"], longest, 4, 64, "cpu", "float32", rounds=6, warmup=1
    )
    assert [(b, n) for b, n, _ in calls] == [("sdpa", 512), ("flash_torch", 256)]
    assert frame["seq_len"].tolist() == [512, 256] and (frame["dtype"] == "float32").all()
    assert findings[1].key == "flash_torch vs naive"
    assert findings[1].sentence.endswith("(b=4, n=256, d=64, float32, causal)")
    _, missing = say.against_naive(
        ["yours_triton"], longest, 4, 64, "cpu", "float32", rounds=6, warmup=1
    )
    assert missing[0].sentence == "yours_triton: not compared (no sweep row ran)"
    sdpa = say.against_sdpa_findings(
        [comparison(1.2, 1.1, 1.3).with_labels(heads=16, seq_len=4096)]
    )
    assert sdpa[0].key == "naive_compiled vs sdpa, 16 heads, n=4096"
    assert sdpa[0].sentence.startswith("naive_compiled is ")  # the verdict's own words,
    assert sdpa[0].sentence.endswith(" at 16 heads, n=4096")  # then the case it was measured on
    one = say.against_sdpa_findings([comparison(1.2, 1.1, 1.3).with_labels(heads=1, seq_len=64)])
    assert one[0].sentence.endswith(" at 1 head, n=64")


def test_memory_line_names_the_tiled_implementation_it_has():
    memory = pd.DataFrame(
        {"implementation": ["naive", "flash_torch"], "peak_bytes": [400 * 2**20, 20 * 2**20]}
    )
    line = say.memory_line(memory, 4, 1024, 64, "float32")
    assert line == (
        "b=4, n=1024, d=64, float32: flash_torch peak / naive peak = 0.050; the (b x n x n) "
        "scores alone take 16 MiB"
    )
    with_triton = pd.concat(
        [memory, pd.DataFrame({"implementation": ["flash_triton"], "peak_bytes": [10 * 2**20]})]
    )
    assert "flash_triton peak / naive peak = 0.025" in say.memory_line(
        with_triton, 4, 1024, 64, "bfloat16"
    )


def test_compile_line_counts_failures_spills_and_overflows():
    from perflab.tools.kernels import compile_line

    table = pd.DataFrame(
        {
            "kernel": ["flash_forward", "flash_forward", "weighted_sum_forward"],
            "target": ["sm_90", "sm_80", "sm_90"],
            "status": ["ok", "error", "ok"],
            "spill_stores": [4, None, 8],
            "shared_bytes": [300_000, None, 10],
            "max_shared_bytes": [232_448, 166_912, 232_448],
        }
    )
    assert compile_line(table) == (
        "3 compiles of 2 kernels for sm_90, sm_80; failed: 1; FlashAttention compiles that "
        "spill: 1; over the shared-memory limit: 1"
    )


def test_implementation_checks_and_weighted_sum_line():
    pytest.importorskip("triton")
    from perflab.implementations.attention.correctness import (
        checks_line,
        implementation_checks,
        weighted_sum_line,
    )
    from perflab.implementations.attention.flash_torch import FlashAttentionTorch
    from perflab.implementations.attention.weighted_sum import WeightedSumTriton

    checks = implementation_checks(
        {"flash_torch": FlashAttentionTorch}, [(1, 5, 7, 16, True)], [torch.float32], "cpu"
    )
    assert checks["implementation"].tolist() == ["flash_torch"]
    assert checks_line(checks).startswith("1 of 1 checks within tolerance; tolerances {'float32'")
    one_off = pd.concat([checks, checks.assign(within_tolerance=False)], ignore_index=True)
    assert checks_line(one_off).startswith("1 of 2 checks within tolerance")
    assert weighted_sum_line(WeightedSumTriton, "cpu", rows=9, width=5) == (
        "forward within 1e-4: True, dx within 1e-6: True, dw within 1e-4: True"
    )


def test_the_smoke_comparison_of_another_device_is_shown_with_its_source(monkeypatch, tmp_path):
    from perflab.findings.attention import smoke_comparisons_elsewhere
    from perflab.measure.paths import device_slug

    monkeypatch.setenv("PERFLAB_DATA_DIR", str(tmp_path / "data"))
    for slug in (device_slug("cpu"), "nvidia-h200"):  # this device's own rows are not shown
        folder = tmp_path / "data" / "results" / "06_flash_attention" / slug
        folder.mkdir(parents=True)
        (folder / "smoke_flash_vs_sdpa.csv").write_text(
            "heads,seq_len,verdict,sentence\n16,4096,slower,flash_triton is 1.35x slower\n"
        )
    assert smoke_comparisons_elsewhere("cpu") == [
        "nvidia-h200: data/results/06_flash_attention/nvidia-h200/smoke_flash_vs_sdpa.csv; a "
        "historical record, measured before rows recorded their library_tree: by older code "
        "than this library, which may have changed what they measure",
        "16 heads, 4096 tokens: flash_triton is 1.35x slower",
    ]
