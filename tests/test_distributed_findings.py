"""Notebook 08's checks and sentences (``perflab.findings.distributed``) on small frames made
by hand, or on the models they read: each states the numbers it was given, each branch taken,
and each check can say False."""

import json

import pandas as pd
import pytest

from perflab.distributed.calculators import H100_NODE, Workload
from perflab.distributed.comm_accounting import smaller_batch_options
from perflab.distributed.ffn_calcs import answers
from perflab.distributed.memory_per_rank import zero_communication
from perflab.findings import distributed as say
from perflab.implementations.model import get_preset

MiB = 2**20


def zero_memory_frame(shards=(600, 400)):
    return pd.DataFrame(
        {
            "rank": [0, 1],
            "parameters": [125_000, 125_000],
            "state_measured_sharded": list(shards),
            "state_computed_sharded": [600, 400],
            "state_measured_unsharded": [1000, 1000],
            "state_computed_unsharded": [1000, 1000],
        }
    )


def test_zero_parity_and_memory_checks_can_fail():
    zero = pd.DataFrame(
        {
            "optimizer": ["adamw", "adamw"],
            "rank": [0, 1],
            "groups": [2, 2],
            "max_param_diff": [0.0, 1e-6],
            "param_spread_across_ranks": [0.0, 0.0],
            "sharded_state_bytes": [5, 5],
            "unsharded_state_bytes": [10, 10],
        }
    )
    checks = say.zero_parity_checks(zero)
    assert checks["matches_one_process"].tolist() == [True, False]
    assert say.zero_memory_lines(zero_memory_frame()) == [
        "measured == computed, sharded: True",
        "measured == computed, unsharded: True",
        "shards add up to the unsharded state: True",
    ]
    wrong = say.zero_memory_lines(zero_memory_frame(shards=(700, 400)))
    assert wrong[0].endswith("False") and wrong[2].endswith("False")
    assert say.zero_state_sentence(zero_memory_frame(), "toy", 2).endswith(
        "(0.60x; the ideal is 1/2)"
    )


def points_frame(other_grows=False, state_bytes=(1000, 600)):
    p = 125_000
    rows = []
    for rank in (0, 1):
        sharded = state_bytes[1] if rank == 0 else state_bytes[0] - state_bytes[1]
        for optimizer, state in (("AdamW", state_bytes[0]), ("sharded AdamW", sharded)):
            for i, point in enumerate(("after init", "before step", "after step")):
                rows.append(
                    {
                        "rank": rank,
                        "optimizer": optimizer,
                        "point": point,
                        "parameter_bytes": 4 * p,
                        "gradient_bytes": 0 if i == 0 else 4 * p,
                        "optimizer_state_bytes": state if i == 2 else 0,
                        "other_bytes": i if other_grows else 7,
                        "allocated_bytes": (4 + 4 * (i > 0)) * p + (state if i == 2 else 0),
                        "peak_bytes_so_far": 10 * p + (state if i == 2 else 0),
                    }
                )
    return pd.DataFrame(rows)


def test_memory_points_are_held_to_the_accounting():
    lines = say.memory_point_lines(points_frame(), zero_memory_frame())
    assert all(line.endswith("True") for line in lines), lines
    grows = say.memory_point_lines(points_frame(other_grows=True), zero_memory_frame())
    assert grows[-1].endswith("False") and grows[0].endswith("True")
    sentence = say.rank0_sentence(points_frame(state_bytes=(8 * MiB, 5 * MiB)), 2)
    assert "the peak so far drops by 3.0 MiB, the AdamW state it no longer keeps (3.0 MiB)" in (
        sentence
    )
    points = say.handout_points(10**9)
    assert points["sharded_AdamW_GB"].tolist() == [4.0, 8.0, 12.0]


def zero_steps(status=("ok", "ok"), sharded=(11.0, 12.0, 11.5, 12.5, 11.0, 12.0)):
    return pd.DataFrame(
        {
            "optimizer": ["adamw", "sharded-adamw"],
            "status": list(status),
            "round_ms": [json.dumps([10.0, 10.5, 10.2, 10.1, 10.3, 10.4]), json.dumps(sharded)],
        }
    )


def test_zero_step_findings_state_the_verdict_and_the_level():
    verdict, rounds = say.zero_step_findings(zero_steps(), "toy", 2)
    assert verdict.comparison.verdict == "slower" and verdict.sentence.endswith("(toy, 2 ranks)")
    assert rounds.sentence.startswith("6 paired rounds give a 96.8% interval of the time ratio")
    assert rounds.sentence.endswith("enough for a verdict: sharding makes the step slower.")
    few = zero_steps().assign(round_ms=[json.dumps([1.0, 1.1, 1.2])] * 2)
    (_, short) = say.zero_step_findings(few, "toy", 2)
    assert "below the 95% needed for a verdict" in short.sentence
    (failed,) = say.zero_step_findings(zero_steps(status=("ok", "error")), "toy", 2)
    assert failed.sentence == "no comparison: the ZeRO step timing failed (error)"


def prefetch_steps(status="ok"):
    base = [10.0, 10.5, 10.2, 10.1, 10.3, 10.4]
    return pd.DataFrame(
        {
            "prefetch": [2, 0, 1],  # in any order: compared by depth
            "status": ["ok", status, "ok"],
            "round_ms": [json.dumps([t * 0.8 for t in base]), json.dumps(base)]
            + [json.dumps([t * 0.8 for t in base])],
            "forward_in_time": [30, 0, 12],
            "forward_prefetched": [41, 0, 41],
            "backward_in_time": [20, 0, 5],
            "backward_prefetched": [40, 0, 40],
        }
    )


def test_prefetch_findings_compare_each_depth_with_the_one_before():
    one, two, arrivals = say.prefetch_findings(prefetch_steps(), "toy", 2)
    assert one.key == "FSDP prefetch 1 vs 0" and one.comparison.verdict == "faster"
    assert one.sentence.startswith("FSDP step, 1 module ahead against no prefetch: 1 module ahead")
    assert two.comparison.verdict == "same" and "2 modules ahead against 1 module ahead" in (
        two.sentence
    )
    assert arrivals.sentence.endswith(
        "1 module ahead: forward 12 of 41, backward 5 of 40; "
        "2 modules ahead: forward 30 of 41, backward 20 of 40"
    )
    (failed,) = say.prefetch_findings(prefetch_steps(status="error"), "toy", 2)
    assert failed.sentence == "no comparison: a timing failed (error)"


def test_volume_fsdp_and_gather_sentences():
    volume = zero_communication(4 * 1000.0, 2)
    assert say.volume_sentence(volume, 2).startswith(
        "per step this wrapper sends 1.50x the bytes of plain data parallelism, ZeRO-1 1.00x"
    )
    fsdp = pd.DataFrame(
        {
            "compute_dtype": ["float32", "float16"],
            "rank": [0, 0],
            "max_param_diff": [1e-7, 2e-4],
            "replicated_grad_spread": [0.0, 0.0],
            "backward_gathers": [3, 3],
            "full_weights_kept_for_backward": [0, 1],
            "grads_fp32_shard_shaped": [True, True],
            "names_complete": [True, True],
        }
    )
    checks = say.fsdp_parity_checks(fsdp)
    assert checks["within_tolerance"].tolist() == [True, False]
    assert checks["none_kept_for_backward"].tolist() == [True, False]
    memory = pd.DataFrame(
        {
            "param_bytes_measured": [2 * MiB, 2 * MiB],
            "param_bytes_computed": [2 * MiB, 2 * MiB],
            "param_bytes_replicated": [4 * MiB, 4 * MiB],
            "state_bytes_measured": [1, 1],
            "state_bytes_computed": [1, 2],
        }
    )
    params, state, ratio = say.fsdp_memory_lines(memory, 2)
    assert params.endswith("True") and state.endswith("False")
    assert (
        ratio
        == "parameter bytes per rank / full replication: 0.500 on 2 ranks (2.00 MiB vs 4.00 MiB)"
    )


@pytest.mark.parametrize(
    "ready, gather_ms, why",
    [
        (4, 1.0, "every prefetched gather was in time."),
        (2, 3.0, "which modules waited, and why, this summary does not say"),
        (2, 1.0, "which modules waited, and why, this summary does not say"),
    ],
)
def test_gather_sentence_counts_late_gathers_and_names_no_unshown_cause(ready, gather_ms, why):
    stats = {
        "modules_gathering": 5,
        "prefetched": 4,
        "ready_in_time": ready,
        "late_wait_ms": 2.0,
        "first_wait_ms": 0.5,
        "forward_wall_ms": 20.0,
        "median_gather_ms": gather_ms,
        "median_forward_ms": 2.0,
    }
    sentence = say.gather_sentence(stats, "toy", 2, "cpu")
    assert why in sentence and f"{ready} of the 4 prefetched modules" in sentence
    assert "waited 2.0 ms in all (10% of the 20.0 ms forward)" in sentence


def test_calculator_and_ffn_sentences():
    work = Workload.from_config(get_preset("xl"), batch_size=256, seq_len=1024)
    assert len(say.example_estimates(work, H100_NODE)) == 4
    line = say.compute_bound_line("xl", work, H100_NODE, 1024)
    assert line.startswith("xl, batch 256 x 1024 tokens: largest compute-bound device count: dp ")
    ffn = answers()
    assert len(say.ffn_lines(ffn)) == len(ffn)
    bounds = say.ffn_bound_lines(ffn, H100_NODE)
    assert len(bounds) == len(say.largest_counts(ffn)) > 0
    assert all("(W = " in b for b in bounds)
    sentence = say.dp_bound_sentence(ffn, "xl", work, H100_NODE)
    assert "262,144 tokens per step" in sentence and "1.5x the compute" in sentence


def test_tp_backward_is_checked_against_autograd():
    assert say.tp_backward_matches_autograd(n_tp=3)
    assert say.tp_backward_matches_autograd(n_tp=4, seed=1)


def test_xxl_accounting_sentences():
    state, saved = say.xxl_state_lines()
    assert "total" in state.lower() and "B parameters; the FP32 state is" in saved
    fits = say.xxl_fsdp_fits([0, 4096])
    assert fits["min_N_FSDP"].iloc[0] <= fits["min_N_FSDP"].iloc[1]
    assert say.xxl_fits_sentence(fits).startswith(
        f"Without activations {fits['min_N_FSDP'].iloc[0]} v5p chips hold the state"
    )
    mesh = say.mesh_table()
    assert mesh["ring_factors"].tolist() == [False, True]
    assert "over the 64 chips; Y = 4 is well under" in say.mesh_sentence(mesh)
    options = smaller_batch_options()
    assert say.options_sentence(options).startswith(
        "Moving devices from FSDP to tensor parallelism (X 4, Y 16"
    )


def test_notebook_07_lines():
    allreduce = pd.DataFrame(
        {
            "world_size": [2, 4, 2],
            "size_mb": [100, 100, 1],
            "status": ["ok", "ok", "ok"],
            "busbw_gbps": [1.5, 1.25, 0.1],
            "algbw_gbps": [1.5, 0.8, 0.1],
        }
    )
    assert (
        say.busbw_line(allreduce) == "bus bandwidth at 100 MB: 2 ranks 1.50 GB/s, 4 ranks 1.25 GB/s"
    )
    largest, checks = say.ring_error_lines({2: 0.0, 4: 3e-12})
    assert largest == "largest difference from all_reduce: 2 ranks 0.0e+00, 4 ranks 3.0e-12"
    assert checks[1] == "4 ranks: the ring equals all_reduce within 1e-12: False"
    overlap = pd.DataFrame(
        {
            "variant": ["naive", "individual", "bucketed"],
            "share_during_backward": [0.0, 0.9, 0.5],
            "backward_ms": [100.0, 150.0, 120.0],
        }
    )
    assert say.overlap_line(overlap).startswith("naive: 0% of its all-reduce time overlaps")


def ring_frames(ratios=(1.0, 2.0), egress=(1.0, 1.1), at_bound=(False, True)):
    ring = pd.DataFrame(
        {
            "world_size": [2, 4],
            "size_mb": [64, 64],
            "status": ["ok", "ok"],
            "ring_over_all_reduce": list(ratios),
        }
    )
    fit = pd.DataFrame(
        {
            "world_size": [2, 4],
            "egress_gbps": list(egress),
            "r2": [0.99, 0.98],
            "latency_at_bound": list(at_bound),
            "points": [3, 3],
        }
    )
    return ring, fit


def test_ring_lines_say_whether_one_egress_describes_every_world_size():
    """Two models told apart: the ring's own (one W for every world size: the fits' egress)
    and all_reduce's against the textbook ring at that W (the measured ratio against N/2)."""
    ratio, egress, gloo, bound = say.ring_lines(*ring_frames())
    assert ratio.startswith("at 64 MB the alternate ring takes 1.00x all_reduce's time on 2 ranks")
    assert (
        "differ 1.10x: consistent with one W for the ring's times (the rule: within 25%" in egress
    )
    assert "1.00x the model's time on 2 ranks, 1.00x the model's time on 4 ranks" in gloo
    assert gloo.endswith("consistent with that ring (within 25%)")
    assert bound.startswith("N=4: the free line crossed below zero")
    # The ring fits one W; all_reduce on 4 ranks takes 1.5x the textbook ring's time.
    ring, egress, gloo = say.ring_lines(*ring_frames(ratios=(1.0, 4 / 3), at_bound=(False, False)))
    assert "consistent with one W" in egress and "1.50x the model's time on 4 ranks" in gloo
    assert "not that ring's time" in gloo
    # The ring's own egress differs by world size: its model misses, whatever all_reduce does.
    _, egress, gloo = say.ring_lines(*ring_frames(egress=(1.0, 2.0), at_bound=(False, False)))
    assert "differ 2.00x: one W does not describe the ring's times" in egress
    ring, fit = ring_frames()
    assert len(say.ring_lines(ring, fit.iloc[:1])) == 2  # no egress line from one world size
    # the ring failed at the largest size: its ratios come from the largest size that ran
    failed = pd.concat([ring, ring.assign(size_mb=128, status="error")], ignore_index=True)
    assert say.ring_lines(failed, fit)[0].startswith("at 64 MB the alternate ring takes")
    assert say.ring_lines(ring.assign(status="error"), fit) == [
        "the alternate ring's timing failed at every size: nothing to compare"
    ]


def test_bucket_table_and_sentence():
    steps = pd.DataFrame(
        {
            "variant": ["flat", "bucketed", "bucketed"],
            "bucket_size_mb": [0.0, 1.0, 25.0],
            "step_ms": [100.0, 90.0, 101.0],
            "sync_ms": [30.0, 12.0, 29.0],
            "buckets": [1, 8, 1],
        }
    )
    against_flat = pd.DataFrame(
        {
            "b": ["bucketed 1 MB", "bucketed 25 MB"],
            "ratio_b_over_a": [0.9, 1.01],
            "verdict": ["faster", "same"],
        }
    )
    table = say.bucket_table(steps, against_flat)
    assert table["vs_flat"].tolist() == [0.9, 1.01]
    overlap = pd.DataFrame(
        {"variant": ["naive", "individual", "bucketed"], "backward_ms": [50.0, 70.0, 60.0]}
    )
    sentence = say.bucket_sentence(steps, table, overlap)
    assert sentence.startswith("against flat: 1 of 2 bucket sizes faster, 0 slower, 1 the same")
    assert "the two medians differ by 18 ms (18% of the step; medians, no interval)" in sentence


def test_overhead_lines_for_a_good_a_loose_and_no_fit():
    fit = {
        "valid": True,
        "per_call_ms": 0.5,
        "w_gbps": 2.0,
        "r2": 0.95,
        "distinct_bucket_counts": 5,
        "best_buckets": 4.0,
        "best_bucket_mb": 6.25,
        "gradient_bytes": 25e6,
    }
    allreduce = pd.DataFrame(
        {"world_size": [2, 2], "size_mb": [1, 25], "status": ["ok", "ok"], "algbw_gbps": [0.5, 1.0]}
    )
    _, model, against, trust = say.overhead_lines(fit, allreduce, 2)
    assert model.startswith("o = 0.50 ms per call, w = 2.00 GB/s (R^2 0.95 over 5 bucket counts)")
    assert against.startswith(
        "the fitted w is 2.00x the all-reduce bandwidth measured in section 2 at 25 MB"
    )
    assert trust == "a fit to trust"
    loose = say.overhead_lines({**fit, "r2": 0.5}, allreduce.iloc[:0], 2)
    assert len(loose) == 3 and loose[-1].startswith("too few bucket counts")
    assert say.overhead_lines({"valid": False}, allreduce, 2)[-1].startswith("no usable fit")


def test_ddp_parity_checks_catch_the_unsynchronised_variant():
    parity = pd.DataFrame(
        {
            "model": ["toy", "toy"],
            "variant": ["flat", "none"],
            "max_param_diff": [0.0, 0.3],
            "grad_spread_across_ranks": [0.0, 0.2],
            "grads_match_params": [True, False],
            "frozen_untouched": [True, True],
        }
    )
    checks = say.ddp_parity_checks(parity)
    assert checks["matches_one_process"].tolist() == [True, False]
    assert checks["same_grads_on_all_ranks"].tolist() == [True, False]
