"""perflab.lessons.nb10_decoding.roofline (``perflab bench --mode decode``): every cache's timed
step computes the logits of the whole sequence recomputed, in float64; the row's roofline is the one
the counted bytes and FLOPs and the given yardsticks imply; bad input is one line; and the profile
of a step accounts for its parts."""

import json
import re
import subprocess
import sys
import time

import pytest
import torch

from perflab.implementations.decode import CACHES
from perflab.implementations.model import ModelConfig, get_preset
from perflab.lessons.nb10_decoding.costs import (
    decode_cost,
    decode_step_bytes,
    matmul_weights,
    recompute_cost,
    rooflines,
)
from perflab.lessons.nb10_decoding.inputs import inference_model, random_prompts
from perflab.lessons.nb10_decoding.measurements import PARTS, profile_step
from perflab.lessons.nb10_decoding.roofline import (
    DecodeConfig,
    compile_options,
    cpu_gemm_template_applies,
    decode_benchmark,
    decode_step,
    roofline_columns,
)
from perflab.measure.device import last_level_cache_bytes
from perflab.measure.peak import CopyBandwidth, PeakMatmul
from perflab.measure.timer import Timing

TINY = ModelConfig(
    "decode-roofline-test",
    d_model=32,
    d_ff=64,
    num_layers=2,
    num_heads=2,
    vocab_size=101,
    context_length=64,
)

#: A frozen CPU step's options where the GEMM template does not apply: freezing, and its kernels
#: named to the profiler (notebook 10's profile reuses the step).
FROZEN_ON_CPU = {"freezing": True, "cpp.enable_kernel_profile": True}


def _full_sequence_logits(model, batch, context):
    prompts = random_prompts(model.config.vocab_size, [context] * batch)
    with torch.no_grad():
        return model(torch.tensor([p + [0] for p in prompts]))[:, -1]


@pytest.mark.parametrize("cache", CACHES)
def test_every_caches_step_gives_the_logits_of_the_whole_sequence_in_float64(cache):
    model = inference_model(TINY, torch.device("cpu"), torch.float64)
    step = decode_step(model, cache, 3, 11)
    expected = _full_sequence_logits(model, 3, 11)
    first, again = step(), step()  # set back to the context: the same work at every call
    assert first.dtype == torch.float64 and first.shape == (3, TINY.vocab_size)
    torch.testing.assert_close(first, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(again, first, rtol=0, atol=0)


def test_the_compiled_fixed_shape_step_gives_the_same_logits():
    model = inference_model(TINY, torch.device("cpu"), torch.float64)
    step = decode_step(model, "contiguous", 2, 7, compiled=True)
    try:
        logits = step()
    finally:
        torch._dynamo.reset()
    assert logits.dtype == torch.float64
    torch.testing.assert_close(logits, _full_sequence_logits(model, 2, 7), rtol=0, atol=1e-10)


def test_the_frozen_step_packs_its_weights_for_inductors_gemm_kernels_and_gives_the_same_logits():
    """Regression: ``torch.compile(options={"freezing": True})`` compiles without freezing; the
    frozen step patches inductor's config around its first call. Frozen on a CPU in float32,
    inductor's code holds its own C++ GEMM micro-kernels where the plain compiled step calls
    ATen's; the frozen step compiles its own graph after a plain one of the same shape (no
    reset between them), not reusing it. In float64, which the template has no kernel for, the
    frozen step compiles with ATen's matmuls and stays float64."""
    from torch._inductor.utils import run_and_get_code

    codes = {}
    try:
        for dtype, freeze, atol in (
            (torch.float32, False, 1e-5),
            (torch.float32, True, 1e-5),
            (torch.float64, True, 1e-10),
        ):
            model = inference_model(TINY, torch.device("cpu"), dtype)
            step = decode_step(model, "contiguous", 2, 7, compiled=True, freeze=freeze)
            logits, found = run_and_get_code(step)
            codes[dtype, freeze] = "\n".join(found)
            assert logits.dtype == dtype
            torch.testing.assert_close(
                logits, _full_sequence_logits(model, 2, 7), rtol=atol, atol=atol
            )
    finally:
        torch._dynamo.reset()
    # where freezing packs float32 linears for MKL (an x86 build), the template takes them
    assert ("micro_gemm" in codes[torch.float32, True]) == torch.backends.mkl.is_available()
    assert cpu_gemm_template_applies(torch.float32) == torch.backends.mkl.is_available()
    assert "micro_gemm" not in codes[torch.float32, False]
    assert "micro_gemm" not in codes[torch.float64, True]
    assert compile_options(True, None, True, torch.device("cpu"), torch.float64) == FROZEN_ON_CPU
    assert compile_options(True, None, True, torch.device("cuda"), torch.float32) == {
        "freezing": True
    }
    with pytest.raises(ValueError, match="freeze applies to a compiled step"):
        decode_step(model, "contiguous", 1, 4, freeze=True)
    with pytest.raises(ValueError, match="freeze combines with the default mode"):
        decode_step(model, "contiguous", 1, 4, compiled=True, mode="max-autotune", freeze=True)


def test_the_gemm_template_is_asked_for_only_where_freezing_packs_the_linears(monkeypatch):
    cpu, template = torch.device("cpu"), "max_autotune_gemm_backends"
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: True)
    assert compile_options(True, None, True, cpu, torch.float32)[template] == "CPP"
    assert compile_options(True, None, True, cpu, torch.float32).items() >= FROZEN_ON_CPU.items()
    with torch._inductor.config.patch({"cpp.weight_prepack": False}):
        assert compile_options(True, None, True, cpu, torch.float32) == FROZEN_ON_CPU
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: False)
    assert compile_options(True, None, True, cpu, torch.float32) == FROZEN_ON_CPU
    # bfloat16 and float16: where oneDNN packs them (this CPU's support faked both ways)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", lambda: False)
    assert compile_options(True, None, True, cpu, torch.bfloat16)[template] == "CPP"
    assert compile_options(True, None, True, cpu, torch.float16) == FROZEN_ON_CPU
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        assert compile_options(True, None, True, cpu, dtype) == FROZEN_ON_CPU
    assert compile_options(True, None, False, cpu, torch.float32) == {}


def test_the_profiled_steps_include_the_frozen_one_only_when_asked():
    from perflab.lessons.nb10_decoding.measurements import profile_steps

    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    try:
        _, with_frozen, frozen_calls = profile_steps(model, 7, 2, None, torch.device("cpu"))
        _, without, calls = profile_steps(model, 7, 2, None, torch.device("cpu"), freeze=False)
    finally:
        torch._dynamo.reset()
    assert list(with_frozen.columns) == ["eager", "compiled", "frozen", "compiled, batch 2"]
    # the frozen step's GEMMs run inside inductor's code: named by the kernel profile, they
    # count as matmuls, and its other kernels as compiled kernels
    assert with_frozen.loc["matmuls", "frozen"] > 0
    assert with_frozen.loc["compiled kernels", "frozen"] > 0
    assert frozen_calls.loc["compiled kernels", "frozen"] > 1  # named, not the graph's one call
    assert (
        list(without.columns) == list(calls.columns) == ["eager", "compiled", "compiled, batch 2"]
    )


@pytest.mark.parametrize("freeze", [False, True])
def test_the_profile_reuses_the_steps_compiled_before_it(freeze):
    """Notebook 10 compiles its steps in section 2 and profiles them in section 5: the profile
    compiles nothing again (at the lease sizes each would be a compile of the 8B model; the
    profile used to reset dynamo after each step and compile both again, and on a CPU it
    compiled the frozen step again with its kernels named, which section 2's now has)."""
    from perflab.lessons.nb10_decoding.measurements import profile_steps, throughput_by_batch
    from perflab.lessons.nb10_decoding.roofline import compiled_graphs

    model, frozen_steps = inference_model(TINY, torch.device("cpu"), torch.float32), {}
    try:
        throughput_by_batch(  # section 2's sweep
            model,
            [1, 2],
            7,
            1e9,
            1e9,
            compiled=(True,),
            freeze=freeze,
            warmup=0,
            steps=1,
            keep_frozen=frozen_steps,
        )
        assert set(frozen_steps) == ({(1, 7), (2, 7)} if freeze else set())
        before = compiled_graphs()
        _, _, calls = profile_steps(
            model, 7, 2, None, torch.device("cpu"), freeze=freeze, frozen_steps=frozen_steps
        )
        assert compiled_graphs() == before
        assert not frozen_steps  # emptied with dynamo's reset, which would unfreeze them
        if freeze:  # the reused frozen step names its kernels to the profiler: more calls
            # than the one an unnamed graph makes
            assert calls.loc["compiled kernels", "frozen"] > 1
    finally:
        torch._dynamo.reset()


def test_notebook_10_at_lease_sizes_counts_and_compiles_section_5_on_the_small_preset():
    """At the lease sizes the graph count and the compiled step of section 5 run on the small
    preset: traced and compiled on the 8B model they took minutes of a 9-minute command."""
    from perflab.settings import lease_sizes

    lease = lease_sizes("10_decoding")
    assert lease["preset"] == "leaderboard-8B" and lease["compile_preset"] == "small"
    assert lease["freeze"] is False and lease["gqa_compiled"] is False


def test_the_compiled_step_writes_one_slot_not_the_whole_cache():
    """Regression: keys and values assigned through a view of the cache buffer made inductor copy
    a layer's whole cache at every layer (at batch 16 of cpu-small, 15.6 of 24 ms a step); the
    ``index_put_`` on the buffer writes only the new slots. Read from inductor's C++ kernels:
    no loop may run over a layer's cache (batch x heads x slots x head_dim elements)."""
    from torch._inductor.utils import run_and_get_code

    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    batch, context = 3, 12  # 13 slots: a layer's cache is 3 x 2 x 13 x 16 = 1,248 values
    step = decode_step(model, "contiguous", batch, context, compiled=True)
    try:
        _, codes = run_and_get_code(step)
    finally:
        torch._dynamo.reset()
    bounds = [int(n) for n in re.findall(r"static_cast<int64_t>\((\d+)L?\)", "\n".join(codes))]
    layer_cache = batch * TINY.num_heads * (context + 1) * (TINY.d_model // TINY.num_heads)
    assert bounds, "no loop bounds found in the generated code: has inductor's C++ changed?"
    assert max(bounds) < layer_cache, sorted(set(bounds))


def test_only_the_fixed_shape_step_is_compiled():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    for cache in ("none", "paged"):
        with pytest.raises(ValueError, match="compile needs the fixed-shape step"):
            decode_step(model, cache, 1, 4, compiled=True)
    with pytest.raises(ValueError, match="unknown cache 'ring'; valid: none, contiguous, paged"):
        decode_step(model, "ring", 1, 4)
    with pytest.raises(ValueError, match="batch must be a positive integer, got 0"):
        decode_step(model, "paged", 0, 4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"preset": "huge"}, "unknown preset 'huge'; valid: cpu-tiny"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"context_length": 512}, r"context_length must be in 1 \.\. 511 for cpu-small"),
        ({"cache": "ring"}, "unknown cache 'ring'"),
        ({"cache": "paged", "compile": True}, "compile needs the fixed-shape step"),
        ({"dtype": "int8"}, "unknown dtype 'int8'"),
        ({"steps": True}, "steps must be an integer >= 1, got True"),
        ({"freeze": True}, "freeze applies to a compiled step: add --compile"),
        ({"compile": True, "freeze": "yes"}, "freeze must be True or False, got 'yes'"),
    ],
)
def test_a_bad_decode_configuration_is_one_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DecodeConfig(**kwargs)


def test_costs_without_a_cache_and_the_bound_that_holds():
    config = get_preset("cpu-small")
    cost = recompute_cost(config, 2, 127, 4)
    assert cost["flops_per_token"] == config.forward_flops(1, 128)  # the whole sequence again
    assert cost["bytes_per_token"] == matmul_weights(config) * 4 / 2  # weights shared by 2
    decode = decode_cost(config, 1, 127, 4)
    memory = rooflines(decode, bandwidth=2e10, peak_flops=3e11)
    assert memory["bound"] == "memory"
    assert memory["roofline_tokens_per_s"] == pytest.approx(2e10 / decode["bytes_per_token"])
    compute = rooflines(cost, bandwidth=2e10, peak_flops=3e11)  # recomputing is compute-bound
    assert compute["bound"] == "compute"
    assert compute["roofline_tokens_per_s"] == pytest.approx(3e11 / cost["flops_per_token"])


def test_the_row_is_measured_against_the_yardsticks_it_was_given():
    bandwidth = CopyBandwidth("cpu", 2**28, 0.02, 0.021, 2.5e10, 2.4e10, 10)
    peak = PeakMatmul("cpu", "float32", 1024, 0.01, 0.011, 2e11, 1.9e11, 5)
    config = DecodeConfig("cpu-tiny", batch_size=2, context_length=16, warmup=0, steps=3)
    row, timing = decode_benchmark(config, bandwidth=bandwidth, peak=peak)
    cost = decode_cost(get_preset("cpu-tiny"), 2, 16, 4)
    assert row["bytes_per_token"] == cost["bytes_per_token"]
    assert row["flops_per_token"] == cost["flops_per_token"]
    # the best copy bandwidth (2.5e10), not the median run's (2.4e10), sets the bound
    assert row["memory_bound_tokens_per_s"] == pytest.approx(2.5e10 / cost["bytes_per_token"])
    assert row["copy_bytes_per_s"] == 2.5e10 and row["peak_flops_per_s"] == 2e11
    assert row["library_tree"] and row["torch"] == torch.__version__ and len(timing.samples) == 3


def test_tokens_per_second_and_the_fraction_from_a_planted_timing():
    """Planted: steps of 0.25 to 1 s with median 0.5 s at batch 2 are 4 tokens/s (the mean,
    0.55 s, would give 3.6); a bandwidth of 8 x the bytes per token bounds the step at 8
    tokens/s, so it runs at half its roofline; the interval's ends invert."""
    model = inference_model(get_preset("cpu-tiny"), torch.device("cpu"), torch.float32)
    cost = decode_cost(model.config, 2, 16, 4)
    timing = Timing((0.5, 0.25, 1.0, 0.4, 0.6), warmup=0)
    row = roofline_columns(model, "contiguous", 2, 16, timing, 8 * cost["bytes_per_token"], 1e18)
    assert row["tokens_per_s"] == pytest.approx(4.0)
    assert (row["bound"], row["roofline_tokens_per_s"]) == ("memory", pytest.approx(8.0))
    assert row["fraction_of_roofline"] == pytest.approx(0.5)
    low, high = timing.median_ci
    assert (row["tokens_per_s_low"], row["tokens_per_s_high"]) == (2 / high, 2 / low)
    assert row["step_bytes"] == pytest.approx(decode_step_bytes(model.config, 2, 16, 4))
    assert row["last_level_cache_bytes"] == last_level_cache_bytes("cpu")


def test_perflab_bench_mode_decode_prints_the_roofline_as_json():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "perflab",
            "bench",
            "--mode",
            "decode",
            "--preset",
            "cpu-tiny",
            "--batch-size",
            "2",
            "--context-length",
            "16",
            "--cache",
            "paged",
            "--warmup",
            "0",
            "--steps",
            "2",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["cache"] == "paged" and row["batch_size"] == 2 and len(row["samples_s"]) == 2
    # both yardsticks were measured in this run, and the bounds come from them
    cost = decode_cost(get_preset("cpu-tiny"), 2, 16, 4)
    assert row["bytes_per_token"] == cost["bytes_per_token"]
    assert row["memory_bound_tokens_per_s"] == pytest.approx(
        row["copy_bytes_per_s"] / cost["bytes_per_token"]
    )
    assert row["compute_bound_tokens_per_s"] == pytest.approx(
        row["peak_flops_per_s"] / cost["flops_per_token"]
    )


def test_a_step_profile_accounts_for_matmuls_and_the_rest():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    table = profile_step(
        decode_step(model, "contiguous", 1, 8), torch.device("cpu"), warmup=1, steps=3
    ).set_index("part")
    assert list(table.index) == list(PARTS)
    # eager: 2 layers x (QKV, output, 3 SwiGLU) + the LM head call a matmul each, at least
    assert table.loc["matmuls", "calls_per_step"] >= 2 * 5 + 1
    assert table.loc["compiled kernels", "ms_per_step"] == 0


def test_a_step_profile_counts_each_operator_call():
    """Planted: a step of seven in-place additions and nothing else."""
    x, one = torch.zeros(8, 8), torch.ones(8, 8)

    def step():
        for _ in range(7):
            x.add_(one)
        return x

    table = profile_step(step, torch.device("cpu"), warmup=1, steps=4).set_index("part")
    assert table.loc["other operators", "calls_per_step"] == 7
    assert table.loc["matmuls", "calls_per_step"] == 0


def test_time_outside_any_operator_is_counted_as_python():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    step = decode_step(model, "contiguous", 1, 8)

    def step_after_a_nap():
        time.sleep(0.005)  # 5 ms in Python, no operator running
        return step()

    table = profile_step(step_after_a_nap, torch.device("cpu"), warmup=0, steps=3)
    python = table.set_index("part").loc["Python between operators", "ms_per_step"]
    assert python >= 5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU-only: CUDA graphs need CUDA")
def test_the_compiled_decode_step_runs_as_a_cuda_graph_on_gpu():
    """Under ``reduce-overhead`` inductor records the fixed-shape step as a CUDA graph, unless
    something in it forbids one (a CPU tensor, a mutated input it cannot handle): then it runs
    without, and says so only in its counters."""
    from torch._dynamo.utils import counters

    model = inference_model(TINY, torch.device("cuda"), torch.float32)
    counters.clear()
    step = decode_step(model, "contiguous", 2, 8, compiled=True, mode="reduce-overhead")
    try:
        for _ in range(4):  # recorded on a later call than the first
            step()
        torch.cuda.synchronize()
        assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    finally:
        torch._dynamo.reset()


def test_a_second_step_of_the_same_shape_reuses_the_compiled_graph():
    """Notebook 10 times the compiled step in several sections: the second step of a shape
    (another decoder, the same model shape, batch and context) compiles nothing new."""
    from perflab.lessons.nb10_decoding.roofline import compiled_graphs

    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    torch._dynamo.reset()
    before = compiled_graphs()
    try:
        decode_step(model, "contiguous", 2, 8, compiled=True)()
        after_first = compiled_graphs()
        decode_step(model, "contiguous", 2, 8, compiled=True)()
        assert compiled_graphs() == after_first == before + 1
        decode_step(model, "contiguous", 3, 8, compiled=True)()  # another shape: compiled
        assert compiled_graphs() == before + 2
    finally:
        torch._dynamo.reset()
