"""Notebook 10's sentences (``perflab.lessons.nb10_decoding.findings``) on small frames made by
hand: each sentence states the numbers it was given, and each branch (GPU ones included) is
taken."""

import pandas as pd
import pytest

from perflab.implementations.model import get_preset
from perflab.lessons.nb10_decoding import findings as say
from perflab.lessons.nb10_decoding.costs import matmul_weights
from perflab.lessons.nb10_decoding.measurements import PARTS
from perflab.measure.peak import CopyBandwidth, PeakMatmul

TINY = get_preset("cpu-tiny")


def timing(median_ms, low_ms, high_ms, unstable=False, level=0.968):
    return {
        "median_s": median_ms / 1e3,
        "median_ci_low_s": low_ms / 1e3,
        "median_ci_high_s": high_ms / 1e3,
        "median_ci_level": level,
        "unstable": unstable,
    }


def throughput_frame(eager=(0.2, 0.5), compiled=(0.6, 0.7), frozen=None, cache=32 * 2**20):
    """Two batches (1, 16), eager and compiled (and frozen), with the given shares of the
    (memory-bound) roofline; each step moves 20 MiB, the last-level cache is ``cache`` bytes."""
    rows = []
    kinds = (("eager", eager), ("compiled", compiled)) + ((("frozen", frozen),) if frozen else ())
    for step, shares in kinds:
        for batch, share in zip((1, 16), shares, strict=True):
            roofline = 1000.0 * batch
            rows.append(
                {
                    "batch": batch,
                    "step": step,
                    "fraction_of_roofline": share,
                    "tokens_per_s": share * roofline,
                    "roofline_tokens_per_s": roofline,
                    "memory_bound_tokens_per_s": roofline,
                    "bound": "memory",
                    "step_bytes": 20 * 2**20,
                    "last_level_cache_bytes": cache,
                    **timing(2.0, 1.9, 2.1),
                }
            )
    return pd.DataFrame(rows)


def test_the_yardsticks_give_the_ridge_point():
    bandwidth = CopyBandwidth("cpu", 1 << 28, 0.1, 0.11, 20e9, 18e9, 5)
    peak = PeakMatmul("cpu", "float32", 1024, 0.01, 0.011, 100e9, 90e9, 5)
    line = say.yardstick_line(bandwidth, peak, "float32")
    assert "20.0 GB/s (the best of 5 copies; median 18.0 GB/s)" in line
    assert "100 GFLOP/s in float32" in line and "needs 5.0 FLOPs per byte" in line


@pytest.mark.parametrize("decode_intensity, bound", [(0.9, "memory"), (12.0, "compute")])
def test_each_phase_is_bound_by_what_its_flops_per_byte_says(decode_intensity, bound):
    phases = pd.DataFrame(
        {
            "phase": ["prefill", "decode"],
            "s_per_token": [0.001, 0.05],
            "flops_per_byte": [60.0, decode_intensity],
        }
    )
    sentence = say.phase_sentence(phases, ridge=5.0, steps=20)
    assert sentence.startswith("a decoded token takes 50x the time of a prefilled one")
    assert f"decode at batch 1 is bound by {bound}, prefill by compute" in sentence
    assert ("not above the 5.0" if bound == "memory" else ", above the 5.0") in sentence


def test_roofline_sentences_give_compiled_over_eager_per_batch_and_claim_no_winner():
    """Separate medians, not interleaved: ratios stated, no step called faster and no cause of
    where compiling gains more (section 5's interleaved comparison has the verdict)."""
    shares, text = say.roofline_sentences(throughput_frame())
    assert shares.endswith("1: 20% -> 60%; 16: 50% -> 70%")
    assert (
        "batch 1: the most tokens/s at the medians is the compiled step's, 600 tokens/s, 60%"
        in (text)
    )
    assert (
        "The compiled step's tokens/s over the eager one's: 3.00x at batch 1, 1.40x at batch 16"
        in (text)
    )
    for claim in ("fastest", "gains most", "fixed cost", "reaches half"):
        assert claim not in text
    assert "Freezing" not in text


def test_frozen_steps_join_the_shares_and_say_what_freezing_adds():
    shares, text = say.roofline_sentences(throughput_frame(frozen=(0.9, 0.35)))
    assert shares.endswith(
        "eager -> compiled -> frozen: 1: 20% -> 60% -> 90%; 16: 50% -> 70% -> 35%"
    )
    assert "batch 1: the most tokens/s at the medians is the frozen step's, 900 tokens/s" in text
    assert "plain compiled step's: 1.50x at batch 1, 0.50x at batch 16 (separate medians" in text


def test_two_medians_of_the_same_step_are_compared_only_at_the_same_context():
    phases = pd.DataFrame([{"phase": "decode", **timing(2.0, 1.9, 2.1)}])
    both = throughput_frame()
    sentence = say.repeat_sentence(phases, both, prompt_len=128, context=128)
    assert "the second is 1.00x the first (+0%), and their intervals overlap" in sentence
    apart = both.assign(**timing(3.0, 2.9, 3.2, unstable=True))
    sentence = say.repeat_sentence(phases, apart, prompt_len=128, context=128)
    assert "3.00 ms (96.8% CI 2.90–3.20 ms, unstable) here" in sentence
    assert "1.50x the first (+50%), and their intervals do not overlap" in sentence
    assert say.repeat_sentence(phases, both, 64, 128).endswith("at 128")
    no_one = both[both["batch"] != 1]
    assert say.repeat_sentence(phases, no_one, 128, 128).endswith(", without batch 1")


def test_kv_sentences_pick_the_best_and_worst_block_size():
    mib = 2**20
    kv = pd.DataFrame(
        {
            "cache": ["contiguous", "paged", "paged"],
            "block_size": [0, 4, 64],
            "kv_bytes": [8 * mib, 2 * mib, 4 * mib],
            "waste": [0.75, 0.1, 0.5],
            "vs_contiguous": [1.0, 0.25, 0.5],
            "peak_token_bytes": [1.8 * mib] * 3,
            "pool_bytes": [0, 8 * mib, 8 * mib],
        }
    )
    requests, held, saved = say.kv_sentences(kv, [3, 9], [4, 1])
    assert requests == "2 requests (prompt, new tokens): [(3, 4), (9, 1)]"
    assert held == (
        "contiguous: 8.00 MiB; paged: 2.00 MiB with blocks of 4, 4.00 MiB with "
        "blocks of 64; the tokens themselves at the peak: 1.80 MiB"
    )
    assert saved.startswith(
        "the paged cache needs 25% of the contiguous cache's memory with "
        "block size 4 (10% of it wasted) and 50% with block size 64 (50% "
        "wasted); the contiguous cache wastes 75%."
    )
    with pytest.raises(ValueError):
        say.kv_sentences(kv, [3, 9, 1], [4, 1])


def compilations(growing_graphs, calls=6, warnings=()):
    rows = [
        {"shapes": shapes, "call": call, "graphs": min(call, graphs), "seconds": 0.5}
        for shapes, graphs in (("growing", growing_graphs), ("fixed", 1))
        for call in range(1, calls + 1)
    ]
    frame = pd.DataFrame(rows)
    frame.attrs["dynamo_warnings"] = list(warnings)
    return frame


def test_tracing_sentence_says_what_dynamo_did_with_the_growing_step():
    assert say.graphs_line(compilations(2), 6).endswith(
        "traced into 2 graphs, the fixed-shape step into 1"
    )
    assert "made the lengths symbolic" in say.tracing_sentence(compilations(2), 6)
    assert say.tracing_sentence(compilations(6), 6).endswith("traced anew at every call")
    assert say.tracing_sentence(compilations(1), 6).endswith("about 500 ms")
    limited = say.tracing_sentence(compilations(6, warnings=["limit reached\nmore"]), 6)
    assert limited.endswith("runs the step eagerly from there: limit reached")


def profile_parts(matmul_ms, rest_ms, big_matmul_ms):
    steps = ["eager", "compiled", "compiled, batch 16"]
    ms = pd.DataFrame(0.0, index=list(PARTS), columns=steps)
    ms.loc["matmuls"] = [matmul_ms, matmul_ms, big_matmul_ms]
    ms.loc["other operators"] = [rest_ms, rest_ms / 2, rest_ms / 2]
    ms.loc["compiled kernels", "compiled"] = rest_ms / 2
    calls = pd.DataFrame(1.0, index=list(PARTS), columns=steps)
    return ms, calls


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_profile_sentences_on_a_cpu_and_on_a_gpu(device_type):
    weights = matmul_weights(TINY) * 4
    copy_ms = 1.0  # a bandwidth that copies the weights in 1 ms
    parts, calls = profile_parts(matmul_ms=1.5, rest_ms=4.0, big_matmul_ms=12.0)
    timed = pd.Series({"eager": 1.0, "compiled": 5.0})
    sentences = say.profile_sentences(
        parts, calls, TINY, 4, weights / copy_ms * 1e3, 1e15, 16, device_type, timed
    )
    assert not any("frozen" in sentence for sentence in sentences)  # none profiled
    if device_type == "cpu":
        first, big, eager, compiled = sentences
        assert "The matmuls take 1.50 ms" in first and "67% of the copy bandwidth" in first
        assert "4.00 ms are outside the matmuls and 0.50 ms inside them" in first
        assert "8.0x their time at batch 1 for 16x the FLOPs" in big
        assert "what holds these 16-row products where they are is not measured here" in big
        assert "BLAS" not in big
    else:
        gpu, eager, compiled = sentences
        assert gpu.startswith("on a GPU the profile above is the host's side")
    assert "5.50 ms, 5.5x its timed median" in eager and "read its parts as shares" in eager
    assert compiled.endswith(
        "1.1x its timed median in section 2 (5.00 ms; one profiled step beside another section's "
        "median: the profiler's own cost and the machine's noise are not told apart)"
    )


def test_steps_above_the_memory_bound_are_held_against_the_last_level_cache():
    shares, text = say.roofline_sentences(throughput_frame())
    assert "above the memory-bound roofline" not in shares + text  # none above it
    sentences = say.roofline_sentences(throughput_frame(frozen=(1.74, 0.48)))
    assert len(sentences) == 3
    assert sentences[-1].startswith(
        "above the memory-bound roofline, the whole interval of the median (batch 1 frozen 174% "
        "of it at the median)"
    )
    assert "at most 20.0 MiB a step, within this device's 32.0 MiB last-level" in sentences[-1]
    (beyond,) = say.beyond_memory_sentences(throughput_frame(frozen=(1.74, 0.48), cache=2**20))
    assert "The largest moves 20.0 MiB a step, more than this device's 1.0 MiB" in beyond
    (unknown,) = say.beyond_memory_sentences(throughput_frame(frozen=(1.74, 0.48), cache=None))
    assert unknown.endswith("This device's last-level cache is unknown, so why is not shown here.")
    older = throughput_frame(frozen=(1.74, 0.48)).drop(
        columns=["step_bytes", "last_level_cache_bytes"]
    )
    assert say.beyond_memory_sentences(older)[0].endswith("so why is not shown here.")
    # A median above the bound whose interval reaches below it is not called above it.
    straddling = throughput_frame(frozen=(1.74, 0.48))
    straddling["tokens_per_s_low"] = straddling["tokens_per_s"]
    straddling.loc[straddling["step"] == "frozen", "tokens_per_s_low"] = 900.0
    assert say.beyond_memory_sentences(straddling) == []


def test_the_frozen_steps_profile_gives_its_matmuls_rate_beside_the_plain_one():
    weights = matmul_weights(TINY) * 4
    parts, calls = profile_parts(matmul_ms=2.0, rest_ms=4.0, big_matmul_ms=12.0)
    parts.insert(2, "frozen", parts["compiled"])
    parts.loc["matmuls", "frozen"] = 1.25
    calls.insert(2, "frozen", calls["compiled"])
    timed = pd.Series({"eager": 1.0, "compiled": 5.0, "frozen": 4.0})
    sentences = say.profile_sentences(parts, calls, TINY, 4, weights * 1e3, 1e15, 16, "cpu", timed)
    (frozen,) = [s for s in sentences if s.startswith("batch 1 frozen")]
    assert "its matmuls take 1.25 ms" in frozen and "(80% of the copy bandwidth, 1.60x" in frozen
    assert sentences[-1].startswith("the profiled frozen batch-1 step took")
    parts.loc["matmuls", "frozen"] = 0.0  # a profile that could not tell the GEMMs apart
    sentences = say.profile_sentences(parts, calls, TINY, 4, weights * 1e3, 1e15, 16, "cpu", timed)
    (frozen,) = [s for s in sentences if s.startswith("batch 1 frozen")]
    assert "the profiler saw no matmul in it" in frozen and "GB/s" not in frozen


def int8_row(speedup, first_differing=16, spread=1.1):
    """int8 ``speedup`` times faster at the medians; its time ratio's interval ``spread``
    times either side of the median's."""
    return {
        "ci_low": 1 / speedup / spread,
        "ci_high": 1 / speedup * spread,
        "weight_bytes_original": 4e6,
        "weight_bytes_int8": 1e6,
        "tokens_per_s_original": 100.0,
        "tokens_per_s_int8": 100.0 * speedup,
        "logits_relative_error": 0.012,
        "first_differing_token": first_differing,
        "tokens_agreeing": 0.9,
    }


def test_int8_sentences_explain_a_speed_up_above_the_bytes_saved():
    # section 2 at batch 1: eager at 20% of its roofline, compiled (what int8 compares) at 60%
    both = throughput_frame()
    (only,) = say.int8_sentences(int8_row(2.0), both, 1, 16, "float32")
    assert "(4.00x fewer); 100 -> 200 tokens/s" in only and "roofline of 1,000 tokens/s" in only
    assert "none differs" in only
    text, why = say.int8_sentences(int8_row(5.0, first_differing=3), both, 1, 16, "bfloat16")
    assert "the first to differ is token 3" in text
    assert "at least 4.54x by the interval of the paired rounds above, is more than the 4" in why
    assert "at the medians" not in why  # the medians' ratio is not the paired one the verdict gave
    # a speed-up just above the bytes' ratio: both printed to three places, not 3.19 and 3.20
    close = {**int8_row(5.0), "weight_bytes_int8": 4e6 / 3.196, "ci_high": 1 / 3.1993}
    (_, near) = say.int8_sentences(close, both, 1, 16, "float32")
    assert "at least 3.199x by the interval of the paired rounds above" in near
    assert "is more than the 3.196x fewer bytes" in near
    assert "The compiled bfloat16 step with the original weights ran at 60% of its roofline" in why
    assert "do not explain the difference" in why and "far from" not in why
    far = throughput_frame(compiled=(0.3, 0.7))
    (_, why) = say.int8_sentences(int8_row(5.0), far, 1, 16, "float32")
    assert (
        "at 30% of its roofline in section 2 (another measurement), far from its memory bound, "
        "where bytes need not set a step's time: a possible reason, not tested here"
    ) in why
    (alone,) = say.int8_sentences(int8_row(5.0), both, 7, 16, "float32")  # no roofline at 7
    assert "roofline" not in alone
    # 5x at the medians, but the interval reaches 3.8x: not shown to beat the bytes' 4x
    (unshown,) = say.int8_sentences(int8_row(5.0, spread=1.3), both, 1, 16, "float32")
    assert "more than the" not in unshown


def test_gqa_sentences_compare_the_measured_ratio_with_the_bytes():
    row = {
        "kv_cache_bytes_grouped": 2e6,
        "kv_cache_bytes_mha": 8e6,
        "step_bytes_ratio": 0.6,
        "ratio_b_over_a": 0.9,
        "ci_low": 0.85,
        "ci_high": 0.95,
    }
    # batch 16 in section 2: eager at 50% of its roofline, compiled at 70%
    text, why = say.gqa_sentences(row, "faster", throughput_frame(), 8, 2, 16, 256, 128)
    assert "holds 2.0 MB instead of 8.0 MB" in text and "measured median ratio is 0.90" in text
    assert (
        "the multi-head eager step reached 50% of its roofline in section 2 (another measurement, "
        "at context 128, not this comparison's 256)"
    ) in why
    assert "do not explain the difference" in why and "interval starts at 0.85" in why
    far = throughput_frame(eager=(0.2, 0.3))
    (_, why) = say.gqa_sentences(row, "x", far, 8, 2, 16, 256, 128, step="eager")
    assert "reached 30% of its roofline" in why and "far from its memory bound" in why
    (_, why) = say.gqa_sentences(row, "x", far, 8, 2, 16, 256, 128, step="compiled")
    assert "the multi-head compiled step reached 70%" in why
    (only,) = say.gqa_sentences(
        {**row, "ratio_b_over_a": 0.5, "ci_low": 0.45, "ci_high": 0.55},
        "faster",
        throughput_frame(),
        8,
        2,
        16,
        256,
        128,
    )
    assert only == text.replace("0.90", "0.50")
    # the median above the bytes' ratio, its interval reaching below it: no shortfall claimed
    (unshown,) = say.gqa_sentences(
        {**row, "ci_low": 0.55}, "faster", throughput_frame(), 8, 2, 16, 256, 128
    )
    assert unshown == text


def test_the_leaderboard_model_line_counts_its_weights_and_cache():
    line = say.leaderboard_decode_line(get_preset("leaderboard-8B"))
    assert line.startswith("leaderboard-8B in bfloat16: ")
    assert line.endswith("for one sequence at its full 32,768-token context)")
