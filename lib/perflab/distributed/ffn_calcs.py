"""The 2026 handout's "analysing parallelism strategies" problems, answered symbolically.

The setting (handout section 8; ``../shared/HANDOUT.md`` section 7): N devices, each with W
bytes/s of egress; ring collectives, where an all-gather or a reduce-scatter of S bytes takes
(N-1)/N S/W and an all-reduce 2(N-1)/N S/W. The FFN takes x (B, D) to y through W1, W2 (D, F)
and W3 (F, D), F = D_FF: x1 = x W1, x2 = x W2, z = f(x1) * x2, y = z W3. Weights and
activations are FP16 (2 bytes); only matmul FLOPs count, (A, B)(B, C) = 2ABC; a device does C
FLOP/s; compute and communication overlap, so a pass is communication-bound when its
communication takes longer than its compute.

Which compute hides which communication: each pass's collectives overlap that pass's compute
only. Data parallelism's gradient all-reduce therefore runs against the backward alone (the
handout asks DP about the backward), giving N_DP = 1 + B W / C; against the whole step's
forward and backward it would be 1 + 3 B W / (2 C), but the gradients do not exist before
backward and the optimizer step waits for them. ``perflab.distributed.calculators`` counts DP
the same way (``overlap="pass"``).

Each strategy is written down as what one device does in a pass: the shapes of its matmuls and
the collectives it joins (bytes, group size). FLOPs and times are derived from those lists with
sympy, never typed in, and the largest device count is solved for. ``tests/test_ffn_calcs.py``
counts the same FLOPs with PyTorch's ``FlopCounterMode`` on real tensors, and checks the
tensor-parallel backward equations (``TP_BACKWARD``, ``tp_backward``) against autograd.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import sympy as sp
import torch

B, D, F, W, C, S = sp.symbols("B D D_FF W C S", positive=True)
N, N_DP, N_FSDP, N_TP = sp.symbols("N N_DP N_FSDP N_TP", positive=True)
BYTES = 2  # FP16 weights and activations
RING_FACTOR = {
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_reduce": lambda n: 2 * (n - 1) / n,
}


def ring_time(collective: str, size_bytes, group) -> sp.Expr:
    """Time of a ring ``collective`` over ``size_bytes`` (the full tensor) among ``group``
    devices: (N-1)/N S/W for all-gather and reduce-scatter, 2(N-1)/N S/W for all-reduce."""
    if collective not in RING_FACTOR:
        raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(RING_FACTOR)}")
    return RING_FACTOR[collective](group) * size_bytes / W


def ffn_matmuls(batch, d_in, hidden, d_out, backward: bool) -> list[tuple]:
    """The (A, B, C) shapes of the FFN's matmuls on one device, for a (batch, d_in) input,
    W1, W2 (d_in, hidden) and W3 (hidden, d_out) as that device holds them.

    Forward: x W1, x W2, z W3. Backward: dz = dy W3^T, dW3 = z^T dy, dx1 W1^T and dx2 W2^T
    (summed into dx), dW2 = x^T dx2, dW1 = x^T dx1 (the elementwise products cost nothing)."""
    if not backward:
        return [(batch, d_in, hidden), (batch, d_in, hidden), (batch, hidden, d_out)]
    return [
        (batch, d_out, hidden),
        (hidden, batch, d_out),
        (batch, hidden, d_in),
        (batch, hidden, d_in),
        (d_in, batch, hidden),
        (d_in, batch, hidden),
    ]


@dataclass(frozen=True)
class Pass:
    """One device's forward or backward pass: its matmuls and its collectives
    (kind, bytes of the full tensor, group size)."""

    matmuls: tuple
    collectives: tuple = ()

    def flops(self) -> sp.Expr:
        return sp.factor(sum(2 * a * b * c for a, b, c in self.matmuls))

    def compute_time(self) -> sp.Expr:
        return self.flops() / C

    def comm_time(self, overlap: bool = True) -> sp.Expr:
        """Collectives on the same group run one after another; different groups (the two
        axes of a 2D mesh) overlap (``overlap``: the max) or share the network (the sum)."""
        per_group: dict = {}
        for kind, size, group in self.collectives:
            per_group[group] = per_group.get(group, 0) + ring_time(kind, size, group)
        if not per_group:
            return sp.Integer(0)
        times = [sp.factor(t) for t in per_group.values()]
        return sp.Max(*times) if overlap else sp.factor(sum(times))


def strategies() -> dict[str, dict[str, Pass]]:
    """Forward and backward of one device under DP, FSDP, TP and (forward only) FSDP x TP."""
    weights = 3 * D * F * BYTES  # W1, W2, W3 in FP16
    dp, fsdp = B / N_DP, B / N_FSDP
    return {
        "DP": {
            "forward": Pass(tuple(ffn_matmuls(dp, D, F, D, False))),
            "backward": Pass(
                tuple(ffn_matmuls(dp, D, F, D, True)), (("all_reduce", weights, N_DP),)
            ),
        },
        "FSDP": {
            "forward": Pass(
                tuple(ffn_matmuls(fsdp, D, F, D, False)), (("all_gather", weights, N_FSDP),)
            ),
            "backward": Pass(
                tuple(ffn_matmuls(fsdp, D, F, D, True)),
                (("all_gather", weights, N_FSDP), ("reduce_scatter", weights, N_FSDP)),
            ),
        },
        "TP": {
            "forward": Pass(
                tuple(ffn_matmuls(B, D, F / N_TP, D, False)), (("all_reduce", B * D * BYTES, N_TP),)
            ),  # y = sum of y^(i)
            "backward": Pass(
                tuple(ffn_matmuls(B, D, F / N_TP, D, True)), (("all_reduce", B * D * BYTES, N_TP),)
            ),  # dx = sum of partials
        },
        "FSDP x TP": {
            "forward": Pass(
                tuple(ffn_matmuls(fsdp, D, F / N_TP, D, False)),
                (
                    ("all_gather", weights / N_TP, N_FSDP),  # this TP slice's weights
                    ("all_reduce", fsdp * D * BYTES, N_TP),
                ),
            ),
        },
    }


def largest_count(passage: Pass, devices: sp.Symbol) -> sp.Expr:
    """The device count at which communication time equals compute time (the largest that
    stays compute-bound), for a pass whose collectives all run over ``devices``."""
    solutions = sp.solve(sp.Eq(passage.comm_time(), passage.compute_time()), devices)
    if len(solutions) != 1:
        raise ValueError(f"expected one solution for {devices}, got {solutions}")
    return sp.simplify(solutions[0])


def largest_2d(overlap: bool) -> sp.Expr:
    """Largest N = N_TP N_FSDP with the FSDP x TP forward compute-bound. With the axes
    overlapping, each axis is bounded alone and the bounds multiply; sharing the network,
    N_FSDP N_TP is maximised on the line where the summed communication equals compute
    (non-integer counts allowed, each at least 1: a piecewise answer)."""
    forward = strategies()["FSDP x TP"]["forward"]
    gather = ring_time("all_gather", 3 * D * F * BYTES / N_TP, N_FSDP)
    reduce = ring_time("all_reduce", B / N_FSDP * D * BYTES, N_TP)
    compute = forward.compute_time()
    if overlap:
        n_fsdp = sp.solve(sp.Eq(gather, compute), N_FSDP)[0]
        n_tp = sp.solve(sp.Eq(reduce, compute), N_TP)[0]
        return sp.factor(sp.simplify(n_fsdp * n_tp))
    line = sp.solve(sp.Eq(gather + reduce, compute), N_TP)[0]  # N_TP on the budget line
    product = N_FSDP * line
    star = [s for s in sp.solve(sp.diff(product, N_FSDP), N_FSDP) if s.is_positive][0]
    tp_at_star = sp.simplify(line.subs(N_FSDP, star))
    # The optimum of the line may ask for fewer than one device on an axis: then that axis
    # stays at 1 and the other takes the whole budget (both cannot happen at once).
    fsdp_only = sp.solve(sp.Eq(gather.subs(N_TP, 1), compute.subs(N_TP, 1)), N_FSDP)[0]
    tp_only = sp.simplify(line.subs(N_FSDP, 1))
    return sp.Piecewise(
        (sp.expand(fsdp_only), tp_at_star < 1),
        (sp.expand(tp_only), star < 1),
        (sp.factor(sp.simplify(product.subs(N_FSDP, star))), True),
    )


#: tp_calcs (a): the tensor-parallel backward on device i, from dy (B, D) and what the forward
#: saved (x, x1^(i), x2^(i), z^(i)); one collective, the all-reduce of dx.
TP_BACKWARD = (
    "dz^(i) = dy W3^(i)T            (B, D_FF/N_TP), local",
    "dW3^(i) = z^(i)T dy            (D_FF/N_TP, D), local",
    "dx2^(i) = dz^(i) * f(x1^(i))   elementwise",
    "dx1^(i) = dz^(i) * f'(x1^(i)) * x2^(i)",
    "dW1^(i) = x^T dx1^(i),  dW2^(i) = x^T dx2^(i)   (D, D_FF/N_TP), local",
    "dx = all-reduce_i(dx1^(i) W1^(i)T + dx2^(i) W2^(i)T)   (B, D)",
)


def tp_backward(x, w1, w2, w3, dy, n_tp: int):
    """``TP_BACKWARD`` executed on ``n_tp`` column/row shards of real tensors (f = SiLU), the
    all-reduce a sum: returns dW1, dW2, dW3 (shards concatenated) and dx."""
    silu = torch.nn.functional.silu
    grads_w1, grads_w2, grads_w3, partials = [], [], [], []
    for w1_i, w2_i, w3_i in zip(
        w1.chunk(n_tp, dim=1), w2.chunk(n_tp, dim=1), w3.chunk(n_tp, dim=0), strict=True
    ):
        x1, x2 = x @ w1_i, x @ w2_i
        z = silu(x1) * x2
        dz = dy @ w3_i.T
        sig = torch.sigmoid(x1)
        dx2 = dz * silu(x1)
        dx1 = dz * (sig * (1 + x1 * (1 - sig))) * x2  # f'(x1) of SiLU
        grads_w1.append(x.T @ dx1)
        grads_w2.append(x.T @ dx2)
        grads_w3.append(z.T @ dy)
        partials.append(dx1 @ w1_i.T + dx2 @ w2_i.T)
    return (
        torch.cat(grads_w1, 1),
        torch.cat(grads_w2, 1),
        torch.cat(grads_w3, 0),
        torch.stack(partials).sum(0),
    )


def answers() -> pd.DataFrame:
    """Every quantity the handout's DP, FSDP, TP and FSDP x TP problems ask for, one row each:
    problem, quantity, expression (sympy's text), the one-line reason, and the expression
    itself (column ``sympy``, to substitute numbers into)."""
    plans = strategies()
    rows = []

    def add(problem, quantity, expression, reason):
        rows.append(
            {
                "problem": problem,
                "quantity": quantity,
                "expression": sp.sstr(expression),
                "reason": reason,
                "sympy": expression,
            }
        )

    add(
        "alternate_ring_all_reduce",
        "time",
        sp.factor((N - 1) * S / W),
        "N-1 steps one after another, each sending S bytes over every device's link",
    )
    for problem, name, devices in (
        ("data_parallel_calcs", "DP", N_DP),
        ("fsdp_calcs", "FSDP", N_FSDP),
        ("tp_calcs", "TP", N_TP),
    ):
        for direction in ("forward", "backward"):
            if name == "DP" and direction == "forward":
                continue  # the handout asks DP about the backward only
            passage = plans[name][direction]
            kinds = ", ".join(k for k, _, _ in passage.collectives)
            add(
                problem,
                f"{direction} FLOPs",
                passage.flops(),
                f"{len(passage.matmuls)} matmuls of 2ABC on this device's shapes",
            )
            add(
                problem,
                f"{direction} communication time",
                passage.comm_time(),
                f"ring {kinds}" if kinds else "no collective",
            )
            add(
                problem,
                f"largest {devices} ({direction} compute-bound)",
                sp.expand(largest_count(passage, devices)),
                "communication time = compute time, solved for the count",
            )
    forward = plans["FSDP x TP"]["forward"]
    add(
        "fsdp_tp_calcs",
        "forward FLOPs",
        forward.flops(),
        "the TP FFN on a batch of B/N_FSDP with a D_FF/N_TP slice",
    )
    add(
        "fsdp_tp_calcs",
        "forward communication time, axes overlapping",
        forward.comm_time(overlap=True),
        "all-gather of the TP slice's weights over FSDP; all-reduce of y over TP",
    )
    add(
        "fsdp_tp_calcs",
        "largest N = N_TP N_FSDP, axes overlapping",
        largest_2d(True),
        "each axis compute-bound on its own; the bounds multiply",
    )
    add(
        "fsdp_tp_calcs",
        "largest N = N_TP N_FSDP, shared network",
        largest_2d(False),
        "the product maximised on the line where summed communication = compute",
    )
    return pd.DataFrame(rows)
