"""Memory measurements of the workbook's model (notebook 04).

Every number here is measured with ``perflab.measure.timeline.peak_memory`` (CUDA's peak counter,
or the CPU allocator record of torch.profiler), next to the formula that predicts it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import torch

from perflab.bench.steps import BenchConfig, build_step, make_step, random_batch
from perflab.implementations.checkpointing import check_strategy, run_blocks
from perflab.implementations.model import (
    ModelConfig,
    RMSNorm,
    TransformerLM,
    build_model,
    cross_entropy,
    get_preset,
    sized_for,
)
from perflab.measure.device import CPU, resolve_device
from perflab.measure.stats import least_squares
from perflab.measure.timeline import peak_memory, record_timeline
from perflab.measure.timer import time_fn
from perflab.memory.saved import saved_tensors


def residual_stream_bytes(
    config: ModelConfig, batch_size: int, seq_len: int, dtype: torch.dtype = torch.float32
) -> int:
    """Bytes of the residual stream between two blocks: batch x seq x d_model elements."""
    return batch_size * seq_len * config.d_model * torch.empty((), dtype=dtype).element_size()


def measured_residual_bytes(
    config: ModelConfig, batch_size: int, seq_len: int, device: torch.device
) -> int:
    """Bytes of the tensor that actually enters the second block (captured by a hook)."""
    model = build_model(config, context=seq_len, layers=2, device=device)
    seen = []
    handle = model.blocks[1].register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    with torch.no_grad():
        model(torch.zeros(batch_size, seq_len, dtype=torch.long, device=device))
    handle.remove()
    return seen[0].nelement() * seen[0].element_size()


def step_peak_memory(config: dict) -> dict:
    """Sweep measure function: peak bytes of one step of a ``BenchConfig`` (as a dict) above
    the memory held before it (the model, and for a training step its gradients and AdamW
    state, made by the config's warm-up steps)."""
    config = BenchConfig(**config)
    device = resolve_device(config.device)
    step = build_step(config, device)
    for _ in range(config.warmup):
        step()
    return {"peak_bytes": peak_memory(step, device)}


def blocks_fwd_bwd(
    model: TransformerLM, x: torch.Tensor, strategy: str, group_size: int | None
) -> None:
    """Forward and backward through the block stack only (no embedding, no LM head)."""
    run_blocks(model.blocks, x, strategy, group_size).float().square().mean().backward()


def block_stack(
    preset: str, num_layers: int, batch_size: int, seq_len: int, device: torch.device
) -> tuple[TransformerLM, torch.Tensor]:
    """A ``num_layers``-block model of ``preset``'s shape (seeded) and a random residual-stream
    input that requires grad: what the checkpointing measurements run through."""
    config = replace(sized_for(get_preset(preset), seq_len), num_layers=num_layers)
    torch.manual_seed(0)
    with torch.device(device):
        model = build_model(config)
        x = torch.randn(batch_size, seq_len, config.d_model, requires_grad=True)
    return model, x


def checkpoint_peak(
    preset: str,
    num_layers: int,
    batch_size: int,
    seq_len: int,
    strategy: str = "none",
    group_size: int | None = None,
    device: torch.device = CPU,
    repeats: int = 1,
) -> dict:
    """Peak activation bytes and seconds (median of ``repeats`` steps of the workbook's timer,
    device synchronised) of forward + backward through ``num_layers`` blocks of ``preset``'s
    shape with a checkpointing strategy.

    Gradients are allocated by a first pass and kept (``zero_grad(set_to_none=False)``), so
    the peak counts activations and temporaries only, not gradient buffers.
    """
    check_strategy(strategy, group_size, num_layers)
    model, x = block_stack(preset, num_layers, batch_size, seq_len, device)
    blocks_fwd_bwd(model, x, strategy, group_size)  # allocates the gradients
    model.zero_grad(set_to_none=False)
    peak = peak_memory(lambda: blocks_fwd_bwd(model, x, strategy, group_size), device)
    timing = time_fn(
        lambda: blocks_fwd_bwd(model, x, strategy, group_size),
        warmup=0,
        steps=repeats,
        device=device,
    )
    return {"peak_bytes": peak, "seconds": timing.median}


def group_sizes(num_layers: int) -> list[int]:
    """Group sizes that divide the stack evenly (every checkpoint the same size)."""
    return [g for g in range(1, num_layers + 1) if num_layers % g == 0]


def nearest_grid_point(value: float, grid: list[int]) -> int:
    """The grid value closest to ``value`` (e.g. sqrt(L) on the group-size grid)."""
    return min(grid, key=lambda g: (abs(g - value), g))


def log_fit(layers: list[int], peaks: list[float]) -> dict:
    """Least-squares fit peak = a + b * log2(layers), with its coefficient of determination."""
    doublings = [math.log2(n) for n in layers]
    (intercept, slope), r2 = least_squares([[1.0] * len(layers), doublings], peaks)
    return {"intercept": float(intercept), "slope_per_doubling": float(slope), "r2": float(r2)}


def full_step_peak(
    config: ModelConfig,
    batch_size: int,
    seq_len: int,
    strategy: str = "none",
    group_size: int | None = None,
    device: torch.device = CPU,
) -> int:
    """Peak bytes of a whole AdamW training step of ``config`` with a checkpointing strategy,
    above the model, gradients and optimizer state (made by a warm-up step)."""
    model = build_model(config, context=seq_len, seed=0, device=device)
    model.set_checkpointing(strategy, group_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = random_batch(config.vocab_size, batch_size, seq_len, device)
    step = make_step(model, inputs, targets, "train-step", torch.float32, optimizer)
    step()
    return peak_memory(step, device)


def compile_backend(device: torch.device) -> str:
    """torch.compile backend for saved-tensor comparisons: "inductor" on CUDA; on CPU
    "aot_eager_decomp_partition", the same decompositions and min-cut partitioner as inductor
    (so the same tensors saved for backward) without its minutes of C++ code generation."""
    return "inductor" if device.type == "cuda" else "aot_eager_decomp_partition"


def block_saved_tensors(
    preset: str, batch_size: int, seq_len: int, device: torch.device
) -> pd.DataFrame:
    """``saved_tensors`` of one TransformerBlock of ``preset``'s shape on a random input."""
    torch.manual_seed(0)
    with torch.device(device):
        block = build_model(get_preset(preset), context=seq_len, layers=1).blocks[0]
        x = torch.randn(batch_size, seq_len, block.attn.out.in_features, requires_grad=True)
    return saved_tensors(lambda: block(x), block.parameters())


def rmsnorm_saved_tensors(
    d_model: int, batch_size: int, seq_len: int, compiled: bool, device: torch.device
) -> pd.DataFrame:
    """``saved_tensors`` of RMSNorm, eager or compiled with ``compile_backend(device)``."""
    with torch.device(device):
        norm = RMSNorm(d_model)
        x = torch.randn(batch_size, seq_len, d_model, requires_grad=True)
    fn = torch.compile(norm, backend=compile_backend(device)) if compiled else norm
    if compiled:
        fn(x)  # compile outside the recording
    return saved_tensors(lambda: fn(x), norm.parameters())


def gradient_memory(
    preset: str, batch_size: int, seq_len: int, device: torch.device
) -> tuple[pd.DataFrame, float]:
    """The gradients' bytes per module of ``preset``'s model (each block, and the embedding,
    final norm and LM head), read from the allocator: one forward and backward recorded
    (``record_timeline``), each parameter's ``.grad`` found by its storage's address among the
    allocations, and its bytes, when it was allocated and whether it was freed, beside the
    formula (the parameter's element size x its numel: 4 bytes in float32). Returns the table
    and when backward began (ms into the recording): every gradient is allocated after it."""
    model = build_model(get_preset(preset), context=seq_len, seed=0, device=device)
    inputs, targets = random_batch(model.config.vocab_size, batch_size, seq_len, device)
    marks = {}

    def forward_and_backward() -> None:
        loss = cross_entropy(model(inputs), targets)
        marks["backward"] = torch.empty(1, device=device)  # an allocation that marks the moment
        loss.backward()

    model.zero_grad(set_to_none=True)
    timeline = record_timeline(forward_and_backward, device)
    events = timeline.events
    mark = marks["backward"].untyped_storage().data_ptr()
    backward_ms = float(events.loc[events["address"] == mark, "time_ms"].iloc[-1])
    rows = []
    for name, parameter in model.named_parameters():
        parts = name.split(".")
        module = ".".join(parts[:2]) if parts[0] == "blocks" else parts[0]
        address = parameter.grad.untyped_storage().data_ptr()
        at = events[events["address"] == address]
        allocations = at[at["delta_bytes"] > 0]
        last = allocations.iloc[-1] if len(allocations) else None
        freed = last is not None and bool((at["time_ms"] > last["time_ms"]).any())
        rows.append(
            {
                "module": module,
                "parameter": name,
                "parameters": parameter.numel(),
                "formula_bytes": parameter.numel() * parameter.element_size(),
                "allocated_bytes": int(last["delta_bytes"]) if last is not None else 0,
                "allocated_ms": float(last["time_ms"]) if last is not None else float("nan"),
                "found": last is not None and not freed,
            }
        )
    per_parameter = pd.DataFrame(rows)
    table = per_parameter.groupby("module", sort=False).agg(
        parameters=("parameters", "sum"),
        formula_bytes=("formula_bytes", "sum"),
        allocated_bytes=("allocated_bytes", "sum"),
        gradients=("parameter", "count"),
        found=("found", "sum"),
        first_ms=("allocated_ms", "min"),
        last_ms=("allocated_ms", "max"),
    )
    return table.reset_index(), backward_ms


def step_timelines(preset: str, context: int, batch_size: int, device, out) -> dict:
    """Memory over time (``record_timeline``, Python stacks on) of one forward and one training
    step of ``preset``, each after a warm-up call (which allocates the gradients and AdamW's
    state), by mode; each snapshot saved in ``out`` as ``{mode}_snapshot.pickle``."""
    timelines = {}
    for mode in ("forward", "train-step"):
        config = BenchConfig(
            preset=preset,
            context_length=context,
            mode=mode,
            batch_size=batch_size,
            device=str(device),
        )
        step = build_step(config, device)
        step()
        timelines[mode] = record_timeline(
            step, device, snapshot_path=out / f"{mode}_snapshot.pickle", python_stack=True
        )
    return timelines


def peak_configs(preset: str, context_lengths, batch_size: int, device) -> list[dict]:
    """The peak-memory sweep of notebook 04: forward and training step, float32 and bfloat16
    autocast, at each context length (one warm-up and one measured step each)."""
    return [
        BenchConfig(
            preset=preset,
            context_length=n,
            mode=mode,
            batch_size=batch_size,
            warmup=1,
            steps=1,
            dtype=dtype,
            device=str(device),
        ).as_dict()
        for n in context_lengths
        for dtype in ("float32", "bfloat16")
        for mode in ("forward", "train-step")
    ]
