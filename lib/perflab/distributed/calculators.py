"""Back-of-the-envelope costs of one training step under data-parallel (DP), fully-sharded
(FSDP), tensor-parallel (TP) and 2D (FSDP x TP) training (notebook 08).

A step on a global batch of ``B`` sequences of ``S`` tokens of a model with ``N`` parameters,
``L`` layers of width ``d``, on devices of ``F`` FLOP/s, with ``b`` bytes per communicated
element, ``W`` bytes/s per device between data-parallel ranks and ``W_tp`` within a
tensor-parallel group (ring collectives: an all-reduce moves ``2 (p-1)/p`` of its data per
device, an all-gather or reduce-scatter ``(p-1)/p``):

- FLOPs: ``6 N B S``, forward ``2 N B S`` and backward ``4 N B S`` (per parameter and token;
  attention left out), split evenly over the devices.
- DP on ``n`` devices: one all-reduce of the gradients, ``2 (n-1)/n N b / W``, in backward.
- FSDP on ``n``: all-gather the weights in forward (``(n-1)/n N b / W``), all-gather them
  again and reduce-scatter the gradients in backward (``2 (n-1)/n N b / W``).
- TP on ``t`` (Megatron-LM, Shoeybi et al. 2019): per layer two all-reduces of the activations
  ``(B S d)`` in forward and two in backward, ``4 L (t-1)/t B S d b / W_tp`` in each pass.
- 2D: FSDP over ``n`` groups of ``t``: each FSDP collective moves ``N / t`` parameters, each TP
  group sees ``B / n`` sequences; the two run on different links at once.

Which compute a collective can hide behind (``overlap``): by default (``"pass"``) each pass's
communication overlaps only that pass's compute. DP's gradient all-reduce therefore hides
behind the backward alone (``4 N B S``, the same as the handout's FFN derivation in
``perflab.distributed.ffn_calcs``, which asks DP about the backward only): the gradients it sums
exist only once backward has produced them, and the optimizer step, hence the next forward,
waits for it. FSDP's forward gathers hide behind the forward and its backward collectives
behind the backward, which gives the same bound as the whole step (traffic and compute are
both split 1 : 2). TP's activation all-reduces are the same in both passes, so the forward
(half the backward's compute) sets its bound. ``overlap="step"`` lets every collective hide
behind the whole step's ``6 N B S`` (optimistic: for DP it would need the all-reduce to
overlap a forward that has no gradients yet); it is kept to show what that assumption buys.

A configuration is compute-bound when, in each pass, its compute time is at least each
communication time (communication can then hide behind compute). The largest compute-bound
device counts follow in closed form; with ``overlap="pass"``: ``n - 1 <= 2 B S W / (F b)``
(DP: backward; FSDP: either pass), ``t - 1 <= 2 N W_tp / (4 L d b F)`` (TP: forward; about
``6 d W_tp / (b F)`` since ``N ~ 12 L d^2``), and their product for 2D; with
``overlap="step"``: ``3 B S W / (F b)`` (DP), ``2 B S W / (F b)`` (FSDP),
``6 N W_tp / (8 L d b F)`` (TP). DP and FSDP keep at least one sequence per device
(``n <= B``), TP at least one head per device (``t <= heads``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

from perflab.measure.hardware import GPUS

STRATEGIES = ("dp", "fsdp", "tp", "fsdp+tp")
OVERLAPS = ("pass", "step")
#: Share of the step's FLOPs in each pass (forward 2, backward 4 per parameter and token).
PASS_SHARE = {"forward": 1 / 3, "backward": 2 / 3}
#: Collectives over the data-parallel link in each pass, in units of ``(n-1)/n N/t b / W``.
_DP_LINK = {
    "dp": {"forward": 0, "backward": 2},
    "fsdp": {"forward": 1, "backward": 2},
    "tp": {"forward": 0, "backward": 0},
    "fsdp+tp": {"forward": 1, "backward": 2},
}
#: Activation all-reduces per layer and pass over the tensor-parallel link.
_TP_ALL_REDUCES = {"dp": 0, "fsdp": 0, "tp": 2, "fsdp+tp": 2}


@dataclass(frozen=True)
class Hardware:
    """Per-device peak and link bandwidths (bytes/s, one direction)."""

    name: str
    flops_per_s: float
    bandwidth: float  # between data-parallel ranks (e.g. InfiniBand per GPU)
    tp_bandwidth: float  # within a tensor-parallel group (e.g. NVLink)


#: An H100 SXM node as ``perflab.measure.hardware`` gives it (dense bf16 peak, NVLink per
#: direction), with one 400 Gb/s InfiniBand NIC per GPU (50 GB/s) between nodes.
H100_NODE = Hardware(
    "H100 SXM, NVLink + 400G IB",
    GPUS["H100 SXM5 80GB"].bf16_flops,
    50e9,
    GPUS["H100 SXM5 80GB"].nvlink_bytes_per_s,
)


@dataclass(frozen=True)
class Workload:
    """What is trained: parameters, shape, global batch, bytes per communicated element."""

    n_params: float
    num_layers: int
    d_model: int
    num_heads: int
    batch_size: int  # sequences per step, all devices together
    seq_len: int
    bytes_per_element: int = 2  # bf16 weights and gradients on the wire

    @classmethod
    def from_config(cls, config, batch_size: int, seq_len: int, bytes_per_element: int = 2):
        """From a ``perflab.implementations.model.ModelConfig``."""
        return cls(
            config.num_parameters(),
            config.num_layers,
            config.d_model,
            config.num_heads,
            batch_size,
            seq_len,
            bytes_per_element,
        )

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len


@dataclass(frozen=True)
class StepEstimate:
    strategy: str
    devices: int
    flops_per_device: float
    compute_s: float  # the whole step's
    comm_s: float  # the whole step's, on the slower link
    forward_compute_s: float
    forward_comm_s: float  # the slower link's, in forward
    backward_compute_s: float
    backward_comm_s: float  # the slower link's, in backward
    overlap: str  # "pass": each pass's communication hides behind that pass's compute only
    comm_over_compute: float  # the largest ratio that ``overlap`` compares; <= 1: compute-bound
    compute_bound: bool

    def as_dict(self) -> dict:
        return asdict(self)


def train_flops(n_params: float, tokens: float) -> float:
    """``6 N T``: FLOPs of one forward and backward pass over ``T`` tokens."""
    return 6 * n_params * tokens


def _ring(devices: int) -> float:
    return (devices - 1) / devices


def _check(**counts: int) -> None:
    for name, value in counts.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_overlap(strategy: str, overlap: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    if overlap not in OVERLAPS:
        raise ValueError(f"unknown overlap {overlap!r}; valid: {', '.join(OVERLAPS)}")


def estimate(
    strategy: str,
    work: Workload,
    hw: Hardware,
    devices: int,
    tp_degree: int = 1,
    overlap: str = "pass",
) -> StepEstimate:
    """Compute and communication time of one step and of each pass; ``devices`` counts
    data-parallel (or FSDP) ranks, ``tp_degree`` the tensor-parallel group size (TP and
    FSDP+TP only; for "tp", ``devices`` is the group size). ``overlap`` says which compute the
    communication may hide behind (module docstring): ``"pass"`` the same pass's (DP's
    all-reduce: the backward's), ``"step"`` the whole step's."""
    _check_overlap(strategy, overlap)
    _check(devices=devices, tp_degree=tp_degree)
    n, t, b = devices, tp_degree, work.bytes_per_element
    if strategy == "tp":
        n, t = 1, devices
    if strategy in ("dp", "fsdp") and t != 1:
        raise ValueError(f"{strategy} has no tensor-parallel degree; got tp_degree={t}")
    total = n * t
    flops = train_flops(work.n_params, work.tokens) / total
    compute = flops / hw.flops_per_s
    dp_unit = _ring(n) * work.n_params / t * b / hw.bandwidth
    tp_unit = (
        2
        * _TP_ALL_REDUCES[strategy]
        * work.num_layers
        * _ring(t)
        * (work.tokens / n)
        * work.d_model
        * b
        / hw.tp_bandwidth
    )
    times = {
        p: (share * compute, max(_DP_LINK[strategy][p] * dp_unit, tp_unit))
        for p, share in PASS_SHARE.items()
    }
    comm = max(sum(_DP_LINK[strategy].values()) * dp_unit, len(PASS_SHARE) * tp_unit)
    if overlap == "pass":
        ratio = max(c / s for s, c in times.values())
    else:
        ratio = comm / compute
    return StepEstimate(
        strategy,
        total,
        flops,
        compute,
        comm,
        *times["forward"],
        *times["backward"],
        overlap,
        ratio,
        ratio <= 1,
    )


def max_compute_bound_devices(
    strategy: str, work: Workload, hw: Hardware, overlap: str = "pass"
) -> int:
    """The largest device count whose step stays compute-bound (closed forms above)."""
    _check_overlap(strategy, overlap)
    b, f = work.bytes_per_element, hw.flops_per_s
    ratio = work.tokens * hw.bandwidth / (f * b)
    per_layer = work.n_params * hw.tp_bandwidth / (work.num_layers * work.d_model * b * f)
    if overlap == "pass":
        dp_factor, tp_factor = 2, 2 / 4  # DP: backward 4 N T vs 2 N b; TP: forward 2 N T vs 4 L
    else:
        dp_factor, tp_factor = 3, 6 / 8  # the whole step: 6 N T vs 2 N b; 6 N T vs 8 L
    dp = min(work.batch_size, 1 + math.floor(dp_factor * ratio))
    fsdp = min(work.batch_size, 1 + math.floor(2 * ratio))
    tp = min(work.num_heads, 1 + math.floor(tp_factor * per_layer))
    return {"dp": dp, "fsdp": fsdp, "tp": tp, "fsdp+tp": fsdp * tp}[strategy]


def max_devices_table(config, hw: Hardware, batch_sizes, seq_len: int) -> pd.DataFrame:
    """Largest compute-bound device count per strategy and global batch size."""
    rows = []
    for batch_size in batch_sizes:
        work = Workload.from_config(config, batch_size, seq_len)
        for strategy in STRATEGIES:
            rows.append(
                {
                    "model": config.name,
                    "batch_size": batch_size,
                    "tokens_per_step": work.tokens,
                    "strategy": strategy,
                    "max_devices": max_compute_bound_devices(strategy, work, hw),
                }
            )
    return pd.DataFrame(rows)
