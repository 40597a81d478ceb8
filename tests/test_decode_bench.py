"""perflab.lessons.nb10_decoding.costs (cross-checked against the model's own counts) and the
measurements of notebook 10 on a tiny model: each returns what it promises, and the deterministic
parts (bytes, memory, graphs, correctness flags) are right."""

import pytest
import torch

from perflab.implementations.model import PRESETS, ModelConfig
from perflab.lessons.nb10_decoding.costs import (
    decode_step_bytes,
    flops_per_token,
    kv_bytes_per_token,
    matmul_weights,
    prefill_cost,
    roofline_tokens_per_s,
)
from perflab.lessons.nb10_decoding.inputs import inference_model
from perflab.lessons.nb10_decoding.measurements import (
    compare_rotary_tables,
    compare_sampling_place,
    compile_static_step,
    count_compilations,
    kv_memory,
    prefill_vs_decode,
    throughput_by_batch,
)
from perflab.measure.peak import measure_copy_bandwidth
from perflab.measure.stats import max_level
from perflab.plots.decode import plot_decode_roofline

TINY = ModelConfig(
    "decode-bench-test",
    d_model=32,
    d_ff=64,
    num_layers=2,
    num_heads=2,
    vocab_size=101,
    context_length=64,
)


@pytest.mark.parametrize("name", ["cpu-tiny", "small", "leaderboard-8B"])
def test_costs_agree_with_the_models_own_counts(name):
    config = PRESETS[name]
    d, V = config.d_model, config.vocab_size
    norms = (2 * config.num_layers + 1) * d
    assert matmul_weights(config) == config.num_parameters() - V * d - norms  # no embedding
    assert flops_per_token(config, 1) == config.forward_flops(1, 1)  # one token over itself
    assert kv_bytes_per_token(config, 2) == 2 * config.num_layers * d * 2
    # a prompt's prefill is the model's forward pass with the LM head on its last token only
    for length in (1, 100):
        prefill = prefill_cost(config, length, 2)["flops_per_token"] * length
        assert prefill == pytest.approx(config.forward_flops(1, length) - 2 * d * V * (length - 1))


def test_decode_bytes_and_roofline():
    config = PRESETS["leaderboard-8B"]
    weights = matmul_weights(config) * 2
    step = decode_step_bytes(config, batch=8, context=1000, element_bytes=2)
    assert step == weights + 8 * 1001 * kv_bytes_per_token(config, 2)
    bound = roofline_tokens_per_s(config, 8, 1000, 2, bandwidth=3.35e12, peak_flops=989e12)
    assert bound["memory_bound_tokens_per_s"] == pytest.approx(8 * 3.35e12 / step)
    assert bound["roofline_tokens_per_s"] == bound["memory_bound_tokens_per_s"]  # decode: memory
    # a large enough batch makes it compute-bound
    large = roofline_tokens_per_s(config, 4096, 10, 2, 3.35e12, 989e12)
    assert large["roofline_tokens_per_s"] == pytest.approx(989e12 / flops_per_token(config, 10))


def test_prefill_does_more_flops_per_byte_than_decode():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    table = prefill_vs_decode(model, 16, warmup=0, steps=2).set_index("phase")
    assert list(table["tokens"]) == [16, 1]
    assert table.loc["prefill", "flops_per_byte"] > 4 * table.loc["decode", "flops_per_byte"]


def test_timing_tables_carry_the_unstable_flag_and_the_interval_level():
    # check-results flags a table of medians without an unstable column; the interval's level
    # is the one its samples give (2 samples: 50%), never a typed 95%.
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    phases = prefill_vs_decode(model, 16, warmup=0, steps=2)
    throughput = throughput_by_batch(
        model, [1, 2], 8, bandwidth=1e10, peak_flops=1e11, warmup=0, steps=2
    )
    for table in (phases, throughput):
        assert table["unstable"].dtype == bool
        assert table["median_ci_level"].tolist() == pytest.approx([max_level(2)] * len(table))
        # two steps: the interval is [min, max] of the two samples, the median their mean
        ends = (table["median_ci_low_s"] + table["median_ci_high_s"]) / 2
        assert table["median_s"].tolist() == pytest.approx(ends.tolist())
    fig = plot_decode_roofline(throughput.assign(unstable=[True, False]), "cpu")
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "unstable (hollow)" in labels and any("50% CI" in label for label in labels)


def test_throughput_table_has_a_row_per_batch_and_step_with_its_bounds():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    table = throughput_by_batch(
        model, [1, 3], 8, bandwidth=1e10, peak_flops=1e11, warmup=0, steps=2, compiled=(False, True)
    )
    assert list(table["batch"]) == [1, 1, 3, 3]
    assert list(table["step"]) == ["eager", "compiled"] * 2
    # The first call of a compiled step is its compilation: far longer than its median step.
    compiled = table[table["step"] == "compiled"]
    assert (compiled["first_call_s"] > 10 * compiled["median_s"]).all()
    assert (table["tokens_per_s_low"] <= table["tokens_per_s_high"]).all()
    # tokens/s is the batch over the median step, the interval inverted around it, and the
    # share of the roofline is taken against the bounds computed for that row.
    assert table["tokens_per_s"].tolist() == pytest.approx(
        (table["batch"] / table["median_s"]).tolist()
    )
    assert (table["tokens_per_s_low"] <= table["tokens_per_s"]).all()
    assert (table["tokens_per_s"] <= table["tokens_per_s_high"]).all()
    for row in table.itertuples():
        bounds = roofline_tokens_per_s(TINY, row.batch, 8, 4, bandwidth=1e10, peak_flops=1e11)
        assert row.roofline_tokens_per_s == pytest.approx(bounds["roofline_tokens_per_s"])
    assert table["fraction_of_roofline"].tolist() == pytest.approx(
        (table["tokens_per_s"] / table["roofline_tokens_per_s"]).tolist()
    )


def test_inference_model_initialises_in_the_dtype_asked_and_restores_the_default():
    model = inference_model(TINY, torch.device("cpu"), torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert torch.get_default_dtype() == torch.float32 and not model.training


def test_kv_memory_of_unequal_requests():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    prompts, new = [3, 40, 5], [10, 2, 12]
    table = kv_memory(model, prompts, new, [1, 8]).set_index("block_size", drop=False)
    token = kv_bytes_per_token(TINY, 4)
    assert table["kv_bytes"].iloc[0] == 3 * 42 * token  # contiguous: every row at the longest
    block_1 = table[table["block_size"] == 1].iloc[0]
    assert block_1["waste"] == 0 and block_1["kv_bytes"] == block_1["peak_token_bytes"]
    assert table["peak_token_bytes"].iloc[0] <= (13 + 42 + 17) * token
    assert (table["vs_contiguous"].iloc[1:] < 1).all()
    assert (table["pool_bytes"] >= table["kv_bytes"]).all()
    with pytest.raises(ValueError, match="block_sizes must be a non-empty list"):
        kv_memory(model, prompts, new, [])


def test_fixed_shapes_are_traced_once_and_growing_ones_again():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    table = count_compilations(model, batch=2, context=4, calls=3)
    graphs = table.groupby("shapes")["graphs"].max()
    assert graphs["fixed"] == 1 and graphs["growing"] > 1


def test_rotary_and_sampling_comparisons_report_correctness_and_bytes():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    rotary = compare_rotary_tables(model, 2, 8, rounds=2, warmup=0)
    assert rotary.details["max_abs_diff"] < 1e-5
    # 2 rounds give a 50% interval: below the 95% a verdict needs, whatever the times
    assert rotary.verdict == "inconclusive" and "not established" in rotary.sentence()
    sampling = compare_sampling_place(model, 2, 8, rounds=2, warmup=0).details
    assert sampling["same_ids"]
    assert sampling["device_bytes_per_token"] == 8  # one int64 id
    assert sampling["host_bytes_per_token"] == TINY.vocab_size * 4  # float32 logits


def test_copy_bandwidth_counts_read_and_write():
    result = measure_copy_bandwidth(torch.device("cpu"), size_bytes=2**20, warmup=0, steps=2)
    assert result.size_bytes == 2**20
    assert result.bytes_per_s == pytest.approx(2 * 2**20 / result.best_s)  # a peak: the best
    assert result.median_bytes_per_s <= result.bytes_per_s
    with pytest.raises(ValueError, match="size_bytes must be at least 4"):
        measure_copy_bandwidth(torch.device("cpu"), size_bytes=2)


def test_timed_steps_refuse_a_context_the_model_does_not_have():
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    with pytest.raises(ValueError, match=r"context must be in 1 \.\. 63 .*got 64"):
        throughput_by_batch(model, [1], 64, 1e10, 1e11)
    with pytest.raises(ValueError, match="prompt_len must be in 1 .. 63"):
        prefill_vs_decode(model, 0)
    with pytest.raises(ValueError, match="batch_sizes must list at least one"):
        throughput_by_batch(model, [], 8, 1e10, 1e11)
    with pytest.raises(ValueError, match="compiled must list True and/or False"):
        throughput_by_batch(model, [1], 8, 1e10, 1e11, compiled=())
    # each frozen step is one more graph of one function: beyond dynamo's limit, refused
    many = list(range(1, torch._dynamo.config.recompile_limit + 2))
    with pytest.raises(ValueError, match="freeze compiles a graph per batch size, at most"):
        throughput_by_batch(model, many, 8, 1e10, 1e11, compiled=(True,), freeze=True)


def test_throughput_and_roofline_from_a_planted_time_and_the_models_own_tensors(monkeypatch):
    """Every step takes 20 ms (planted), so tokens/s must be batch / 0.02; the bounds are
    counted here from the model's own weight tensors, not with
    perflab.lessons.nb10_decoding.costs."""
    import perflab.lessons.nb10_decoding.roofline as roofline
    from perflab.measure.timer import Timing

    monkeypatch.setattr(
        roofline, "time_fn", lambda fn, warmup, steps, device: Timing((0.02,) * steps, warmup)
    )
    model = inference_model(TINY, torch.device("cpu"), torch.float32)
    table = throughput_by_batch(
        model, [1, 3], 8, bandwidth=1e10, peak_flops=1e11, warmup=0, steps=3
    ).set_index("batch")
    embedding = TINY.vocab_size * TINY.d_model
    weights = sum(p.numel() for p in model.parameters() if p.ndim == 2) - embedding
    if model.lm_head.weight is model.embedding.weight:  # tied: the head reads it once more
        weights += embedding
    kv_per_token = 2 * TINY.num_layers * TINY.d_model * 4
    for batch in (1, 3):
        step_bytes = 4 * weights + batch * (8 + 1) * kv_per_token
        flops = 2 * weights + 4 * 8 * TINY.d_model * TINY.num_layers
        roofline = min(batch * 1e10 / step_bytes, 1e11 / flops)
        row = table.loc[batch]
        assert row["tokens_per_s"] == pytest.approx(batch / 0.02)
        assert row["roofline_tokens_per_s"] == pytest.approx(roofline)
        assert row["fraction_of_roofline"] == pytest.approx(batch / 0.02 / roofline)
        assert not row["unstable"]


def test_compiled_static_step_against_eager_reports_its_compilation_and_agreement():
    model = inference_model(TINY, torch.device("cpu"), torch.float64)
    torch._dynamo.reset()  # nothing of this shape compiled before
    try:
        row = compile_static_step(model, 2, 9, rounds=2, warmup=0).as_row()
        again = compile_static_step(model, 2, 9, rounds=2, warmup=0).as_row()
    finally:
        torch._dynamo.reset()
    assert row["same_next_tokens"] and row["max_abs_diff"] < 1e-10
    assert row["graphs_compiled"] == 1 and again["graphs_compiled"] == 0  # the graph reused
    assert row["compile_s"] > 10 * row["median_b_s"]  # the first call compiles
    assert row["rounds"] == 2 and row["mode"] == "default"
    assert row["tokens_per_s_compiled"] == pytest.approx(2 / row["median_b_s"])
