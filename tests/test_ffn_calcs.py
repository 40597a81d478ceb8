"""The symbolic answers of ``perflab.distributed.ffn_calcs`` against real computations: FLOPs
counted by PyTorch's FlopCounterMode on one device's shards, the tensor-parallel backward
against autograd, and the solved device counts against the inequalities they come from."""

import numpy as np
import pytest
import sympy as sp
import torch
from torch.utils.flop_counter import FlopCounterMode

from perflab.distributed import ffn_calcs as fc

SIZES = {"B": 24, "D": 8, "F": 12}


def _ffn(x, w1, w2, w3):
    return (torch.nn.functional.silu(x @ w1) * (x @ w2)) @ w3


def _counted_flops(batch, d, hidden):
    """Forward and backward matmul FLOPs of the FFN on (batch, d) with a hidden width."""
    x = torch.randn(batch, d, requires_grad=True)
    w1, w2 = (torch.randn(d, hidden, requires_grad=True) for _ in range(2))
    w3 = torch.randn(hidden, d, requires_grad=True)
    with FlopCounterMode(display=False) as forward:
        y = _ffn(x, w1, w2, w3)
    with FlopCounterMode(display=False) as backward:
        y.backward(torch.randn_like(y))
    return forward.get_total_flops(), backward.get_total_flops()


def _value(expression, **counts):
    values = {fc.B: SIZES["B"], fc.D: SIZES["D"], fc.F: SIZES["F"]}
    values.update({getattr(fc, name): n for name, n in counts.items()})
    return int(expression.subs(values))


@pytest.mark.parametrize(
    "strategy, counts, local",
    [
        ("DP", {"N_DP": 4}, (6, 8, 12)),  # a quarter of the batch, whole weights
        ("FSDP", {"N_FSDP": 3}, (8, 8, 12)),  # a third of the batch, weights gathered
        ("TP", {"N_TP": 2}, (24, 8, 6)),  # the whole batch, half the hidden width
    ],
)
def test_flops_match_what_one_device_computes(strategy, counts, local):
    plans = fc.strategies()[strategy]
    forward, backward = _counted_flops(*local)
    assert _value(plans["forward"].flops(), **counts) == forward
    assert _value(plans["backward"].flops(), **counts) == backward


def test_fsdp_tp_forward_flops_match_the_local_ffn():
    forward, _ = _counted_flops(SIZES["B"] // 2, SIZES["D"], SIZES["F"] // 3)
    flops = fc.strategies()["FSDP x TP"]["forward"].flops()
    assert _value(flops, N_FSDP=2, N_TP=3) == forward


def test_tp_backward_equations_match_autograd():
    torch.manual_seed(0)
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    w1, w2 = (torch.randn(8, 12, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w3 = torch.randn(12, 8, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(5, 8, dtype=torch.float64)
    _ffn(x, w1, w2, w3).backward(dy)
    got = fc.tp_backward(x.detach(), w1.detach(), w2.detach(), w3.detach(), dy, n_tp=3)
    for mine, reference in zip(got, (w1.grad, w2.grad, w3.grad, x.grad), strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-12, atol=1e-12)


def test_largest_counts_sit_where_communication_meets_compute():
    for name, devices in (("DP", fc.N_DP), ("FSDP", fc.N_FSDP), ("TP", fc.N_TP)):
        for passage in fc.strategies()[name].values():
            if not passage.collectives:
                continue
            n = fc.largest_count(passage, devices)
            gap = (passage.comm_time() - passage.compute_time()).subs(devices, n)
            assert sp.simplify(gap) == 0
            more = (passage.comm_time() - passage.compute_time()).subs(devices, 2 * n)
            example = {fc.B: 64, fc.D: 1024, fc.F: 4096, fc.W: 10**11, fc.C: 10**15}
            assert more.subs(example) > 0  # beyond it, communication-bound
    assert (
        sp.simplify(
            fc.largest_count(fc.strategies()["DP"]["backward"], fc.N_DP) - (1 + fc.B * fc.W / fc.C)
        )
        == 0
    )


@pytest.mark.parametrize("batch", [256, 4096, 2**20])  # optimum on each piece of the answer
def test_shared_network_allows_fewer_devices_than_overlapping_axes(batch):
    example = {fc.B: batch, fc.F: 16384, fc.W: 4 * 10**11, fc.C: 10**15}
    overlap, shared = fc.largest_2d(True).subs(example), fc.largest_2d(False).subs(example)
    assert 1 <= shared <= overlap
    # brute force on a grid of admissible (N_FSDP, N_TP), each at least 1: none beats it
    forward = fc.strategies()["FSDP x TP"]["forward"]
    slack = sp.lambdify(
        (fc.N_FSDP, fc.N_TP),
        (forward.compute_time() - forward.comm_time(overlap=False)).subs(example | {fc.D: 1}),
    )
    alone = {
        n: float(fc.largest_count(fc.strategies()[k][d], n).subs(example))
        for k, d, n in (("FSDP", "forward", fc.N_FSDP), ("TP", "forward", fc.N_TP))
    }
    # no axis can go past its bound alone
    n_fsdp, n_tp = np.meshgrid(
        np.linspace(1, alone[fc.N_FSDP], 2001), np.linspace(1, alone[fc.N_TP], 2001)
    )
    feasible = slack(n_fsdp, n_tp) >= 0
    best = (n_fsdp * n_tp)[feasible].max()
    assert best <= float(shared) * (1 + 1e-9)
    assert best >= float(shared) * 0.97


def test_unknown_collective_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown collective 'broadcast'; valid: all_gather"):
        fc.ring_time("broadcast", fc.S, fc.N)
