"""Notebook 04's sentences (``perflab.lessons.nb04_memory.findings``) on small frames made by hand,
or on the meta-device models they read: each states the numbers it was given, and each branch is
taken."""

from types import SimpleNamespace

import pandas as pd
import pytest

from perflab.implementations.model import get_preset
from perflab.lessons.nb04_memory import findings as say
from perflab.lessons.nb04_memory.at_scale import handout_example, handout_sizes

MiB = 2**20
TINY = get_preset("cpu-tiny")


def test_peak_and_logits_lines():
    peak = {
        "peak_bytes": 3 * MiB,
        "time_share": 0.5,
        "origin": "aten::mm",
        "python_stack": "model.py:10",
        "end_bytes": MiB,
    }
    timeline = SimpleNamespace(at_peak=lambda: peak)
    (line,) = say.peak_lines({"forward": timeline})
    assert line == (
        "forward: peak 3.0 MiB above the memory held before, 50% of the way through, in "
        "aten::mm (model.py:10); 1.0 MiB still held at the end"
    )
    largest = pd.DataFrame({"delta_bytes": [2 * MiB], "origin": ["aten::log_softmax"]})
    logits = say.logits_line(TINY, 4, 64, largest)
    size = 4 * 64 * TINY.vocab_size * 4 / MiB
    assert f"= {size:.2f} MiB; the largest allocation is 2.00 MiB (aten::log_softmax)" in logits


def test_growth_lines_read_the_peak_table():
    peaks = pd.DataFrame(
        [
            {"context_length": n, "mode": mode, "dtype": dtype, "peak_bytes": n * MiB * scale}
            for n in (64, 256)
            for mode in ("forward", "train-step")
            for dtype, scale in (("float32", 1.0), ("bfloat16", 0.75))
        ]
    )
    growth, bf16 = say.growth_lines(say.peak_table(peaks))
    assert growth.startswith("from context 64 to 256 (4x), peak memory grows")
    assert "forward/float32 4.0x" in growth
    assert bf16 == (
        "at context 256, bfloat16 autocast changes the peak by -25.0% (forward), -25.0% "
        "(train-step) against float32"
    )


def test_model_against_measured_and_the_xl_step():
    peaks = pd.DataFrame(
        {
            "context_length": [64, 64, 64],
            "mode": ["forward", "forward", "train-step"],
            "dtype": ["float32", "bfloat16", "float32"],
            "peak_bytes": [100, 60, 200],
        }
    )
    modelled = pd.DataFrame(
        {"context_length": [64, 64], "mode": ["forward", "train-step"], "model_bytes": [101, 196]}
    )
    held = say.model_against_measured(peaks, modelled)
    assert len(held) == 2
    assert say.model_line(held) == (
        "the model is within 2.00% of all 2 measured float32 peaks (forward and training step "
        "at contexts 64)"
    )
    steps = pd.DataFrame(
        {
            "seq_len": [128, 2048],
            "parameters_GiB": [8.0, 8.0],
            "optimizer_state_GiB": [16.0, 16.0],
            "step_peak_in": ["optimizer step", "backward"],
            "step_peak_GiB": [40.0, 90.0],
            "forward_peak_GiB": [10.0, 60.0],
            "saved_activations_GiB": [1.0, 50.0],
            "largest_saver_share": [0.3, 0.4],
            "largest_saver": ["attention", "attention"],
        }
    )
    sentence = say.xl_step_sentence(steps, 79.2)
    assert sentence.startswith("xl holds 24.00 GiB in every step")
    assert sentence.endswith("Against a 79.2 GiB GPU: context 128 fits, context 2048 does not fit")


def test_handout_sizes_sentences_and_the_group_model():
    xl = get_preset("xl")
    sizes = handout_sizes(["xl"], [512, 2048], batch_size=4)
    text = say.xl_sizes_sentence(sizes, xl)
    assert text.startswith(f"xl residual stream at context 2048: 4 x 2048 x {xl.d_model} x 4")
    at = sizes.set_index("seq_len").loc[2048]
    assert f"{at['residual_stream_MiB']:.2f} MiB" in text
    example = say.handout_example_sentence(handout_example(), sizes)
    assert example.startswith("two checkpointed pairs save")
    group = say.xl_group_line(sizes, xl)
    # 32 blocks, b = 80 MiB of residual stream, A = one eager block's saved tensors (counted
    # on meta): sqrt(32 x 80 / A) = 0.79, so groups of one block are the model's best
    assert group.startswith("xl: the cost model's best group size is 1 (sqrt(L*b/A) = 0.79)")


def test_checkpointing_lines():
    optimum = {
        "best": 2,
        "sqrt_layers": 2.83,
        "nearest_to_sqrt": 2,
        "steps_from_sqrt": 0,
        "model_optimum": 1.1,
        "nearest_to_model": 1,
        "steps_from_model": 1,
    }
    assert say.group_line(optimum, 8).startswith("L = 8: measured best group size 2;")
    assert say.k_way_line((2, 4)) == "inputs held per ln L for a k-way split, k / ln k: " + (
        "k=2: 2.89, k=4: 2.89"
    )
    residual = MiB
    depth = pd.DataFrame(
        {
            "strategy": ["none"] * 3 + ["nested"] * 3,
            "layers": [4, 8, 16] * 2,
            "peak_bytes": [4 * MiB, 8 * MiB, 16 * MiB, 3 * MiB, 4.5 * MiB, 6 * MiB],
        }
    )
    fit, growth = say.depth_lines(depth, residual)
    assert "1.500 MiB per doubling of depth (R^2 = 1.000), 1.50 residual streams" in fit
    assert fit.endswith("between one and two inputs held per level, as argued")
    steep = depth.assign(peak_bytes=depth["peak_bytes"] * 3)
    assert say.depth_lines(steep, residual)[0].endswith(
        "outside the one-to-two inputs per level argued above"
    )
    assert growth.endswith("grows 4.0x without checkpointing and 2.00x nested")
    # An H200's nested peaks (6 MiB exactly per doubling, one 6 MiB residual stream): the fit's
    # rounding error must not turn the printed 1.00 into "outside".
    exact = depth.assign(
        peak_bytes=[907822080, 1763836928, 3477341184, 277103616, 283395072, 289686528]
    )
    line = say.depth_lines(exact, 6 * MiB)[0]
    assert "1.00 residual streams" in line and line.endswith("as argued"), line
    assert say.nested_keep_line(depth) == (
        "nested checkpointing at 16 layers keeps 37.5% of the plain peak memory"
    )
    groups = pd.DataFrame({"group_size": [1, 2, 8], "peak_bytes": [5 * MiB, 4 * MiB, 8 * MiB]})
    step, stack = say.full_step_lines(20 * MiB, 15 * MiB, groups, depth, 8, "cpu-tiny", 2)
    assert step.endswith("15.0 MiB with single-level checkpointing (g=2): ratio 0.75")
    assert stack == "the block stack alone: ratio 0.50"


@pytest.mark.parametrize("layers", [[2, 4, 8], [4, 16]])
def test_nested_checkpointing_runs_each_block_one_plus_log2_l_times(layers):
    table = say.recompute_table(layers)
    assert (table["nested"] == table["1 + log2(L)"]).all()
    assert (table["none"] == 1).all() and (table["single, g=2"] == 2).all()
    assert say.nested_forwards_line(layers).endswith("O(log L) memory: True")
