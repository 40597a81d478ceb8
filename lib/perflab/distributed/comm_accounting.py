"""The 2025 handout's communication accounting (its section 2.4, "4D parallelism"), computed.

The model **XXL** is a stack of 126 blocks, each two linears d_model -> d_ff -> d_model
(16384 -> 53248 -> 16384) with nothing else: no activation function, attention, embedding or
output layer, no checkpointing. Activations and gradient communication are BF16; accumulated
gradients, master weights and AdamW state are FP32. The hardware of parts (b)-(c) is a TPU v5p
(95 GB, C = 4.6e14 bf16 FLOP/s, W_ici = 2 x 9e10 B/s per link, bidirectional).

Part (c) follows the TPU Scaling Book (Austin et al. 2025, part 5, "mixed FSDP and tensor
parallelism"): on an X x Y mesh the batch is split over X (FSDP) and d_ff over Y (tensor
parallelism). Per block, each device all-gathers its TP slice of both weights over X
(2 D F / Y bytes each, over M_X links), all-gathers its activations over Y before the first
matmul and reduce-scatters the second one's output over Y (B/X x D values each, over M_Y
links), and computes two matmuls of 2 (B/X) D (F/Y) FLOPs. Compute-bound means each
communication takes no longer than the compute it overlaps with. The Scaling Book drops the
ring's (n-1)/n factor (large meshes); ``ring=True`` keeps it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import sympy as sp

from perflab.measure.hardware import GPUS

D, F, L, C, W = sp.symbols("D D_FF L C W_ici", positive=True)
X, Y, M_X, M_Y, B_X = sp.symbols("X Y M_X M_Y B_X", positive=True)  # B_X = B / X tokens
P, A, N = sp.symbols("P A N_FSDP", positive=True)

FP32 = 4
BF16 = 2
ADAMW_MOMENTS = 2  # exp_avg and exp_avg_sq, FP32 each


@dataclass(frozen=True)
class DenseStack:
    """``num_blocks`` blocks of two bias-free linears d_model -> d_ff -> d_model."""

    name: str
    d_model: int
    d_ff: int
    num_blocks: int

    @property
    def parameters(self) -> int:
        return 2 * self.d_model * self.d_ff * self.num_blocks

    def saved_bytes_per_token(self, bytes_per_value: int = BF16) -> int:
        """Activations saved for backward, per token: each linear keeps its input (dW = in^T
        dout), so a block keeps x (d_model) and h = x W1 (d_ff); no activation function, so
        nothing else."""
        return bytes_per_value * (self.d_model + self.d_ff) * self.num_blocks


@dataclass(frozen=True)
class Accelerator:
    name: str
    memory_bytes: float
    flops_per_s: float = float("nan")
    link_bytes_per_s: float = float("nan")  # W_ici: one link, both directions


XXL = DenseStack("XXL", d_model=16384, d_ff=53248, num_blocks=126)
H100_80GB = Accelerator("H100 80GB", GPUS["H100 SXM5 80GB"].memory_bytes)
#: The leaderboard's GPU: an HGX B200 has 1,440 GB of GPU memory over 8 GPUs.
B200_180GB = Accelerator("B200 180GB", GPUS["HGX B200"].memory_bytes)
TPU_V5P = Accelerator("TPU v5p", 95e9, flops_per_s=4.6e14, link_bytes_per_s=2 * 9e10)
HANDOUT_MESH = {"X": 16, "Y": 4, "M_X": 2, "M_Y": 1}


def training_state_bytes(model: DenseStack) -> pd.DataFrame:
    """Part (a): FP32 master weights, accumulated gradients and AdamW's two moments."""
    p = model.parameters
    rows = [
        ("master weights (fp32)", FP32 * p),
        ("accumulated gradients (fp32)", FP32 * p),
        ("AdamW moments (fp32)", ADAMW_MOMENTS * FP32 * p),
    ]
    frame = pd.DataFrame(rows, columns=["what", "bytes"])
    total = pd.DataFrame([("total", frame["bytes"].sum())], columns=["what", "bytes"])
    return pd.concat([frame, total], ignore_index=True)


def devices_needed(bytes_: float, device: Accelerator) -> int:
    """How many ``device``s' memory ``bytes_`` takes, rounded up."""
    return math.ceil(bytes_ / device.memory_bytes)


def fsdp_memory_per_device() -> sp.Expr:
    """Part (b): bytes per device when the FP32 state (16 P bytes: weights, gradients, AdamW)
    and half the activations A (every second layer's) are sharded over N_FSDP devices and the
    other half is not: (16 P + A/2) / N_FSDP + A/2."""
    state = (2 + ADAMW_MOMENTS) * FP32 * P
    return (state + A / 2) / N + A / 2


def min_fsdp_devices(model: DenseStack, device: Accelerator, tokens: int) -> int | None:
    """Part (b): the smallest N_FSDP with ``fsdp_memory_per_device`` under ``device``'s memory,
    A the saved activations of ``tokens`` tokens; None when the unsharded half alone does not
    fit."""
    activations = model.saved_bytes_per_token() * tokens
    per_device = fsdp_memory_per_device().subs({P: model.parameters, A: activations})
    unsharded = activations / 2
    if unsharded >= device.memory_bytes:
        return None
    bound = sp.solve(sp.Eq(per_device, device.memory_bytes), N)[0]
    return math.ceil(float(bound))


def forward_block_times(ring: bool = False, weight_bytes: int = BF16) -> dict[str, sp.Expr]:
    """Part (c): one device's forward through one block on an X x Y mesh, as times in B_X
    (tokens per FSDP shard), D, D_FF, C, W_ici and the link counts: compute, the weight
    all-gathers over X, the activation all-gather and reduce-scatter over Y. ``weight_bytes``
    is the width weights are gathered in (2: bf16; 1: an fp8 or int8 copy)."""
    gx = (X - 1) / X if ring else 1
    gy = (Y - 1) / Y if ring else 1
    return {
        "compute": 2 * (2 * B_X * D * F / Y) / C,
        "fsdp_gathers": 2 * gx * weight_bytes * D * F / Y / (W * M_X),
        "tp_collectives": 2 * gy * BF16 * B_X * D / (W * M_Y),
    }


def compute_bound_conditions(ring: bool = False, weight_bytes: int = BF16) -> dict[str, sp.Expr]:
    """The smallest B_X with the weight gathers hidden behind compute, and the largest Y with
    the tensor-parallel collectives hidden (which does not depend on the batch)."""
    times = forward_block_times(ring, weight_bytes)
    b_min = sp.solve(sp.Eq(times["fsdp_gathers"], times["compute"]), B_X)[0]
    tp = sp.simplify(times["tp_collectives"] / times["compute"])  # < 1 when hidden
    y_max = sp.solve(sp.Eq(tp, 1), Y)
    return {"min B/X": sp.simplify(b_min), "max Y": sp.simplify(y_max[0]) if y_max else None}


def mesh_batch(
    model: DenseStack, device: Accelerator, mesh: dict, ring: bool = False, weight_bytes: int = BF16
) -> dict:
    """Part (c) in numbers: the smallest batch per FSDP shard (tokens each device computes on;
    the Y devices of a tensor-parallel group share them), the share of the batch each device
    holds (B / (X Y)), the total batch B, and whether Y keeps the TP collectives hidden."""
    values = {
        D: model.d_model,
        F: model.d_ff,
        C: device.flops_per_s,
        W: device.link_bytes_per_s,
        X: mesh["X"],
        Y: mesh["Y"],
        M_X: mesh["M_X"],
        M_Y: mesh["M_Y"],
    }
    conditions = compute_bound_conditions(ring, weight_bytes)
    per_shard = float(conditions["min B/X"].subs(values))
    y_max = float(conditions["max Y"].subs(values))
    return {
        "X": mesh["X"],
        "Y": mesh["Y"],
        "M_X": mesh["M_X"],
        "M_Y": mesh["M_Y"],
        "weight_bytes": weight_bytes,
        "ring_factors": ring,
        "min_tokens_per_fsdp_shard": per_shard,
        "min_tokens_per_device": per_shard / mesh["Y"],
        "min_total_batch": per_shard * mesh["X"],
        "max_Y_tp_hidden": y_max,
        "tp_hidden": mesh["Y"] <= y_max,
    }


def smaller_batch_options(model: DenseStack = XXL, device: Accelerator = TPU_V5P) -> pd.DataFrame:
    """Part (d): the handout's mesh and ways to stay compute-bound at a smaller total batch,
    each computed with the same model: move devices from FSDP to tensor parallelism (X Y
    fixed), gather the weights in 8 bits, both."""
    base = HANDOUT_MESH
    options = [
        ("the handout's mesh (X 16, Y 4), bf16 gathers", base, BF16),
        ("more tensor parallelism: X 4, Y 16", {**base, "X": 4, "Y": 16}, BF16),
        ("fp8/int8 weight gathers", base, 1),
        ("X 4, Y 16 and fp8 gathers", {**base, "X": 4, "Y": 16}, 1),
    ]
    rows = []
    for name, mesh, width in options:
        rows.append({"option": name, **mesh_batch(model, device, mesh, weight_bytes=width)})
    return pd.DataFrame(rows)
