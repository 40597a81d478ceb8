"""Parallelism calculators against worked examples done by hand."""

import pytest

from perflab.distributed.calculators import (
    H100_NODE,
    STRATEGIES,
    Hardware,
    Workload,
    estimate,
    max_compute_bound_devices,
    max_devices_table,
    train_flops,
)
from perflab.implementations.model import get_preset

# N = 1e9 parameters, 10 layers of width 1000, 16 heads; 64 sequences of 100 tokens; bf16 on
# the wire; 1 TFLOP/s devices, 1 GB/s between ranks, 10 GB/s within a TP group.
WORK = Workload(
    n_params=1e9,
    num_layers=10,
    d_model=1000,
    num_heads=16,
    batch_size=64,
    seq_len=100,
    bytes_per_element=2,
)
HW = Hardware("worked example", flops_per_s=1e12, bandwidth=1e9, tp_bandwidth=1e10)


def test_flops_are_six_n_t():
    assert train_flops(1e9, 6400) == 3.84e13


def test_data_parallel_worked_example():
    # The all-reduce hides behind the backward only (4 N T of the 6 N T):
    # 7 devices: backward = 4e9 * 6400 / (7 * 1e12) = 3.6571 s >= comm 2 * 6/7 * 2 = 3.4286 s
    # 8 devices: backward 3.2 s < comm 2 * 7/8 * 2 = 3.5 s
    step = estimate("dp", WORK, HW, devices=7)
    assert step.compute_s == pytest.approx(6e9 * 6400 / 7e12)
    assert step.backward_compute_s == pytest.approx(4e9 * 6400 / 7e12)
    assert step.forward_comm_s == 0
    assert step.backward_comm_s == step.comm_s == pytest.approx(24 / 7)
    assert step.comm_over_compute == pytest.approx((24 / 7) / (4e9 * 6400 / 7e12))
    assert step.compute_bound
    assert not estimate("dp", WORK, HW, devices=8).compute_bound
    # n - 1 <= 2 * 6400 * 1e9 / (1e12 * 2) = 6.4  ->  n = 7, as the FFN derivation's
    # 1 + B W / C with b = 2 bytes
    assert max_compute_bound_devices("dp", WORK, HW) == 7


def test_data_parallel_over_the_whole_step_is_the_optimistic_bound():
    # compute = 6e9 * 6400 / (10 * 1e12) = 3.84 s; comm = 2 * 9/10 * 1e9 * 2 B / 1e9 = 3.6 s
    step = estimate("dp", WORK, HW, devices=10, overlap="step")
    assert step.compute_s == pytest.approx(3.84)
    assert step.comm_s == pytest.approx(3.6)
    assert step.compute_bound
    assert not estimate("dp", WORK, HW, devices=10).compute_bound  # the backward alone: no
    # 11 devices: compute 3.4909 s < comm 2 * 10/11 * 2 = 3.6364 s
    assert not estimate("dp", WORK, HW, devices=11, overlap="step").compute_bound
    # n - 1 <= 3 * 6400 * 1e9 / (1e12 * 2) = 9.6  ->  n = 10, 1.5x the backward-only count - 1
    assert max_compute_bound_devices("dp", WORK, HW, overlap="step") == 10


def test_fsdp_worked_example():
    # comm = 3 * 6/7 * 2 s = 5.1429 s; compute at 7 devices = 5.4857 s; at 8: 4.8 s < 5.25 s
    assert estimate("fsdp", WORK, HW, devices=7).comm_s == pytest.approx(36 / 7)
    assert estimate("fsdp", WORK, HW, devices=7).compute_bound
    assert not estimate("fsdp", WORK, HW, devices=8).compute_bound
    assert max_compute_bound_devices("fsdp", WORK, HW) == 7  # n - 1 <= 6.4
    # each pass alone: forward 2e9 * 6400 / 7e12 = 1.8286 s >= gather 6/7 * 2 = 1.7143 s,
    # backward twice both: the same bound whether it hides per pass or behind the whole step
    step = estimate("fsdp", WORK, HW, devices=7)
    assert step.forward_comm_s == pytest.approx(12 / 7)
    assert step.backward_comm_s == pytest.approx(24 / 7)
    assert max_compute_bound_devices("fsdp", WORK, HW, overlap="step") == 7
    assert estimate("fsdp", WORK, HW, devices=7, overlap="step").compute_bound
    assert not estimate("fsdp", WORK, HW, devices=8, overlap="step").compute_bound


def test_tensor_parallel_worked_example():
    # comm = 8 * 10 layers * (t-1)/t * 6400 tokens * 1000 * 2 B / 1e10 = 0.1024 * (t-1)/t s,
    # half in each pass; compute = 38.4 / t s, a third in forward. The forward binds:
    # t - 1 <= 2e9 * 1e10 / (4 * 10 * 1000 * 2 * 1e12) = 250, heads cap 16
    step = estimate("tp", WORK, HW, devices=4)
    assert step.comm_s == pytest.approx(0.1024 * 3 / 4)
    assert step.forward_comm_s == step.backward_comm_s == pytest.approx(0.0512 * 3 / 4)
    assert step.compute_s == pytest.approx(9.6)
    assert step.forward_compute_s == pytest.approx(3.2)
    assert max_compute_bound_devices("tp", WORK, HW) == 16
    slow_link = Hardware("slow NVLink", 1e12, 1e9, 1e7)  # t - 1 <= 0.25 -> 1
    assert max_compute_bound_devices("tp", WORK, slow_link) == 1
    # t = 2 on a link of 2.5e7: forward 6e9 * 6400 / 3 / 2e12 = 6.4 s against 4 * 10 * 1/2
    # * 6400 * 1000 * 2 / 2.5e7 = 10.24 s: bound neither per pass nor (8 L: 20.48 s vs 19.2 s)
    # over the step; on 5e7, 5.12 s per pass (bound) and 10.24 s over the step
    assert not estimate("tp", WORK, Hardware("l", 1e12, 1e9, 2.5e7), 2).compute_bound
    assert estimate("tp", WORK, Hardware("l", 1e12, 1e9, 5e7), 2).compute_bound


def test_two_d_is_the_product_and_matches_the_estimate():
    assert max_compute_bound_devices("fsdp+tp", WORK, HW) == 7 * 16
    step = estimate("fsdp+tp", WORK, HW, devices=7, tp_degree=16)
    assert step.devices == 112 and step.compute_bound
    assert not estimate("fsdp+tp", WORK, HW, devices=8, tp_degree=16).compute_bound


@pytest.mark.parametrize("overlap", ["pass", "step"])
@pytest.mark.parametrize("strategy", ["dp", "fsdp"])
@pytest.mark.parametrize("batch_size", [1, 8, 64, 512, 4096])
def test_closed_form_matches_a_search_over_the_estimate(strategy, batch_size, overlap):
    work = Workload.from_config(get_preset("xl"), batch_size, 1024)
    searched = max(
        n
        for n in range(1, batch_size + 1)
        if estimate(strategy, work, H100_NODE, n, overlap=overlap).compute_bound
    )
    assert max_compute_bound_devices(strategy, work, H100_NODE, overlap) == searched


@pytest.mark.parametrize("overlap", ["pass", "step"])
@pytest.mark.parametrize("preset", ["small", "xl", "10B"])
def test_tensor_parallel_closed_form_matches_a_search(preset, overlap):
    config = get_preset(preset)
    work = Workload.from_config(config, 8, 1024)
    searched = max(
        t
        for t in range(1, config.num_heads + 1)
        if estimate("tp", work, H100_NODE, t, overlap=overlap).compute_bound
    )
    assert max_compute_bound_devices("tp", work, H100_NODE, overlap) == searched


def test_data_parallel_matches_the_ffn_derivation():
    # ffn_calcs: DP's all-reduce against the backward, N_DP = 1 + B W / C (2-byte elements)
    from perflab.distributed import ffn_calcs as fc

    for tokens in (1024, 262144, 2**20):
        work = Workload(3 * 2560 * 10240, 1, 2560, 32, tokens, 1, bytes_per_element=2)
        ffn = fc.largest_count(fc.strategies()["DP"]["backward"], fc.N_DP)
        bound = float(
            ffn.subs({fc.B: tokens, fc.W: H100_NODE.bandwidth, fc.C: H100_NODE.flops_per_s})
        )
        assert max_compute_bound_devices("dp", work, H100_NODE) == min(tokens, int(bound))


def test_table_has_every_strategy_and_batch():
    table = max_devices_table(get_preset("small"), H100_NODE, [8, 64], seq_len=512)
    assert len(table) == 2 * len(STRATEGIES)
    assert (table["max_devices"] >= 1).all()


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown strategy 'zero'; valid: dp, fsdp, tp, fsdp\\+tp"):
        estimate("zero", WORK, HW, 2)
    with pytest.raises(ValueError, match="devices must be a positive integer"):
        estimate("dp", WORK, HW, 0)
    with pytest.raises(ValueError, match="no tensor-parallel degree"):
        estimate("dp", WORK, HW, 2, tp_degree=2)
    with pytest.raises(ValueError, match="unknown overlap 'forward'; valid: pass, step"):
        max_compute_bound_devices("dp", WORK, HW, overlap="forward")
