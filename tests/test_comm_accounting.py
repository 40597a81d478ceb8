"""The 2025 communication accounting (``perflab.distributed.comm_accounting``) against real
models: parameters counted on the meta device, saved activations counted by autograd's hooks,
FLOPs by FlopCounterMode on one device's shards, and the solved bounds against the inequalities
they come from."""

import math

import pytest
import sympy as sp
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from perflab.distributed import comm_accounting as ca
from perflab.memory.saved import saved_bytes, saved_tensors


def _stack(model: ca.DenseStack, **factory) -> nn.Sequential:
    layers = []
    for _ in range(model.num_blocks):
        layers += [
            nn.Linear(model.d_model, model.d_ff, bias=False, **factory),
            nn.Linear(model.d_ff, model.d_model, bias=False, **factory),
        ]
    return nn.Sequential(*layers)


def test_xxl_parameters_counted_on_the_meta_device():
    counted = sum(p.numel() for p in _stack(ca.XXL, device="meta").parameters())
    assert ca.XXL.parameters == counted == 219_848_638_464


def test_training_state_is_sixteen_bytes_per_parameter():
    table = ca.training_state_bytes(ca.XXL).set_index("what")["bytes"]
    assert table["total"] == 16 * ca.XXL.parameters == table.drop("total").sum()
    assert ca.devices_needed(table["total"], ca.H100_80GB) == 44  # 3.52 TB / 80 GB = 43.97


def test_saved_bytes_per_token_match_what_autograd_saves():
    small = ca.DenseStack("small", d_model=8, d_ff=24, num_blocks=3)
    torch.manual_seed(0)
    stack = _stack(small, dtype=torch.bfloat16)
    tokens = 10
    x = torch.randn(tokens, small.d_model, dtype=torch.bfloat16, requires_grad=True)
    saved = saved_tensors(lambda: stack(x), stack.parameters())
    assert saved_bytes(saved) == small.saved_bytes_per_token() * tokens


@pytest.mark.parametrize("tokens", [0, 1024, 4096])
def test_min_fsdp_devices_is_the_first_count_that_fits(tokens):
    per_device = ca.fsdp_memory_per_device()
    values = {ca.P: ca.XXL.parameters, ca.A: ca.XXL.saved_bytes_per_token() * tokens}
    n = ca.min_fsdp_devices(ca.XXL, ca.TPU_V5P, tokens)
    fits = [
        float(per_device.subs(values | {ca.N: k})) <= ca.TPU_V5P.memory_bytes for k in (n - 1, n)
    ]
    assert fits == [False, True]
    assert float(per_device.subs(values | {ca.N: 1})) == 16 * ca.XXL.parameters + values[ca.A]


def test_min_fsdp_devices_is_none_when_the_unsharded_activations_do_not_fit():
    tokens = math.ceil(2 * ca.TPU_V5P.memory_bytes / ca.XXL.saved_bytes_per_token())
    assert ca.min_fsdp_devices(ca.XXL, ca.TPU_V5P, tokens) is None


def test_forward_compute_is_the_blocks_flops_split_over_the_mesh():
    """Per-device FLOPs x X Y = the FLOPs of the whole block on B = B_X X tokens."""
    d, f, b_x, x_size, y_size = 8, 12, 6, 4, 3
    block = _stack(ca.DenseStack("one", d, f, 1))
    with FlopCounterMode(display=False) as counter:
        block(torch.randn(b_x * x_size, d))
    compute = ca.forward_block_times()["compute"]
    per_device = compute.subs({ca.B_X: b_x, ca.D: d, ca.F: f, ca.Y: y_size, ca.C: 1})
    assert int(per_device) * x_size * y_size == counter.get_total_flops()


@pytest.mark.parametrize("ring", [False, True])
def test_the_batch_bound_is_where_the_gathers_stop_hiding(ring):
    values = {
        ca.D: 16384,
        ca.F: 53248,
        ca.C: 4.6e14,
        ca.W: 1.8e11,
        ca.X: 16,
        ca.Y: 4,
        ca.M_X: 2,
        ca.M_Y: 1,
    }
    times = {
        k: sp.lambdify(ca.B_X, v.subs(values)) for k, v in ca.forward_block_times(ring).items()
    }
    bound = float(ca.compute_bound_conditions(ring)["min B/X"].subs(values))
    assert times["fsdp_gathers"](bound * 0.99) > times["compute"](bound * 0.99)
    assert times["fsdp_gathers"](bound * 1.01) < times["compute"](bound * 1.01)


def test_handout_mesh_numbers():
    row = ca.mesh_batch(ca.XXL, ca.TPU_V5P, ca.HANDOUT_MESH)
    assert row["min_tokens_per_fsdp_shard"] == pytest.approx(4.6e14 / (2 * 1.8e11))
    assert row["min_total_batch"] == pytest.approx(16 * 4.6e14 / (2 * 1.8e11))
    assert row["max_Y_tp_hidden"] == pytest.approx(53248 * 1.8e11 / 4.6e14)
    assert row["tp_hidden"]


def test_every_smaller_batch_option_is_smaller_and_still_compute_bound():
    options = ca.smaller_batch_options().set_index("option")
    base = options["min_total_batch"].iloc[0]
    assert (options["min_total_batch"].iloc[1:] < base).all()
    assert options["tp_hidden"].all()
