"""Memory per rank with and without sharding (notebook 08): measured on the ranks, and
computed from the parameter counts.

AdamW in fp32 keeps two moments per element (8 bytes) and a float32 step counter per tensor
(4 bytes). Per rank, for ``P`` parameters on ``N`` ranks (Rajbhandari et al. 2020, fp32):

- replicated (DDP):          params 4P + grads 4P + state 8P
- ZeRO-1 (sharded state):    params 4P + grads 4P + state 8P / N
- FSDP (ZeRO-3, matrices):   params, grads and state of the matrices / N, vectors replicated
"""

from __future__ import annotations

import gc
import time

import pandas as pd
import torch
import torch.distributed as dist

from perflab.distributed.launch import rank_device
from perflab.distributed.toy import loss_fn, toy_model, vocab_size
from perflab.implementations.ddp import DDPFlat, DDPNaive
from perflab.implementations.fsdp import FSDP
from perflab.implementations.sharded_optimizer import ShardedOptimizer, optimizer_state_bytes
from perflab.measure.timeline import record_timeline

ADAMW_BYTES_PER_ELEMENT = 8  # exp_avg + exp_avg_sq, fp32
ADAMW_BYTES_PER_TENSOR = 4  # the step counter, a float32 scalar tensor


def adamw_state_bytes(elements: int, tensors: int) -> int:
    """Computed AdamW state for ``tensors`` parameters with ``elements`` elements in all."""
    return ADAMW_BYTES_PER_ELEMENT * elements + ADAMW_BYTES_PER_TENSOR * tensors


def _one_step(wrapped, optimizer, model) -> None:
    ids = torch.randint(0, vocab_size(model), (2, 17), generator=torch.Generator().manual_seed(0))
    optimizer.zero_grad()
    loss_fn(wrapped, ids[:, :-1], ids[:, 1:]).backward()
    wrapped.finish_gradient_synchronization()
    optimizer.step()


def zero_memory(model: str) -> dict:
    """On every rank: AdamW state after one step, sharded (``ShardedOptimizer``) and not,
    measured (bytes of the state tensors) and computed (``adamw_state_bytes``)."""
    module = toy_model(model, seed=0)
    wrapped = DDPFlat(module)
    sharded = ShardedOptimizer(module.parameters(), torch.optim.AdamW, lr=1e-3)
    _one_step(wrapped, sharded, module)
    plain = torch.optim.AdamW(module.parameters(), lr=1e-3)  # same gradients, one more step
    plain.step()
    owned = [p for p, rank in sharded.owner.items() if rank == dist.get_rank()]
    params = list(module.parameters())
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "parameters": sum(p.numel() for p in params),
        "owned_parameters": sum(p.numel() for p in owned),
        "owned_tensors": len(owned),
        "state_measured_sharded": sharded.local_state_bytes(),
        "state_computed_sharded": adamw_state_bytes(sum(p.numel() for p in owned), len(owned)),
        "state_measured_unsharded": optimizer_state_bytes(plain),
        "state_computed_unsharded": adamw_state_bytes(sum(p.numel() for p in params), len(params)),
    }


def tensor_bytes(tensors) -> int:
    """Bytes of the tensors' elements (None entries, e.g. missing gradients, count 0)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _settle(seconds: float = 0.02) -> None:
    """Let the process group's worker threads finish with the buffers of the collectives just
    waited for, before a phase's recording ends."""
    dist.barrier()
    time.sleep(seconds)


def zero_memory_points(model: str, batch_size: int = 2, seq_len: int = 16) -> list[dict]:
    """On every rank, with plain AdamW and with ``ShardedOptimizer(AdamW)`` (the handout's
    optimizer_state_sharding_accounting (a)): memory after building the model and optimizer,
    just before ``step()`` and just after the first step, from the allocator's record
    (``record_timeline``: bytes allocated since the rank started this measurement, and the
    peak of each phase), broken down into the parameters, gradients and optimizer state the
    rank holds at that point (their tensors' bytes; "other" is the rest).

    The gradients are all-reduced in place (``DDPNaive``): a flat buffer's last reference can
    be dropped by Gloo's worker thread, where the CPU profiler does not record the free."""
    device = rank_device()
    rows = []
    for sharded in (False, True):
        held: dict = {}

        def build(held=held, sharded=sharded):
            held["module"] = toy_model(model, seed=0)
            held["wrapped"] = DDPNaive(held["module"])  # in place: no buffer comes and goes
            params = held["module"].parameters()
            held["optimizer"] = (
                ShardedOptimizer(params, torch.optim.AdamW, lr=1e-3)
                if sharded
                else torch.optim.AdamW(params, lr=1e-3)
            )
            _settle()

        def forward_backward(held=held):
            ids = torch.randint(
                0,
                vocab_size(held["module"]),
                (batch_size, seq_len + 1),
                generator=torch.Generator().manual_seed(dist.get_rank()),
            )
            loss_fn(held["wrapped"], ids[:, :-1].to(device), ids[:, 1:].to(device)).backward()
            held["wrapped"].finish_gradient_synchronization()
            _settle()

        def step(held=held):
            held["optimizer"].step()
            _settle()

        gc.collect()  # the previous optimizer's model, freed before this one is measured
        live, peak = 0, 0
        points = []
        for point, phase in (
            ("after init", build),
            ("before step", forward_backward),
            ("after step", step),
        ):
            timeline = record_timeline(phase, device)
            peak = max(peak, live + timeline.peak_bytes)
            live += int(timeline.events["allocated_bytes"].iloc[-1]) if len(timeline.events) else 0
            params = list(held["module"].parameters())
            state = optimizer_state_bytes(
                held["optimizer"].local_optimizer if sharded else held["optimizer"]
            )
            held_bytes = {
                "parameter_bytes": tensor_bytes(params),
                "gradient_bytes": tensor_bytes(p.grad for p in params),
                "optimizer_state_bytes": state,
            }
            points.append(
                {
                    "rank": dist.get_rank(),
                    "optimizer": "sharded AdamW" if sharded else "AdamW",
                    "point": point,
                    "allocated_bytes": live,
                    "peak_bytes_so_far": peak,
                    **held_bytes,
                    "other_bytes": live - sum(held_bytes.values()),
                }
            )
        rows += points
        held.clear()
    return rows


def fsdp_memory(model: str) -> dict:
    """On every rank: parameter, gradient and AdamW-state bytes held under ``FSDP`` after one
    step, measured, and the same computed from the shard sizes; and the replicated total."""
    module = toy_model(model, seed=0)
    full = list(module.parameters())
    replicated_bytes = sum(p.numel() * p.element_size() for p in full)
    sharded = FSDP(module)
    optimizer = torch.optim.AdamW(sharded.parameters(), lr=1e-3)
    _one_step(sharded, optimizer, module)
    world_size = dist.get_world_size()
    locals_ = list(sharded.parameters())
    computed_elements = sum(-(-p.numel() // world_size) if p.ndim >= 2 else p.numel() for p in full)
    return {
        "rank": dist.get_rank(),
        "world_size": world_size,
        "param_bytes_measured": sum(p.numel() * p.element_size() for p in locals_),
        "param_bytes_computed": 4 * computed_elements,
        "grad_bytes_measured": sum(p.grad.numel() * p.grad.element_size() for p in locals_),
        "state_bytes_measured": optimizer_state_bytes(optimizer),
        "state_bytes_computed": adamw_state_bytes(computed_elements, len(locals_)),
        "param_bytes_replicated": replicated_bytes,
        "state_bytes_replicated": adamw_state_bytes(sum(p.numel() for p in full), len(full)),
    }


def memory_per_rank_formula(parameters: int, world_sizes, bytes_per_param: int = 4) -> list:
    """Computed bytes per rank of parameters + gradients + AdamW moments for replicated
    training, ZeRO-1 and FSDP (every parameter sharded), for each world size."""
    rows = []
    for n in world_sizes:
        p = parameters
        rows += [
            {"world_size": n, "strategy": "replicated", "bytes": (2 * bytes_per_param + 8) * p},
            {"world_size": n, "strategy": "ZeRO-1", "bytes": 2 * bytes_per_param * p + 8 * p / n},
            {"world_size": n, "strategy": "FSDP", "bytes": (2 * bytes_per_param + 8) * p / n},
        ]
    return rows


def zero_communication(param_bytes: float, world_size: int) -> pd.DataFrame:
    """Bytes each rank sends per step, and what it keeps, for plain data parallelism with
    AdamW, this workbook's ``ShardedOptimizer`` and ZeRO stage 1 (Rajbhandari et al. 2020,
    "P_os"), fp32 training of ``param_bytes`` of parameters, ring collectives.

    A ring all-reduce sends 2 (N-1)/N of the data per rank, a reduce-scatter or an all-gather
    (N-1)/N; broadcasting every parameter from its owner sends each byte (N-1)/N times per
    rank on average, like an all-gather. ``ShardedOptimizer`` sits on top of an all-reduce of
    the gradients, so it adds the broadcast; ZeRO-1 replaces the all-reduce by a
    reduce-scatter (each rank only needs the average of its own shard) and all-gathers the
    updated parameters, moving no more than plain data parallelism."""
    n, p = world_size, param_bytes
    ring = (n - 1) / n
    rows = [
        ("data parallel + AdamW", 2 * ring * p, 0.0, p, 2 * p),
        ("ShardedOptimizer (this workbook)", 2 * ring * p, ring * p, p, 2 * p / n),
        ("ZeRO-1 (P_os)", ring * p, ring * p, p, 2 * p / n),
    ]
    return pd.DataFrame(
        [
            {
                "scheme": name,
                "gradient_bytes_sent": grads,
                "parameter_bytes_sent": params,
                "bytes_sent": grads + params,
                "gradient_bytes_held": held,
                "adamw_state_bytes": state,
            }
            for name, grads, params, held, state in rows
        ]
    )
