"""Notebook 09's sentences (``perflab.lessons.nb09_training_step.findings``) on small frames made by
hand: each states the numbers it was given, and each branch is taken."""

import pandas as pd
import pytest

from perflab.implementations.model import get_preset
from perflab.lessons.nb09_training_step import findings as say
from perflab.lessons.nb09_training_step.step_model import B200, Efficiency, StepPlan
from perflab.measure.comparison import Comparison
from perflab.measure.hardware import HANDOUT_B200

MiB = 2**20
TINY = get_preset("cpu-tiny")
LEADERBOARD = get_preset("leaderboard-8B")


def memory_frame(logits_mib=4.0, gradients_mib=2.0):
    rows = {
        "parameters": 2.0,
        "gradients": gradients_mib,
        "logits": logits_mib,
        "saved activations, one block": 1.0,
    }
    return pd.DataFrame(
        {
            "category": list(rows),
            "measured_bytes": [v * MiB for v in rows.values()],
            "formula_bytes": [2.0 * MiB, gradients_mib * MiB, None, None],
        }
    )


def test_setup_lines_count_the_leaderboards_logits():
    model, logits = say.setup_lines(TINY, 4, 64, "cpu", LEADERBOARD)
    assert model.startswith("cpu-tiny: ") and model.endswith("batch 4 x 64 tokens, on cpu")
    gb = 2 * 32768 * LEADERBOARD.vocab_size / 1e9
    assert f"{gb * 2:.1f} GB in bfloat16, {gb * 4:.1f} GB in float32" in logits


@pytest.mark.parametrize("backward_ms", [15.0, 19.87, 25.0])
def test_phase_sentence_gives_the_ratio_and_claims_no_difference_from_2x(backward_ms):
    phases = pd.DataFrame(
        {
            "phase": ["forward", "backward", "optimizer"],
            "median_ms": [10.0, backward_ms, 5.0],
            "share": [0.3, 0.5, 0.2],
        }
    )
    sentence = say.phase_sentence(phases)
    assert f"takes {backward_ms / 10:.2f}x the median forward" in sentence  # 1.99x, not 2.0x
    assert "no difference from 2x is claimed here" in sentence and "fixed cost" not in sentence


def test_memory_formulas_and_the_logits():
    memory = memory_frame()
    assert say.formulas_match(memory)
    broken = memory.assign(formula_bytes=memory["formula_bytes"] * 2)
    assert not say.formulas_match(broken)
    assert "are larger than one block's saved activations (1.0 MiB)" in say.logits_sentence(
        memory, TINY
    )
    small = say.logits_sentence(memory_frame(logits_mib=0.5), TINY)
    assert small == "The logits (0.5 MiB) are not the largest category here."


@pytest.mark.parametrize("share, met", [(0.2, "met)"), (0.4, "NOT met)")])
def test_head_sentence_holds_the_fused_head_to_a_quarter(share, met):
    head = pd.DataFrame({"method": ["plain", "fused"], "of_plain": [1.0, share]})
    assert say.head_sentence(head, 512, 32000, 256).endswith(f"(the goal: at most 0.25x; {met}")


def test_chunk_sentence_picks_among_stable_rows_only():
    chunks = pd.DataFrame(
        {
            "chunk_size": [32, 128, 512],
            "median_s": [0.030, 0.020, 0.010],
            "peak_bytes": [1, 2, 3],
            "peak_over_hidden": [1.0, 2.0, 3.0],
            "unstable": [False, False, True],
        }
    )
    sentence = say.chunk_sentence(chunks, default=128)
    assert sentence.startswith("smallest median: chunk 128 (20.0 ms")  # 512 is unstable
    assert "least memory: chunk 32" in sentence and "the default is 128 here." in sentence
    assert "(not among the sizes swept)" in say.chunk_sentence(chunks, default=64)
    assert "unstable" in say.chunk_sentence(chunks.assign(unstable=True), default=128)


def greedy_frame(peak_mib=2.2):
    return pd.DataFrame(
        {
            "rung": ["baseline", "fused qkv", "bf16"],
            "tried_on": ["", "baseline", "fused qkv"],
            "vs_best": [1.0, 0.8, 1.1],
            "ci_low": [1.0, 0.75, 1.05],
            "ci_high": [1.0, 0.85, 1.2],
            "confidence": [0.95, 0.968, 0.968],
            "rounds": [0, 6, 6],
            "verdict": ["", "faster", ""],
            "reason": ["", "", "fails the check"],
            "kept": [True, True, False],
            "peak_bytes": [peak_mib * MiB] * 3,
            "first_step_s": [0.1, 0.1, 0.1],
            "base_step_s": [float("nan"), 0.050, 0.040],
        }
    )


def test_ladder_sentences_report_each_rung_and_the_phases_against_the_median():
    phases = pd.DataFrame({"median_ms": [20.0, 30.0, 5.0]})
    memory = memory_frame()
    fused, failed, kept, near, phase = say.ladder_sentences(
        greedy_frame(), "fused qkv", memory, phases, 4, 64, 10
    )
    assert fused.startswith("fused qkv on baseline: 0.80x its time (96.8% CI 0.75–0.85, 6 rounds")
    assert failed == "bf16: fails the check" and kept == "kept: fused qkv"
    assert "within 1.25x the gradients (2.0 MiB)" in near
    assert "add up to 55.0 ms against its 50.0 ms median in the first comparison: 1.10x" in phase
    far = say.ladder_sentences(greedy_frame(peak_mib=3.0), "x", memory, phases, 4, 64, 10)
    assert len(far) == 4 and not say.peaks_near_gradients(greedy_frame(peak_mib=3.0), memory)
    # the first rung untimed (already in the stack): the phases held to the next timed median
    later = greedy_frame().assign(base_step_s=[float("nan"), float("nan"), 0.040])
    assert (
        "against its 40.0 ms median in the first comparison"
        in say.ladder_sentences(later, "x", memory, phases, 4, 64, 10)[-1]
    )
    none = greedy_frame().assign(base_step_s=float("nan"))
    assert (
        "the baseline's phases"
        not in say.ladder_sentences(none, "x", memory, phases, 4, 64, 10)[-1]
    )


def test_stack_sentence_computes_mfu_against_each_dtypes_peak():
    whole = Comparison("baseline", "kept", (0.2,) * 6, (0.1,) * 6, 0.5, (0.45, 0.55), 0.03, 0.968)
    sentence = say.stack_sentence(whole, 1e9, 1e10, 2e10, "bfloat16")
    assert sentence.startswith("speed-up 2.00x (96.8% CI 1.81–2.23x)")  # rounded outward
    assert "baseline 50% of 10 GFLOP/s (float32), kept stack 50% of 20 GFLOP/s" in sentence
    assert sentence.endswith("would take 100.0 ms against its 200.0 ms (this comparison's median)")


def test_kept_bound_sentence_reads_the_last_kept_rung():
    bounds = pd.DataFrame(
        {
            "rung": ["baseline", "fused qkv", "bf16"],
            "dominant": ["matmul", "elementwise", "matmul"],
            "dominant_share": [0.5, 0.6, 0.7],
        }
    )
    sentence = say.kept_bound_sentence(bounds, greedy_frame(), "fused qkv")
    assert sentence.startswith("in the kept stack (fused qkv), elementwise operators (named so")
    assert "hold 60% of the operator time, the largest share" in sentence


def test_data_path_sentences_name_what_this_device_does_not_show():
    table = pd.DataFrame(
        {
            "data_path": ["synthetic", "pre-tokenised", "1 worker"],
            "median_ms": [10.0, 11.0, 10.1],
            "vs_reference": [1.0, 1.1, 1.01],
            "ci_low": [1.0, 1.05, 0.99],
            "ci_high": [1.0, 1.15, 1.02],
            "confidence": [0.95, 0.968, 0.968],
        }
    )
    cpu = say.data_path_sentences(table, ("pre-tokenised", "1 worker"), "cpu")
    assert cpu[0].startswith("pre-tokenised: 11.0 ms a step; pre-tokenised is 1.10x slower")
    assert "share this machine's" in cpu[2] and cpu[3].startswith("pinned memory")
    assert len(say.data_path_sentences(table, ("pre-tokenised",), "cuda")) == 2


def test_speeches_bucketing_and_batch_size_sentences():
    assert say.speeches_line([[0] * 11, [0] * 5, [0] * 65], 64) == (
        "3 speeches: 10 tokens at the median, 33% cut at 64"
    )
    rows = pd.DataFrame(
        {
            "order": ["random", "bucketed"],
            "padding_share": [0.6, 0.1],
            "positions": [1000, 500],
            "tokens_per_s": [1000.0, 1800.0],
        }
    )
    assert "padding is 60% of the positions in a random order and 10% bucketed (0.50x" in (
        say.bucketing_sentence(rows, 64, 8)
    )
    assert say.micro_batch_sizes(12) == [1, 2, 4]
    sizes = pd.DataFrame(
        {"batch_size": [1, 8], "tokens_per_s": [100.0, 500.0], "peak_bytes": [1.0, 4.0]}
    )
    accumulated = pd.DataFrame(
        {
            "micro_batches": [1, 4],
            "micro_batch": [4, 1],
            "peak_bytes": [4.0, 2.0],
            "step_s": [1.0, 1.5],
        }
    )
    sentence = say.batch_size_sentence(sizes, accumulated, 4)
    assert "batch 8: 500 tokens/s against 100 at batch 1" in sentence and "peak 4.0x" in sentence
    assert "peak 0.50x (one micro-batch's activations at a time), step 1.50x" in sentence
    higher = say.batch_size_sentence(sizes, accumulated.assign(peak_bytes=[2.0, 2.0]), 4)
    assert "(no lower: here the gradients, not the activations, set the peak)" in higher


def test_leaderboard_memory_says_where_the_step_may_fit():
    memory = say.leaderboard_memory(LEADERBOARD)
    assert set(memory["state"]) == {"float32", "bfloat16"} and set(memory["world_size"]) == {1, 2}
    float32, bfloat16, caveat, checkpointing = say.memory_sentences(memory, LEADERBOARD, True)
    assert "per rank on 1 / 2 GPUs" in float32
    assert float32.startswith("float32 state, per rank on 1 / 2 GPUs: at least")
    assert "does not fit on 2" in float32  # float32 master weights, moments: over 180 GB
    assert caveat.startswith("(lower bounds")
    assert checkpointing.endswith("whose peaks stay near its gradients, does not.")
    assert say.memory_sentences(memory, LEADERBOARD, False)[-1].endswith("requires checkpointing.")
    small = say.leaderboard_memory(get_preset("small"), world_sizes=(2,))
    *_, fits = say.memory_sentences(small, get_preset("small"), True)
    assert "per rank on 2 GPUs" in fits and fits.endswith("though the activations would fit.")


def test_the_modelled_best_step_and_its_head_chunks():
    lines = say.gpu_lines([B200, HANDOUT_B200])
    assert all("TFLOP/s dense bf16" in line and "source: " in line for line in lines)
    plan = StepPlan(attention="flash", head="fused", optimizer="fused", compiled=True)
    chunks = say.head_chunk_estimates(LEADERBOARD, plan, B200, Efficiency(), chunks=(128, 4096))
    assert list(chunks["head_chunk"]) == [128, 4096]
    assert chunks["chunk_logits_GB"].iloc[1] == pytest.approx(4096 * LEADERBOARD.vocab_size * 4e-9)
    parts = pd.DataFrame(
        {"part": ["matmuls", "other"], "time_s": [1.0, 0.5], "share": [2 / 3, 1 / 3]}
    ).assign(flops=[0.5 * B200.bf16_flops, 0.0])
    best, heads = say.best_step_sentences(parts, chunks, Efficiency(1.0), B200)
    assert best == "best step 1.50 s: matmuls 67%, other 33%; its FLOPs alone at 100% of the " + (
        "peak take 0.50 s."
    )
    assert heads.startswith("fused head chunks of 128 tokens: ")


def test_sharded_sentence():
    row = {
        "preset": "cpu-tiny",
        "world_size": 2,
        "step_s": 0.05,
        "steps": 3,
        "tokens_per_s": 2560.0,
        "unstable": True,
        "peak_bytes": None,
    }
    assert say.sharded_sentence(row) == (
        "cpu-tiny on 2 ranks: 50.0 ms a step (median of 3, the slowest rank's; unstable: too "
        "few or too spread samples to conclude from), 2,560 tokens/s"
    )
    gpu = say.sharded_sentence({**row, "unstable": False, "peak_bytes": 3e9})
    assert gpu.endswith("the slowest rank's), 2,560 tokens/s, peak 3.0 GB on the fullest GPU")
