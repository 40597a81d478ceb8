"""Back-of-the-envelope costs of one training step under data-parallel (DP), fully-sharded
(FSDP), tensor-parallel (TP) and 2D (FSDP x TP) training (notebook 08).

A step on a global batch of ``B`` sequences of ``S`` tokens of a model with ``N`` parameters,
``L`` layers of width ``d``, on devices of ``F`` FLOP/s, with ``b`` bytes per communicated
element, ``W`` bytes/s per device between data-parallel ranks and ``W_tp`` within a
tensor-parallel group (ring collectives: an all-reduce moves ``2 (p-1)/p`` of its data per
device, an all-gather or reduce-scatter ``(p-1)/p``):

- FLOPs: ``6 N B S`` (forward 2, backward 4 per parameter and token; attention left out),
  split evenly over the devices.
- DP on ``n`` devices: one all-reduce of the gradients, ``2 (n-1)/n N b / W``.
- FSDP on ``n``: all-gather weights in forward and in backward, reduce-scatter gradients,
  ``3 (n-1)/n N b / W``.
- TP on ``t`` (Megatron-LM, Shoeybi et al. 2019): per layer two all-reduces of the activations
  ``(B S d)`` in forward and two in backward, ``8 L (t-1)/t B S d b / W_tp``.
- 2D: FSDP over ``n`` groups of ``t``: each FSDP collective moves ``N / t`` parameters, each TP
  group sees ``B / n`` sequences; the two run on different links at once.

A configuration is compute-bound when its compute time is at least each communication time
(communication can then hide behind compute). The largest compute-bound device counts follow
in closed form, ``n - 1 <= 3 B S W / (F b)`` (DP), ``n - 1 <= 2 B S W / (F b)`` (FSDP),
``t - 1 <= 6 N W_tp / (8 L d b F)`` (TP; about ``9 d W_tp / (b F)`` since ``N ~ 12 L d^2``),
and their product for 2D; DP and FSDP keep at least one sequence per device (``n <= B``), TP at
least one head per device (``t <= heads``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

STRATEGIES = ("dp", "fsdp", "tp", "fsdp+tp")


@dataclass(frozen=True)
class Hardware:
    """Per-device peak and link bandwidths (bytes/s, one direction)."""

    name: str
    flops_per_s: float
    bandwidth: float  # between data-parallel ranks (e.g. InfiniBand per GPU)
    tp_bandwidth: float  # within a tensor-parallel group (e.g. NVLink)


#: Datasheet numbers: H100 SXM dense bf16 989 TFLOP/s, NVLink 4 450 GB/s per direction,
#: one 400 Gb/s InfiniBand NIC per GPU (50 GB/s).
H100_NODE = Hardware("H100 SXM, NVLink + 400G IB", 989e12, 50e9, 450e9)


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
        """From a ``perflab.model.ModelConfig``."""
        return cls(config.num_parameters(), config.num_layers, config.d_model,
                   config.num_heads, batch_size, seq_len, bytes_per_element)  # fmt: skip

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len


@dataclass(frozen=True)
class StepEstimate:
    strategy: str
    devices: int
    flops_per_device: float
    compute_s: float
    comm_s: float  # the slower link's communication time
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


def estimate(
    strategy: str, work: Workload, hw: Hardware, devices: int, tp_degree: int = 1
) -> StepEstimate:
    """Compute and communication time of one step; ``devices`` counts data-parallel (or FSDP)
    ranks, ``tp_degree`` the tensor-parallel group size (TP and FSDP+TP only; for "tp",
    ``devices`` is the group size)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    _check(devices=devices, tp_degree=tp_degree)
    n, t, b = devices, tp_degree, work.bytes_per_element
    if strategy == "tp":
        n, t = 1, devices
    if strategy in ("dp", "fsdp") and t != 1:
        raise ValueError(f"{strategy} has no tensor-parallel degree; got tp_degree={t}")
    total = n * t
    flops = train_flops(work.n_params, work.tokens) / total
    compute = flops / hw.flops_per_s
    dp_comm = {"dp": 2, "fsdp": 3, "tp": 0, "fsdp+tp": 3}[strategy] * _ring(n) * work.n_params \
        / t * b / hw.bandwidth  # fmt: skip
    tp_comm = 8 * work.num_layers * _ring(t) * (work.tokens / n) * work.d_model * b \
        / hw.tp_bandwidth  # fmt: skip
    comm = max(dp_comm, tp_comm)
    return StepEstimate(strategy, total, flops, compute, comm, compute >= comm)


def max_compute_bound_devices(strategy: str, work: Workload, hw: Hardware) -> int:
    """The largest device count whose step stays compute-bound (closed forms above)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    b, f = work.bytes_per_element, hw.flops_per_s
    ratio = work.tokens * hw.bandwidth / (f * b)
    dp = min(work.batch_size, 1 + math.floor(3 * ratio))
    fsdp = min(work.batch_size, 1 + math.floor(2 * ratio))
    tp = min(
        work.num_heads,
        1 + math.floor(6 * work.n_params * hw.tp_bandwidth / (8 * work.num_layers
                                                             * work.d_model * b * f)),
    )  # fmt: skip
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
