"""The step model's counts (perflab.lessons.nb09_training_step.step_model): operators counted on
``meta`` against the closed forms the model's shapes give, and each rung moving the step the way its
change must."""

import dataclasses

import pandas as pd
import pytest
import torch

from perflab.implementations.model import ModelConfig
from perflab.lessons.nb09_training_step.step_model import (
    B200,
    Efficiency,
    StepPlan,
    adamw_ops,
    block_ops,
    count,
    flash_attention_work,
    head_ops,
    naive_attention_ops,
    price_rungs,
    step_ops,
    time_by_part,
)

CONFIG = ModelConfig(
    "odd", d_model=96, d_ff=200, num_layers=3, num_heads=3, vocab_size=1000, context_length=512
)
BF16 = torch.bfloat16


def test_counter_counts_a_matmul_and_no_views():
    a = torch.empty(7, 5, dtype=BF16, device="meta")
    b = torch.empty(5, 3, dtype=BF16, device="meta")
    ops = count(lambda counter: (a @ b.T.T).t().contiguous()).set_index("op")
    assert ops.loc["aten.mm", "flops"] == 2 * 7 * 5 * 3
    assert ops.loc["aten.mm", "bytes"] == (7 * 5 + 5 * 3 + 7 * 3) * 2
    assert ops.loc["aten.clone", "bytes"] == 2 * 7 * 3 * 2  # the transpose itself is free
    assert "aten.t" not in ops.index and "aten.transpose" not in ops.index


def test_in_place_matmul_has_its_twins_flops():
    out = torch.empty(4, 6, dtype=torch.float32, device="meta")
    a = torch.empty(4, 9, dtype=torch.float32, device="meta")
    b = torch.empty(9, 6, dtype=torch.float32, device="meta")
    ops = count(lambda counter: out.addmm_(a, b)).set_index("op")
    assert ops.loc["aten.addmm_", "flops"] == 2 * 4 * 9 * 6


@pytest.mark.parametrize("seq_len", [1, 17, 64])
def test_block_matmuls_are_six_flops_per_parameter_and_token(seq_len):
    batch = 2
    per_block = 4 * CONFIG.d_model**2 + 3 * CONFIG.d_model * CONFIG.d_ff
    tokens = batch * seq_len
    assert block_ops(CONFIG, batch, seq_len, BF16)["flops"].sum() == 6 * per_block * tokens
    forward = block_ops(CONFIG, batch, seq_len, BF16, forward_only=True)
    assert forward["flops"].sum() == 2 * per_block * tokens


@pytest.mark.parametrize("seq_len", [1, 33, 128])
def test_flash_forward_is_the_causal_share_of_naive_matmuls(seq_len):
    naive = naive_attention_ops(CONFIG, 2, seq_len, BF16, forward_only=True)
    flash = flash_attention_work(CONFIG, 2, seq_len, BF16, forward_only=True)
    causal_share = (seq_len + 1) / (2 * seq_len)
    assert flash["flops"].sum() == pytest.approx(naive["flops"].sum() * causal_share)
    both = flash_attention_work(CONFIG, 2, seq_len, BF16).set_index("op")["flops"]
    assert both["flash backward"] == pytest.approx(2.5 * both["flash forward"])


def test_naive_attention_traffic_grows_with_the_square_of_the_sequence():
    short, long = (naive_attention_ops(CONFIG, 1, n, BF16)["bytes"].sum() for n in (128, 512))
    flash_short, flash_long = (
        flash_attention_work(CONFIG, 1, n, BF16)["bytes"].sum() for n in (128, 512)
    )
    assert long / short > 10  # ~16 for the score matrices, a little less with Q, K, V
    assert flash_long / flash_short == pytest.approx(4)


def test_fused_head_recomputes_the_logits_once():
    plain = head_ops(CONFIG, 2, 40, BF16, "plain")["flops"].sum()
    fused = head_ops(CONFIG, 2, 40, BF16, "fused", 16)["flops"].sum()
    assert plain == 6 * 80 * CONFIG.d_model * CONFIG.vocab_size
    assert fused == pytest.approx(plain * 4 / 3)


def test_fused_adamw_moves_fewer_bytes_than_the_for_loop():
    fused = adamw_ops(CONFIG, 2, BF16, "fused")["bytes"].sum()
    loop = adamw_ops(CONFIG, 2, BF16, "for-loop")["bytes"].sum()
    assert fused == 7 * 2 * CONFIG.num_parameters() / 2
    assert loop > 2 * fused
    assert adamw_ops(CONFIG, 1, BF16, "for-loop")["bytes"].sum() == pytest.approx(2 * loop)


def test_each_rung_moves_the_step_the_way_its_change_must():
    rungs = price_rungs(CONFIG, 4, 256, 2).set_index("rung")
    naive, flash = rungs.loc["naive (eager)"], rungs.loc["FlashAttention"]
    assert flash["TB_per_rank"] < naive["TB_per_rank"]
    assert flash["TFLOP_per_rank"] < naive["TFLOP_per_rank"]  # the causal half only
    compiled = rungs.loc["torch.compile (best case)"]
    assert compiled["step_s"] < rungs.loc["fused AdamW", "step_s"]
    # compile fuses memory-bound operators only: the matmuls' FLOPs stay, the bytes shrink
    assert compiled["TFLOP_per_rank"] == pytest.approx(rungs.loc["fused AdamW", "TFLOP_per_rank"])
    assert compiled["TB_per_rank"] < rungs.loc["fused AdamW", "TB_per_rank"]
    checkpointed = rungs.loc["checkpointing every block"]
    assert checkpointed["step_s"] > compiled["step_s"]
    speedups = rungs["speedup_over_previous"]
    assert speedups["checkpointing every block"] < 1 < speedups["FlashAttention"]
    # the rungs' speed-ups compound to the whole ladder's: naive time over the last rung's
    assert speedups.prod() == pytest.approx(naive["step_s"] / checkpointed["step_s"])


def test_grouped_query_attention_reads_keys_and_values_once_per_group():
    """FlashAttention's bytes are the sizes of the tensors it reads and writes: q and the
    output d_model wide, k and v as wide as the model's projection makes them (before
    ``repeat_kv``), each once in forward; in backward q, k, v, the output, its gradient and
    the gradients of q, k, v. Sizes taken from the model's own projection on ``meta``."""
    from dataclasses import replace

    from perflab.implementations.model import QKVProjection

    grouped = replace(CONFIG, num_heads=4, num_kv_heads=2, d_model=128)
    batch, seq_len = 2, 40
    with torch.device("meta"):
        projection = QKVProjection(grouped.d_model, grouped.kv_dim).to(BF16)
        q, k, v = projection(torch.empty(batch, seq_len, grouped.d_model, dtype=BF16))
    size = {name: t.numel() * t.element_size() for name, t in zip("qkv", (q, k, v), strict=True)}
    lse = batch * grouped.num_heads * seq_len * 4
    work = flash_attention_work(grouped, batch, seq_len, BF16).set_index("op")["bytes"]
    assert work["flash forward"] == 2 * size["q"] + size["k"] + size["v"] + lse
    assert work["flash backward"] == 4 * size["q"] + 2 * size["k"] + 2 * size["v"] + lse
    multi_head = flash_attention_work(replace(grouped, num_kv_heads=None), batch, seq_len, BF16)
    assert multi_head["bytes"].sum() > work.sum()


def test_the_step_is_priced_at_the_hgx_b200_datasheet_and_the_handouts_figure_apart():
    """The default GPU is the HGX B200 as its datasheet rates it (2.25 PFLOP/s dense bf16,
    7.7 TB/s); the handout's 2,500 TFLOP/s is the GB200's figure, kept apart, and prices a
    compute-bound step faster by the ratio of the two peaks."""
    from perflab.measure.hardware import GPUS, HANDOUT_B200

    assert B200 == GPUS["HGX B200"] and B200.bf16_flops < HANDOUT_B200.bf16_flops
    assert GPUS["GB200 (B200 in an NVL72)"].bf16_flops == HANDOUT_B200.bf16_flops
    plan = StepPlan("flash", "fused", "fused", compiled=True)
    datasheet = step_ops(CONFIG, plan, 2, 512, 1)
    handout = step_ops(CONFIG, plan, 2, 512, 1, HANDOUT_B200)
    compute_bound = ~datasheet["memory_bound"] & (datasheet["part"] != "communication")
    ratio = datasheet.loc[compute_bound, "time_s"] / handout.loc[compute_bound, "time_s"]
    assert ratio.to_numpy() == pytest.approx(2.5 / 2.25)


def test_checkpointing_adds_one_forward_of_the_blocks_and_attention():
    plan = StepPlan(attention="flash", head="fused", optimizer="fused")
    plain = step_ops(CONFIG, plan, 2, 64, 1)
    checkpointed = step_ops(
        CONFIG, StepPlan("flash", "fused", "fused", checkpointing=True), 2, 64, 1
    )
    per_block = 4 * CONFIG.d_model**2 + 3 * CONFIG.d_model * CONFIG.d_ff
    attention = flash_attention_work(CONFIG, 2, 64, BF16, forward_only=True)["flops"].sum()
    added = checkpointed["flops"].sum() - plain["flops"].sum()
    assert added == pytest.approx(CONFIG.num_layers * (2 * per_block * 128 + attention))


def test_time_is_each_operators_roofline():
    eff = Efficiency(matmul=0.5, memory=0.25)
    ops = step_ops(CONFIG, StepPlan(), 2, 32, 1, B200, eff)
    body = ops[ops["part"] != "communication"]
    expected = (body["flops"] / (0.5 * B200.bf16_flops)).where(
        ~body["memory_bound"], body["bytes"] / (0.25 * B200.hbm_bytes_per_s)
    )
    assert body["time_s"].to_numpy() == pytest.approx(expected.to_numpy())
    parts = time_by_part(ops).set_index("part")
    by_hand = ops.groupby("part")["time_s"].sum()
    assert parts["time_s"].to_dict() == pytest.approx(by_hand.to_dict())
    assert parts.loc["blocks", "share"] == pytest.approx(by_hand["blocks"] / ops["time_s"].sum())


def test_communication_counts_only_what_compute_cannot_hide():
    slow_link = dataclasses.replace(B200, name="slow", nvlink_bytes_per_s=1e3)
    ops = step_ops(CONFIG, StepPlan(), 2, 16, 2, slow_link).set_index("op")
    wire = 3 * 0.5 * CONFIG.num_parameters() * 2
    comm_s = wire / (0.8 * 1e3)
    compute_s = ops["time_s"].drop("FSDP collectives").sum()
    assert ops.loc["FSDP collectives", "time_s"] == pytest.approx(comm_s - compute_s)
    fast = step_ops(CONFIG, StepPlan(), 2, 16, 2).set_index("op")
    assert fast.loc["FSDP collectives", "time_s"] == 0


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Efficiency(matmul=0), "efficiency matmul must be in"),
        (lambda: Efficiency(link=1.5), "efficiency link must be in"),
        (lambda: StepPlan(attention="sdpa"), "unknown attention 'sdpa'; valid: naive, flash"),
        (lambda: StepPlan(optimizer="foreach"), "unknown optimizer 'foreach'"),
        (lambda: StepPlan(head_chunk=0), "head_chunk must be a positive"),
        (lambda: step_ops(CONFIG, StepPlan(), 3, 8, 2), "world size 2 must divide the batch"),
    ],
)
def test_bad_input_is_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_the_rungs_are_priced_on_each_gpu_and_read_back_in_findings():
    from perflab.lessons.nb09_training_step.step_model import price_rungs_at, rung_findings
    from perflab.measure.hardware import HANDOUT_B200

    wide = dataclasses.replace(CONFIG, d_model=2048, d_ff=8192, num_heads=16)  # compute-bound
    table = price_rungs_at(wide, 4, 1024, 2, [B200, HANDOUT_B200])
    assert list(dict.fromkeys(table["gpu"])) == [B200.name, HANDOUT_B200.name]
    datasheet, handout = (
        table[table["gpu"] == g.name]["step_s"].to_numpy() for g in (B200, HANDOUT_B200)
    )
    assert (handout <= datasheet).all() and (handout < datasheet).any()  # a higher peak
    first, second = rung_findings(table, wide)
    naive = datasheet[0]
    assert first.sentence.startswith(f"{B200.name}: the naive eager step {naive:.1f} s")
    assert first.comparison is None and second.key.endswith(HANDOUT_B200.name)


def test_the_collectives_are_said_to_hide_only_where_the_model_hides_them():
    from perflab.lessons.nb09_training_step.step_model import _collectives_clause

    hidden = pd.Series({"comm_hidden_s": 0.012, "comm_exposed_s": 0.0})
    assert _collectives_clause(hidden) == (
        "; FSDP's collectives (12 ms a step) hide behind compute in this model"
    )
    exposed = pd.Series({"comm_hidden_s": 0.012, "comm_exposed_s": 0.005})
    assert _collectives_clause(exposed) == (
        "; FSDP's collectives take 17 ms a step in this model, 5 ms of them beyond the compute "
        "they overlap"
    )
