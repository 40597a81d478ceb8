import gzip
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from perflab.bench import BenchConfig
from perflab.implementations.attention import ATTENTION_RANGES, annotated_attention, naive_attention
from perflab.lessons.nb02_profiling.step_trace import attention_time_vs_flops, record_step_trace
from perflab.measure.hotspots import busy_fraction, short_name
from perflab.measure.nsys import nsys_available, nsys_profile_command, parse_kern_sum_csv
from perflab.measure.summary import SUMMARY_COLUMNS, range_names, range_totals
from perflab.measure.trace import CPU_OPERATORS, DEVICE_KERNELS, self_times, within
from perflab.profiling import (
    TraceError,
    category_shares,
    classify,
    compare_traces,
    kernel_hotspots,
    kernel_summary,
    load_trace,
)

REAL_TRACE = Path(__file__).parents[1] / "data" / "traces" / "a100_ddp_rank0.pt.trace.json.gz"


def _raw_kernels(path):
    """An independent count: the kernel events straight from the JSON."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]


def _write_trace(path, events):
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _kernel(name, ts, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7}


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("traces") / "step.json.gz"
    config = BenchConfig(
        preset="cpu-tiny", context_length=32, mode="train-step", batch_size=2, warmup=1, steps=1
    )
    return load_trace(record_step_trace(path, config))


# --- the real A100 trace -------------------------------------------------------------------


def test_hotspots_of_the_real_trace_reconcile_with_the_json():
    hotspots = kernel_hotspots(REAL_TRACE)
    raw = _raw_kernels(REAL_TRACE)
    assert hotspots["source"].eq(DEVICE_KERNELS).all()
    assert hotspots["total_us"].sum() == pytest.approx(sum(e["dur"] for e in raw), rel=1e-12)
    assert hotspots["instances"].sum() == len(raw) == 2700
    assert hotspots["share"].sum() == pytest.approx(1.0)
    assert hotspots["total_us"].is_monotonic_decreasing


def test_top_kernel_of_the_real_trace_is_the_nccl_all_reduce():
    top = kernel_hotspots(REAL_TRACE, top=3)
    assert len(top) == 3
    first = top.iloc[0]
    assert first["name"].startswith("ncclKernel_AllReduce_RING_LL_Sum_float")
    assert first["category"] == "communication"
    direct = [e["dur"] for e in _raw_kernels(REAL_TRACE) if e["name"] == first["name"]]
    assert first["instances"] == len(direct) == 15
    assert first["total_us"] == pytest.approx(sum(direct), rel=1e-12)
    assert first["share"] == pytest.approx(
        sum(direct) / sum(e["dur"] for e in _raw_kernels(REAL_TRACE))
    )


def test_real_trace_category_shares_and_busy_fraction():
    shares = category_shares(kernel_hotspots(REAL_TRACE))
    assert list(shares.index) == ["communication", "compute-bound", "memory-bound", "other"]
    assert shares.sum() == pytest.approx(1.0)
    assert shares["communication"] > 0.25 and shares["compute-bound"] > 0.2
    assert 0 < busy_fraction(load_trace(REAL_TRACE)) < 1


def test_summary_of_the_real_trace_restricted_to_the_forward_range():
    trace = load_trace(REAL_TRACE)
    whole = kernel_summary(trace)
    forward = kernel_summary(trace, "## forward ##")
    assert list(whole.table.columns) == SUMMARY_COLUMNS
    assert whole.table["Time (%)"].sum() == pytest.approx(100)
    assert whole.total_ns == pytest.approx(1e3 * sum(e["dur"] for e in _raw_kernels(REAL_TRACE)))
    assert 0 < forward.total_ns < whole.total_ns
    assert not forward.table["Name"].str.contains("bn_bw").any()  # backward kernels excluded
    with pytest.raises(ValueError, match="has no range .nope.; ranges: ## backward ##"):
        kernel_summary(trace, "nope")


A100_TRACE = "data/traces/a100_ddp_rank0.pt.trace.json.gz (HolisticTraceAnalysis test data)"
#: Kernel and operator names as they appear in real traces and reports, with where each was
#: seen, and the category each must get.
PUBLIC_KERNEL_NAMES = [
    (
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "communication",
        A100_TRACE,
    ),
    (
        "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        "communication",
        A100_TRACE,
    ),
    (
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>(...)",
        "compute-bound",
        A100_TRACE,
    ),
    (
        "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution",
        "compute-bound",
        A100_TRACE,
    ),
    ("ampere_sgemm_32x128_nt", "compute-bound", A100_TRACE),
    ("cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1", "compute-bound", A100_TRACE),
    ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32", "compute-bound", A100_TRACE),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
        "memory-bound",
        A100_TRACE,
    ),
    (
        "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>",
        "memory-bound",
        A100_TRACE,
    ),
    (
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>",
        "memory-bound",
        A100_TRACE,
    ),
    (
        "(anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>",
        "memory-bound",
        A100_TRACE,
    ),
    (
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, "
        "false>",
        "memory-bound",
        A100_TRACE,
    ),
    ("cask_cudnn_infer::computeOffsetsKernel<false, false>", "other", A100_TRACE),
    # Inductor's generated kernels: the kind prefix decides, not the fused op names.
    ("triton_poi_fused_addmm_gelu_0", "memory-bound", "issue 10 of this project (a trace)"),
    ("triton_red_fused_mm_sum_2", "memory-bound", "issue 10 of this project (a trace)"),
    ("triton_poi_fused_add_cos_sin_0", "memory-bound", "pytorch/pytorch#106351 (trace screenshot)"),
    ("triton_poi_fused_embedding_1", "memory-bound", "pytorch/pytorch#138645 (output_code.py)"),
    (
        "triton_per_fused__softmax_0",
        "memory-bound",
        "torch/_inductor naming: triton_<kind>_fused_<ops>_<n>, kind 'per' (persistent reduction)",
    ),
    ("triton_for_fused_0", "memory-bound", "pytorch/pytorch#108449 (foreach kernels: triton_for_)"),
    ("triton_tem_fused_mm_1", "compute-bound", "pytorch/pytorch#108449 (templates: triton_tem_)"),
    # Hopper cuBLAS GEMMs.
    (
        "nvjet_hsh_192x192_64x3_2x1_v_bz_coopB_NTN",
        "compute-bound",
        "NVIDIA/Fuser#3137 (nsys kernel summary, H100)",
    ),
    (
        "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT",
        "compute-bound",
        "NVIDIA/Fuser#3279 (nsys kernel summary, H100)",
    ),
    ("nvjet_sm90_hss_320x128", "compute-bound", "GindaChen/nsys-ai#582 (H100 capture)"),
    # FlashAttention, the library's and the workbook's own Triton kernels.
    (
        "void flash_fwd_kernel<Flash_fwd_kernel_traits<(int)32, (int)128, (int)128, (int)4, "
        "(bool)0, (bool)0, cutlass::half_t>>(Flash_fwd_params)",
        "compute-bound",
        "Dao-AILab/flash-attention#1202 (nsys)",
    ),
    ("_flash_forward_kernel", "compute-bound", "perflab.implementations.attention.flash_triton"),
    (
        "_flash_backward_kv_kernel",
        "compute-bound",
        "perflab.implementations.attention.flash_triton",
    ),
    ("_flash_backward_q_kernel", "compute-bound", "perflab.implementations.attention.flash_triton"),
    (
        "_weighted_sum_forward_kernel",
        "memory-bound",
        "perflab.implementations.attention.weighted_sum",
    ),
    # CPU operators (torch.profiler on a CPU; collectives on Gloo).
    ("aten::broadcast_to", "other", "huggingface/blog#3408 (view ops launch no kernel)"),
    ("aten::as_strided", "other", "huggingface/blog#3408 (view ops launch no kernel)"),
    ("aten::_unsafe_view", "other", "huggingface/blog#3408 (view ops launch no kernel)"),
    ("aten::t", "other", "huggingface/blog#3408 (view ops launch no kernel)"),
    ("gloo:all_reduce", "communication", "torch.profiler of a Gloo all_reduce (notebook 07)"),
    ("c10d::allreduce_", "communication", "torch.profiler of a c10d collective"),
    ("record_param_comms", "communication", "torch.profiler of a c10d collective"),
    ("aten::mm", "compute-bound", "torch.profiler on CPU"),
    ("aten::addmm", "compute-bound", "torch.profiler on CPU"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "compute-bound", "torch.profiler on CPU"),
    ("aten::_log_softmax", "memory-bound", "torch.profiler on CPU"),
    ("aten::copy_", "memory-bound", "torch.profiler on CPU"),
    ("aten::commit_something", "other", "negative control: no rule matches"),
]


@pytest.mark.parametrize("name, category, source", PUBLIC_KERNEL_NAMES)
def test_classification_rules(name, category, source):
    assert classify(name) == category, f"{name} (seen in {source})"


def test_short_names_drop_void_and_arguments():
    assert short_name("void foo<int>(float*, int)") == "foo<int>"
    assert short_name("aten::mm") == "aten::mm"
    assert len(short_name("x" * 200, width=50)) == 50


# --- bad input ------------------------------------------------------------------------------


def test_bad_traces_give_clear_errors(tmp_path):
    (tmp_path / "text.json").write_text("hello")
    with pytest.raises(TraceError, match="text.json is not a Chrome/Kineto trace: not JSON"):
        load_trace(tmp_path / "text.json")
    (tmp_path / "dict.json").write_text('{"foo": 1}')
    with pytest.raises(TraceError, match="no 'traceEvents' list"):
        load_trace(tmp_path / "dict.json")
    _write_trace(tmp_path / "empty.json", [])
    with pytest.raises(TraceError, match="holds no timed events"):
        load_trace(tmp_path / "empty.json")
    (tmp_path / "cut.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}')[:12])
    with pytest.raises(TraceError, match="broken gzip data"):
        load_trace(tmp_path / "cut.json.gz")
    with pytest.raises(TraceError, match="no trace file at"):
        load_trace(tmp_path / "missing.json")
    only_python = [{"ph": "X", "cat": "python_function", "name": "f", "ts": 0, "dur": 1}]
    with pytest.raises(ValueError, match="no device kernels .* and no CPU operators"):
        kernel_hotspots(_write_trace(tmp_path / "py.json", only_python))
    with pytest.raises(ValueError, match="top must be a positive"):
        kernel_hotspots(REAL_TRACE, top=0)


# --- event arithmetic -----------------------------------------------------------------------


def test_self_time_subtracts_directly_nested_events():
    events = pd.DataFrame(
        {
            "name": ["parent", "child", "child2", "grandchild", "other_thread"],
            "cat": "cpu_op",
            "ts": [0.0, 1.0, 5.0, 5.0, 2.0],
            "dur": [10.0, 3.0, 2.0, 1.0, 4.0],
            "pid": "1",
            "tid": ["a", "a", "a", "a", "b"],
        }
    )
    result = self_times(events).set_index("name")["self_us"]
    assert result.to_dict() == {
        "parent": 5.0,
        "child": 3.0,
        "child2": 1.0,
        "grandchild": 1.0,
        "other_thread": 4.0,
    }


def test_within_keeps_events_entirely_inside_a_range():
    ranges = pd.DataFrame({"ts": [0.0, 100.0], "dur": [10.0, 10.0]})
    events = pd.DataFrame(
        {"name": list("abcd"), "ts": [1.0, 8.0, 50.0, 101.0], "dur": [2.0, 5.0, 1.0, 9.0]}
    )
    assert within(events, ranges)["name"].tolist() == ["a", "d"]


def test_summary_statistics_on_known_durations(tmp_path):
    events = [_kernel("gemm_a", 0, 1), _kernel("gemm_a", 10, 3), _kernel("add_b", 20, 4)]
    table = kernel_summary(load_trace(_write_trace(tmp_path / "t.json", events))).table
    row = table.set_index("Name").loc["gemm_a"]
    assert row["Total Time (ns)"] == 4000 and row["Instances"] == 2
    assert (row["Avg (ns)"], row["Med (ns)"], row["Min (ns)"], row["Max (ns)"]) == (
        2000,
        2000,
        1000,
        3000,
    )
    assert row["StdDev (ns)"] == pytest.approx(1414.2136, rel=1e-6)
    assert row["Time (%)"] == pytest.approx(50.0)


# --- comparison -----------------------------------------------------------------------------


def test_compare_synthetic_traces(tmp_path):
    baseline = _write_trace(
        tmp_path / "base.json",
        [
            _kernel("sgemm_big", 0, 100),
            _kernel("ncclKernel_AllReduce", 100, 50),
            _kernel("vectorized_elementwise_add", 150, 10),
        ],
    )
    optimized = _write_trace(
        tmp_path / "opt.json",
        [
            _kernel("sgemm_big", 0, 40),
            _kernel("ncclKernel_AllReduce", 40, 50),
            _kernel("triton_poi_fused", 90, 10),
        ],
    )
    result = compare_traces(baseline, optimized)
    kernels = result.kernels.set_index("name")
    assert kernels.loc["sgemm_big", "delta_us"] == -60
    assert kernels.loc["sgemm_big", "delta_pct"] == pytest.approx(-60)
    assert kernels.loc["triton_poi_fused", "baseline_us"] == 0
    assert pd.isna(kernels.loc["triton_poi_fused", "delta_pct"])
    assert result.speedup == pytest.approx(160 / 100)
    shares = result.categories.set_index("category")
    assert shares.loc["communication", "optimized_share"] == pytest.approx(0.5)
    assert result.baseline_busy == result.optimized_busy == 1.0
    assert "went 0.16 ms -> 0.10 ms (-37.5%; one trace each, so no change is established" in (
        result.verdict
    )
    assert "fell" not in result.verdict and "dominates" not in result.verdict
    assert "Communication holds 50% of kernel time after" in result.verdict
    assert "at most 2.0x" in result.verdict


def test_busy_fraction_counts_overlaps_once(tmp_path):
    trace = load_trace(
        _write_trace(
            tmp_path / "t.json",
            [
                _kernel("a", 0, 10),
                _kernel("b", 5, 10),
                _kernel("c", 30, 10),
            ],
        )
    )
    assert busy_fraction(trace) == pytest.approx(25 / 40)  # busy 0-15 and 30-40 of 0-40


def test_comparing_a_trace_with_itself_changes_nothing():
    result = compare_traces(REAL_TRACE, REAL_TRACE)
    assert result.speedup == 1.0 and (result.kernels["delta_us"] == 0).all()


# --- the workbook's own traces (CPU here) ---------------------------------------------------


def test_annotated_attention_is_naive_attention():
    q, k, v = (torch.randn(2, 3, 17, 8, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        torch.testing.assert_close(
            annotated_attention(q, k, v, is_causal=causal),
            naive_attention(q, k, v, is_causal=causal),
            rtol=0,
            atol=0,
        )


def test_own_trace_has_the_step_and_attention_ranges(cpu_trace):
    names = set(range_names(cpu_trace))
    assert {"step", "forward", "backward", "optimizer", *ATTENTION_RANGES} <= names


def test_cpu_trace_falls_back_to_labelled_cpu_operators(cpu_trace):
    if cpu_trace.has_kernels:
        pytest.skip("trace recorded on CUDA has device kernels")
    hotspots = kernel_hotspots(cpu_trace)
    assert hotspots["source"].eq(CPU_OPERATORS).all() and not hotspots.empty
    forward = kernel_summary(cpu_trace, "forward")
    step = kernel_summary(cpu_trace, "step")
    assert forward.source == CPU_OPERATORS
    assert 0 < forward.total_ns < step.total_ns
    assert "aten::mm" in set(forward.table["Name"])
    assert not forward.table["Name"].str.contains("Backward|backward").any()
    assert step.table["Name"].str.contains("backward", case=False).any()


def test_attention_parts_time_against_flops(cpu_trace):
    config_heads, head_dim = 2, 64  # cpu-tiny
    table = attention_time_vs_flops(
        cpu_trace, batch_size=2, num_heads=config_heads, seq_len=32, head_dim=head_dim
    ).set_index("range")
    assert (table["instances"] == 2).all()  # one per layer, one profiled step
    assert table.loc["attention/softmax", "flop_share"] == pytest.approx(5 / (4 * head_dim + 5))
    assert table["time_share"].sum() == pytest.approx(1.0)


def test_profile_answers_read_the_handouts_questions_from_a_trace(cpu_trace):
    from perflab.lessons.nb02_profiling.grid import profile_answers

    config = BenchConfig(
        preset="cpu-tiny", context_length=32, mode="train-step", batch_size=2, warmup=1, steps=1
    )
    answers = profile_answers(cpu_trace, config)
    forward = kernel_summary(cpu_trace, "forward").table
    assert answers["top_forward"] == forward.iloc[0]["Name"]
    assert answers["top_forward_calls_per_step"] == forward.iloc[0]["Instances"]  # one step
    assert answers["top_step"] == kernel_summary(cpu_trace, "step").table.iloc[0]["Name"]
    assert 0 < answers["matmul_share_forward"] <= 1 and 0 < answers["matmul_share_step"] <= 1
    assert answers["softmax_over_matmul_flops"] == pytest.approx(5 / (4 * 64))  # head dim 64
    # the forward range is part of the step: shorter than the step range's time per step
    step_range = range_totals(cpu_trace, ["step"]).iloc[0]
    step_ms = step_range.total_us / step_range.instances / 1e3
    assert 0 < answers["forward_profiler_ms"] < step_ms
    others = kernel_summary(cpu_trace, "forward").not_matmul(at_least=1.0)
    assert (others["category"] != "compute-bound").all() and (others["Time (%)"] >= 1).all()
    assert all(f"{name} " in answers["others_forward"] for name in others["Name"])


def test_profile_grid_has_a_row_per_configuration_and_rejects_an_empty_grid():
    from perflab.lessons.nb02_profiling.grid import profile_grid

    grid = profile_grid(["cpu-tiny"], [16, 32], batch_size=1, warmup=1, steps=1, timer_steps=2)
    assert list(zip(grid["preset"], grid["seq_len"], strict=True)) == [
        ("cpu-tiny", 16),
        ("cpu-tiny", 32),
    ]
    # each row read its own trace of a head-dimension-64 model
    assert grid["softmax_over_matmul_flops"].to_numpy() == pytest.approx([5 / 256, 5 / 256])
    with pytest.raises(ValueError, match="at least one preset"):
        profile_grid([], [16])


# --- nsys (GPU-only) ------------------------------------------------------------------------

NSYS_OUTPUT = "\n".join(
    [
        "Generating SQLite file bench.sqlite from bench.nsys-rep",
        "Processing [bench.sqlite] with [/opt/nsight-systems/reports/cuda_gpu_kern_sum.py]...",
        ",".join(f'"{column}"' for column in SUMMARY_COLUMNS),
        '61.5,2000,2,1000.0,1000.0,900,1100,141.4,"ampere_sgemm_128x64_nn"',
        '38.5,1250,5,250.0,240.0,200,310,40.1,"vectorized_elementwise_kernel"',
    ]
)


def test_parse_nsys_kern_sum_csv():
    table = parse_kern_sum_csv(NSYS_OUTPUT)
    assert list(table.columns) == SUMMARY_COLUMNS
    assert table["Instances"].tolist() == [2, 5]
    with pytest.raises(ValueError, match="no cuda_gpu_kern_sum table"):
        parse_kern_sum_csv("nothing here")


def test_nsys_command_captures_only_the_timed_range(tmp_path):
    command = nsys_profile_command(tmp_path / "r", ["--preset", "small"])
    assert command[:2] == ["nsys", "profile"]
    assert "--capture-range=nvtx" in command and "--nvtx-capture=timed" in command
    assert command[-6:] == [sys.executable, "-m", "perflab", "bench", "--preset", "small"]


@pytest.mark.skipif(not nsys_available(), reason="GPU-only: needs CUDA and nsys on PATH")
def test_nsys_kernel_summary_on_gpu(tmp_path):
    from perflab.measure.nsys import nsys_kernel_summary

    summary = nsys_kernel_summary(
        [
            "--preset",
            "cpu-tiny",
            "--context-length",
            "64",
            "--mode",
            "train-step",
            "--warmup",
            "2",
            "--steps",
            "2",
        ],
        tmp_path,
    )
    assert not summary.table.empty and summary.table["Time (%)"].sum() == pytest.approx(100, abs=1)


# --- command line ---------------------------------------------------------------------------


def perflab(*args):
    return subprocess.run([sys.executable, "-m", "perflab", *args], capture_output=True, text=True)


def test_cli_hotspots_table_and_csv():
    done = perflab("hotspots", str(REAL_TRACE), "--top", "3")
    assert done.returncode == 0, done.stderr
    assert (
        "device kernels" in done.stdout and "ncclKernel_AllReduce_RING_LL_Sum_float" in done.stdout
    )
    csv = perflab("hotspots", str(REAL_TRACE), "--format", "csv")
    from io import StringIO

    table = pd.read_csv(StringIO(csv.stdout))
    assert len(table) == kernel_hotspots(REAL_TRACE).shape[0]


def test_cli_hotspots_compare():
    done = perflab("hotspots", str(REAL_TRACE), "--compare", str(REAL_TRACE), "--top", "2")
    assert done.returncode == 0, done.stderr
    assert "Total kernel time" in done.stdout and "communication" in done.stdout


def test_cli_hotspots_bad_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    done = perflab("hotspots", str(bad))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "bad.json is not a Chrome/Kineto trace" in done.stderr


def test_record_step_trace_rejects_bad_arguments(tmp_path):
    config = BenchConfig(preset="cpu-tiny", context_length=16, mode="train-step")
    with pytest.raises(
        ValueError, match="unknown attention 'flash'; valid: naive, annotated, sdpa"
    ):
        record_step_trace(tmp_path / "t.json", config, attention="flash")


def test_grid_answer_a_gives_the_ratios_and_states_no_cause():
    """Planted: one profiled forward inside the timer's interval, one above it, one below it:
    the answer gives the ratios and the count inside, and says one profiled figure cannot
    tell a profiler's cost from the machine's noise (no cause is stated)."""
    from perflab.lessons.nb02_profiling.grid import grid_answers

    base = {
        "forward_timer_ms": 10.0,
        "forward_timer_ci_low_ms": 9.0,
        "forward_timer_ci_high_ms": 11.0,
        "forward_timer_unstable": False,
        "top_forward": "aten::mm",
        "same_top": True,
        "others_forward": "aten::add 2.0%",
        "others_count": 1,
        "matmul_share_forward": 0.6,
        "matmul_share_step": 0.5,
        "softmax_over_matmul_time": 0.2,
        "softmax_over_matmul_flops": 0.02,
    }
    grid = pd.DataFrame([{**base, "forward_profiler_ms": ms} for ms in (10.0, 12.0, 8.0)])
    first = grid_answers(grid)[0]
    assert first.startswith(
        "(a) the profiler's forward time is 0.80x to 1.20x the timer's median, inside the "
        "timer's interval in 1 of 3 configurations"
    )
    assert "not tested here" in first
    for cause in ("suspect", "slower moment", "cannot explain"):
        assert cause not in first


def test_grid_answers_d_and_e_state_one_profiles_figures_not_a_tested_direction():
    """(d) and (e) rest on one profile per configuration: shares and ratios, counted, with no
    direction or 'slower' claimed as if tested."""
    from perflab.lessons.nb02_profiling.grid import grid_answers

    row = {
        "forward_timer_ms": 10.0,
        "forward_timer_ci_low_ms": 9.0,
        "forward_timer_ci_high_ms": 11.0,
        "forward_profiler_ms": 10.0,
        "top_forward": "aten::mm",
        "same_top": True,
        "others_forward": "",
        "others_count": 0,
        "softmax_over_matmul_time": 0.2,
        "softmax_over_matmul_flops": 0.02,
    }
    shares = [(0.6, 0.5), (0.5, 0.55)]
    grid = pd.DataFrame(
        [{**row, "matmul_share_forward": f, "matmul_share_step": s} for f, s in shares]
    )
    d, e = grid_answers(grid)[3:5]
    assert d == (
        "(d) matmuls hold 50%-60% of the forward pass and 50%-55% of the training step across "
        "configurations, less of the step in 1 of 2; one profile of each, no interval: a "
        "direction seen, not a tested one"
    )
    assert e.endswith("per FLOP it takes 10x the matmuls' time (one profile of each)")
    assert "falls" not in d and "slower" not in e
