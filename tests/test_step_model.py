"""The step model's counts (perflab.training.step_model): operators counted on ``meta`` against
the closed forms the model's shapes give, and each rung moving the step the way its change
must."""

import pytest
import torch

from perflab.model import ModelConfig
from perflab.training.step_model import (
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

CONFIG = ModelConfig("odd", d_model=96, d_ff=200, num_layers=3, num_heads=3, vocab_size=1000,
                     context_length=512)  # fmt: skip
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
    flash_short, flash_long = (flash_attention_work(CONFIG, 1, n, BF16)["bytes"].sum()
                               for n in (128, 512))  # fmt: skip
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
    assert compiled["TFLOP_per_rank"] == rungs.loc["fused AdamW", "TFLOP_per_rank"]
    checkpointed = rungs.loc["checkpointing every block"]
    assert checkpointed["step_s"] > compiled["step_s"]
    speedups = rungs["speedup_over_previous"]
    assert speedups.iloc[0] == 1
    assert (speedups.iloc[1:] == rungs["step_s"].shift().iloc[1:] / rungs["step_s"].iloc[1:]).all()
    assert speedups["checkpointing every block"] < 1 < speedups["FlashAttention"]


def test_checkpointing_adds_one_forward_of_the_blocks_and_attention():
    plan = StepPlan(attention="flash", head="fused", optimizer="fused")
    plain = step_ops(CONFIG, plan, 2, 64, 1)
    checkpointed = step_ops(CONFIG, StepPlan("flash", "fused", "fused", checkpointing=True),
                            2, 64, 1)  # fmt: skip
    per_block = 4 * CONFIG.d_model**2 + 3 * CONFIG.d_model * CONFIG.d_ff
    attention = flash_attention_work(CONFIG, 2, 64, BF16, forward_only=True)["flops"].sum()
    added = checkpointed["flops"].sum() - plain["flops"].sum()
    assert added == pytest.approx(CONFIG.num_layers * (2 * per_block * 128 + attention))


def test_time_is_each_operators_roofline():
    eff = Efficiency(matmul=0.5, memory=0.25)
    ops = step_ops(CONFIG, StepPlan(), 2, 32, 1, B200, eff)
    body = ops[ops["part"] != "communication"]
    expected = (body["flops"] / (0.5 * B200.peak_flops)).where(
        ~body["memory_bound"], body["bytes"] / (0.25 * B200.hbm_bytes_per_s)
    )
    assert body["time_s"].to_numpy() == pytest.approx(expected.to_numpy())
    parts = time_by_part(ops)
    assert parts["share"].sum() == pytest.approx(1)


def test_communication_counts_only_what_compute_cannot_hide():
    slow_link = B200.__class__("slow", B200.peak_flops, B200.hbm_bytes_per_s, 1e3, 1e9)
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
