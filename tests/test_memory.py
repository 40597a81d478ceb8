import math

import pytest
import torch

from perflab.implementations.checkpointing import forward_counts, run_blocks
from perflab.implementations.model import PRESETS, TransformerLM, cross_entropy
from perflab.lessons.nb04_memory.step_memory import (
    checkpoint_peak,
    log_fit,
    measured_residual_bytes,
    nearest_grid_point,
    residual_stream_bytes,
    rmsnorm_saved_tensors,
)
from perflab.measure.timeline import peak_memory, record_timeline, timeline_from_snapshot
from perflab.memory.saved import saved_by_producer, saved_bytes, saved_tensors

CPU = torch.device("cpu")

FOUR_MIB = 4 * 2**20


def test_saved_tensors_of_a_hand_built_graph():
    a = torch.randn(3, 4, requires_grad=True)  # 48 bytes

    def forward():
        b = a.exp()  # exp saves its result b (48 bytes)
        return (b * a).sum()  # mul saves b (already counted) and a (48 bytes)

    saved = saved_tensors(forward)
    assert sorted(saved["producer"]) == ["ExpBackward0", "ExpBackward0", "leaf"]
    counted = saved[saved["counted"]]
    assert sorted(counted["producer"]) == ["ExpBackward0", "leaf"]  # b once, a once
    assert saved_bytes(saved) == 96


def test_parameters_are_listed_but_not_counted():
    linear = torch.nn.Linear(8, 4, bias=False)
    x = torch.randn(5, 8, requires_grad=True)
    saved = saved_tensors(lambda: linear(x), linear.parameters())
    assert saved["is_parameter"].any()
    assert saved_bytes(saved) == 5 * 8 * 4  # only the input
    by_producer = saved_by_producer(saved)
    assert by_producer["bytes"].sum() == 160 and by_producer["share"].sum() == pytest.approx(1)


def test_compiled_rmsnorm_saves_less_than_eager():
    eager = rmsnorm_saved_tensors(64, 2, 16, compiled=False, device=CPU)
    compiled = rmsnorm_saved_tensors(64, 2, 16, compiled=True, device=CPU)
    # eager keeps x, 1/rms and x/rms; compiled keeps x and 1/rms and recomputes the rest.
    assert saved_bytes(eager) == (2 * 16 * 64 * 2 + 2 * 16) * 4
    assert saved_bytes(compiled) == (2 * 16 * 64 + 2 * 16) * 4


@pytest.mark.parametrize("strategy, group_size", [("single", 1), ("single", 2), ("nested", None)])
def test_checkpointed_gradients_equal_plain_gradients(strategy, group_size):
    torch.manual_seed(0)
    model = TransformerLM(PRESETS["cpu-tiny"]).double()
    tokens = torch.randint(10_000, (2, 24))
    grads = {}
    for name, (s, g) in {"plain": ("none", None), "checkpointed": (strategy, group_size)}.items():
        model.zero_grad(set_to_none=True)
        model.set_checkpointing(s, g)
        cross_entropy(model(tokens), tokens).backward()
        grads[name] = [p.grad.clone() for p in model.parameters()]
    for plain, checkpointed in zip(grads["plain"], grads["checkpointed"], strict=True):
        torch.testing.assert_close(checkpointed, plain, rtol=1e-12, atol=1e-12)


def test_bad_checkpointing_arguments():
    model = TransformerLM(PRESETS["cpu-tiny"])
    with pytest.raises(ValueError, match="group_size must be an integer from 1 to 2, got 3"):
        model.set_checkpointing("single", 3)
    with pytest.raises(ValueError, match="unknown strategy 'half'; valid: none, single, nested"):
        model.set_checkpointing("half")
    with pytest.raises(ValueError, match="group_size must be an integer from 1 to 2, got None"):
        run_blocks(model.blocks, torch.randn(1, 4, 128), "single")


def test_checkpointing_lowers_the_measured_peak():
    plain = [
        checkpoint_peak("cpu-tiny", n, 2, 32, "none", device=CPU)["peak_bytes"] for n in (4, 8)
    ]
    nested = [
        checkpoint_peak("cpu-tiny", n, 2, 32, "nested", device=CPU)["peak_bytes"] for n in (4, 8)
    ]
    assert plain[1] > 1.8 * plain[0]  # linear in depth without checkpointing
    assert nested[1] < 1.2 * nested[0] and nested[1] < plain[1] / 3


def test_checkpointing_cost_is_timed_by_the_synchronising_timer(monkeypatch):
    """The recomputation cost goes through ``time_fn``, which waits for the device before and
    after each step (a bare perf_counter would time only the kernel launches on a GPU)."""
    import perflab.lessons.nb04_memory.step_memory as step_memory
    import perflab.measure.timer as timer

    synced, timings = [], []
    monkeypatch.setattr(timer, "synchronize", lambda device: synced.append(torch.device(device)))
    real_time_fn = step_memory.time_fn
    monkeypatch.setattr(
        step_memory, "time_fn", lambda *a, **k: timings.append(real_time_fn(*a, **k)) or timings[-1]
    )
    result = checkpoint_peak("cpu-tiny", 2, 1, 16, "single", group_size=1, device=CPU, repeats=3)
    assert synced == [torch.device("cpu")] * 6  # before and after each of the 3 steps
    (timing,) = timings
    assert result["seconds"] == timing.median and len(timing.samples) == 3  # the timer's median


def test_timeline_records_a_known_allocation():
    def allocate():
        x = torch.empty(2**20, dtype=torch.float32)  # 4 MiB
        y = torch.empty(2**20, dtype=torch.float32)  # another 4 MiB while x lives
        del x, y

    timeline = record_timeline(allocate, CPU, python_stack=True)
    assert FOUR_MIB * 2 <= timeline.peak_bytes < FOUR_MIB * 2 + 2**16
    largest = timeline.largest_allocations(top=2)
    assert list(largest["delta_bytes"]) == [FOUR_MIB, FOUR_MIB]
    assert set(largest["origin"]) == {"aten::empty"}
    assert timeline.events["allocated_bytes"].iloc[-1] == 0  # everything freed again
    assert 2 * FOUR_MIB <= peak_memory(allocate, CPU) < 2 * FOUR_MIB + 2**16
    peak = timeline.at_peak()
    assert peak["peak_bytes"] == timeline.peak_bytes and peak["end_bytes"] == 0
    assert peak["origin"] == "aten::empty" and 0 < peak["time_share"] < 1
    assert peak["python_stack"].split(" < ")[0].endswith(" allocate")
    unasked = record_timeline(allocate, CPU).events["python_stack"]  # with_stack only on request
    assert set(unasked) == {"(not recorded)"}


def _make_big() -> torch.Tensor:
    return torch.ones(2**20)  # 4 MiB


def _caller() -> None:
    big = _make_big()
    small = torch.ones(8)
    del big, small


def test_largest_allocations_name_the_python_code_that_made_them():
    def frame(function) -> str:  # the profiler records where a function called under it begins
        return f"test_memory.py:{function.__code__.co_firstlineno} {function.__name__}"

    largest = record_timeline(_caller, CPU, python_stack=True).largest_allocations(top=1)
    frames = largest["python_stack"].iloc[0].split(" < ")
    assert frames[:2] == [frame(_make_big), frame(_caller)]
    # this test was already running when recording began: its line is the one it was on
    assert frames[2].startswith("test_memory.py:")
    assert frames[2].endswith(" test_largest_allocations_name_the_python_code_that_made_them")
    assert largest["origin"].iloc[0] == "aten::empty"


def test_a_cpu_peak_does_not_depend_on_what_was_profiled_before():
    """A block allocated while an earlier recording ran, and freed in this one, is reported
    freed (a block from unprofiled code is not): counted, it took this recording's peak below
    its own allocations, so the same step measured less after a profiled one (notebook 04's
    train step at batch 4 and 128 tokens: 71.8 MB or 77.0 MB, by what the process had
    profiled). Only the frees of this recording's own blocks count."""
    holder = []
    record_timeline(lambda: holder.append(torch.ones(1_000_000)), CPU)  # 4 MB, seen allocated

    def step():
        holder.pop()  # its free is reported now
        return torch.ones(500_000).sum()

    timeline = record_timeline(step, CPU)
    assert timeline.peak_bytes >= 2_000_000
    assert (timeline.events["delta_bytes"] != -4_000_000).all()
    assert (timeline.events["delta_bytes"] == -2_000_000).any()  # the step's own free counts


def test_timeline_from_a_cuda_snapshot():
    snapshot = {
        "device_traces": [
            [
                {
                    "action": "alloc",
                    "size": 100,
                    "time_us": 10,
                    "frames": [
                        {"filename": "/x/torch/nn/functional.py", "line": 1, "name": "linear"},
                        {"filename": "/home/me/train.py", "line": 42, "name": "step"},
                    ],
                },
                {"action": "alloc", "size": 50, "time_us": 20, "frames": [], "addr": 4096},
                {"action": "free_requested", "size": 100, "time_us": 25, "frames": []},
                {"action": "free_completed", "size": 100, "time_us": 30, "frames": []},
            ]
        ]
    }
    frame = timeline_from_snapshot(snapshot)
    assert list(frame["allocated_bytes"]) == [100, 150, 50]
    assert frame["origin"].iloc[0] == "train.py:42 step"
    assert frame["python_stack"].iloc[0] == "train.py:42 step"
    assert frame["python_stack"].iloc[1] == "(no Python frame)"
    assert list(frame["time_ms"]) == [0.0, 0.01, 0.02]
    assert frame["address"].iloc[1] == 4096  # the block, to find a tensor's allocation by


def test_each_blocks_gradients_are_found_in_the_allocator_record():
    from perflab.lessons.nb04_memory.findings import gradient_line
    from perflab.lessons.nb04_memory.step_memory import gradient_memory

    gradients, backward_ms = gradient_memory("cpu-tiny", 2, 16, CPU)
    config = PRESETS["cpu-tiny"]
    blocks = gradients[gradients["module"].str.startswith("blocks.")]
    assert list(blocks["module"]) == [f"blocks.{i}" for i in range(config.num_layers)]
    assert (gradients["found"] == gradients["gradients"]).all()
    assert (gradients["allocated_bytes"] == 4 * gradients["parameters"]).all()
    assert gradients["parameters"].sum() == config.num_parameters()
    assert (gradients["first_ms"] > backward_ms).all()
    line = gradient_line(gradients, backward_ms)
    assert "for every module: True; every gradient found as a live allocation: True" in line
    assert line.endswith(
        "all allocated after backward began: True; the blocks' gradients "
        "allocated last block first: True"
    )
    wrong = gradients.assign(allocated_bytes=gradients["allocated_bytes"] * 2)
    assert "for every module: False" in gradient_line(wrong, backward_ms)
    assert blocks["first_ms"].is_monotonic_decreasing  # backward reaches the last block first
    swapped = gradients.copy()
    rows = swapped.index[swapped["module"].str.startswith("blocks.")]
    swapped.loc[rows, "first_ms"] = swapped.loc[rows[::-1], "first_ms"].to_numpy()
    assert gradient_line(swapped, backward_ms).endswith("allocated last block first: False")


def test_residual_stream_derived_equals_measured():
    config = PRESETS["cpu-tiny"]
    assert residual_stream_bytes(config, 3, 40) == 3 * 40 * 128 * 4
    assert measured_residual_bytes(config, 3, 40, CPU) == residual_stream_bytes(config, 3, 40)


def test_log_fit_and_grid():
    layers = [4, 8, 16, 32]
    fit = log_fit(layers, [3 + 2 * math.log2(n) for n in layers])
    assert fit["slope_per_doubling"] == pytest.approx(2) and fit["intercept"] == pytest.approx(3)
    assert fit["r2"] == pytest.approx(1)
    assert nearest_grid_point(4.0, [1, 2, 4, 8]) == 4 and nearest_grid_point(0.7, [1, 2]) == 1


def test_timeline_from_a_snapshot_without_times_keeps_the_order():
    snapshot = {
        "device_traces": [
            [
                {"action": "alloc", "size": 8, "frames": []},
                {"action": "free_completed", "size": 8, "frames": []},
            ]
        ]
    }
    frame = timeline_from_snapshot(snapshot)
    assert list(frame["allocated_bytes"]) == [8, 0] and list(frame["time_ms"]) == [0.0, 1.0]


def test_forward_counts_follow_the_arrangement():
    assert forward_counts(16, "none") == [1] * 16
    assert forward_counts(16, "single", 4) == [2] * 16  # each group recomputed once
    assert forward_counts(16, "nested") == [5] * 16  # 1 + log2(16): once per recursion level
    uneven = forward_counts(12, "nested")  # halves of 6, 3 (1 + 2), ...: depths 3 and 4
    assert set(uneven) == {4, 5} and sum(uneven) < 12 * 5


def test_activation_memory_counted_on_meta_matches_the_handout_checkpointed_pairs():
    """Four xl blocks as two checkpointed pairs keep only the pairs' inputs: 2 x 80 MiB, the
    2026 handout's figure, counted on the meta device (no memory, no arithmetic)."""
    from dataclasses import replace

    from perflab.implementations.model import get_preset
    from perflab.lessons.nb04_memory.at_scale import block_gradient_bytes, saved_at_scale

    xl = replace(get_preset("xl"), num_heads=16)
    assert saved_at_scale(xl, 4, 2048, num_blocks=4, group_size=2) == 2 * 4 * 2048 * 2560 * 4
    plain = saved_at_scale(xl, 4, 2048)
    assert plain > 4 * 16 * 2048 * 2048 * 4  # at least the (b, h, n, n) softmax output
    block = 4 * 2560**2 + 3 * 2560 * 10240 + 2 * 2560  # attention, SwiGLU, two RMSNorm weights
    assert block_gradient_bytes(xl) == 4 * block


def test_modelled_group_peaks_follow_the_cost_model():
    from perflab.lessons.nb04_memory.checkpoint_study import modelled_group_peaks

    table = modelled_group_peaks(16, residual_bytes=1.0, block_bytes=1.0)  # A = b: sqrt(L) best
    assert list(table["group_size"]) == [1, 2, 4, 8, 16]
    assert table.loc[table["peak_bytes"].idxmin(), "group_size"] == 4
    assert list(modelled_group_peaks(32, 80.0, 4133.0)["peak_bytes"])[:2] == [
        32 * 80 + 4133,
        16 * 80 + 2 * 4133,
    ]


def test_memory_snapshots_are_pickled_with_protocol_4(tmp_path):
    """pytorch.org/memory_viz cannot read protocol 5, newer Pythons' default."""
    import pickle

    from perflab.measure.timeline import save_snapshot

    path = save_snapshot({"segments": [], "device_traces": [[]]}, tmp_path / "s" / "snap.pickle")
    data = path.read_bytes()
    assert data[:2] == b"\x80\x04"  # PROTO opcode, protocol 4
    assert pickle.loads(data) == {"segments": [], "device_traces": [[]]}


def test_saved_tensors_are_attributed_to_the_module_that_saved_them():
    from perflab.memory.saved import NO_MODULE, module_kind, saved_by_module

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    x = torch.randn(5, 8, requires_grad=True)
    saved = saved_tensors(lambda: model(x).exp().sum(), model.parameters(), track_modules=True)
    by_module = saved_by_module(saved).set_index("module")["bytes"]
    # Linear keeps its input (5 x 8), ReLU its output (5 x 4), exp (outside) its output (5 x 4).
    assert by_module.to_dict() == {"0": 160, "1": 80, NO_MODULE: 80}
    assert module_kind("blocks.12.attn.qkv") == "blocks.*.attn.qkv"
    assert module_kind("blocks.3") == "blocks.*" and module_kind("lm_head") == "lm_head"
    with pytest.raises(ValueError, match="track_modules=True"):
        saved_by_module(saved_tensors(lambda: model(x).sum()))


@pytest.mark.parametrize("batch_size, seq_len", [(2, 32), (4, 128)])  # optimizer; backward
def test_whole_step_memory_model_matches_the_measured_activation_peaks(batch_size, seq_len):
    """The model of notebook 04 (saved activations counted on meta, plus one logits-sized
    tensor for a forward and two for a step, or the gradients and AdamW's temporaries when
    they weigh more) against the CPU allocator's measured peaks."""
    from perflab.bench.steps import BenchConfig
    from perflab.lessons.nb04_memory.at_scale import model_saved_tensors, whole_step_memory
    from perflab.lessons.nb04_memory.step_memory import step_peak_memory

    config = PRESETS["cpu-tiny"]
    on_meta = model_saved_tensors(config, batch_size, seq_len)
    on_cpu = model_saved_tensors(config, batch_size, seq_len, device=CPU)
    assert saved_bytes(on_meta) == saved_bytes(on_cpu) > 0
    model = whole_step_memory(config, batch_size, seq_len, on_meta)
    assert model["logits_bytes"] == batch_size * seq_len * config.vocab_size * 4
    assert model["step_peak_in"] == ("optimizer" if seq_len == 32 else "backward")
    for mode, key in (("forward", "forward"), ("train-step", "step")):
        run = BenchConfig(
            preset="cpu-tiny",
            context_length=seq_len,
            batch_size=batch_size,
            mode=mode,
            warmup=1,
            steps=1,
            device="cpu",
        )
        measured = step_peak_memory(run.as_dict())["peak_bytes"]
        assert measured == pytest.approx(model[f"{key}_activation_peak_bytes"], rel=0.05), mode


def test_modelled_step_peaks_follow_each_devices_counter():
    """On CUDA the measured rise starts from a memory that holds the gradients; AdamW's
    temporaries are two of the largest parameter's size when it loops over the tensors (the
    sweep's step, on any device) and one copy of every parameter with foreach. Nothing runs on
    a GPU here."""
    from perflab.lessons.nb04_memory.at_scale import modelled_step_peaks, whole_step_memory

    config = PRESETS["cpu-tiny"]
    cpu = modelled_step_peaks(config, 4, [16], CPU).set_index("mode")["model_bytes"]
    cuda = modelled_step_peaks(config, 4, [16], torch.device("cuda"))
    cuda = cuda.set_index("mode")["model_bytes"]
    foreach = modelled_step_peaks(config, 4, [16], torch.device("cuda"), optimizer="foreach")
    foreach = foreach.set_index("mode")["model_bytes"]
    memory = whole_step_memory(config, 4, 16)
    backward = memory["saved_activations_bytes"] + 2 * memory["logits_bytes"]
    assert cpu["train-step"] == memory["step_activation_peak_bytes"]
    rise = backward - memory["gradients_bytes"]
    assert cuda["train-step"] == max(rise, memory["adamw_temporaries_bytes"])
    assert foreach["train-step"] == max(rise, memory["parameters_bytes"])
    assert cuda["train-step"] != foreach["train-step"]  # at 16 tokens the optimizer peaks
    assert cpu["forward"] == cuda["forward"] == memory["forward_activation_peak_bytes"]
    with pytest.raises(ValueError, match="optimizer must be 'for-loop' or 'foreach', got 'fused'"):
        modelled_step_peaks(config, 4, [16], CPU, optimizer="fused")


def test_the_model_of_the_measured_step_takes_the_sweeps_adamw():
    """Notebook 04 holds ``modelled_step_peaks`` (its default optimizer) against the steps of
    ``peak_configs``: the two must be the same AdamW, or the model is of another step."""
    import inspect

    from perflab.lessons.nb04_memory.at_scale import modelled_step_peaks
    from perflab.lessons.nb04_memory.step_memory import peak_configs

    default = inspect.signature(modelled_step_peaks).parameters["optimizer"].default
    swept = {config["optimizer"] for config in peak_configs("cpu-tiny", [16], 2, CPU)}
    assert swept == {default}


def test_the_cuda_memory_history_records_python_stacks_only(monkeypatch):
    """GPU path, checked here with the recorder stubbed: every allocation's C++ stack (the
    recorder's default) slows a large step by orders of magnitude; Python frames say what a
    reader can act on."""
    import perflab.measure.timeline as timeline

    calls = []

    class Stop(Exception):
        pass

    def snapshot():
        raise Stop

    monkeypatch.setattr(
        torch.cuda.memory, "_record_memory_history", lambda *args, **kwargs: calls.append(kwargs)
    )
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", snapshot)
    monkeypatch.setattr(timeline, "synchronize", lambda device: None)
    with pytest.raises(Stop):
        timeline._cuda_timeline(lambda: None, torch.device("cuda", 0), None)
    assert calls[0]["stacks"] == "python" and calls[-1] == {"enabled": None}
