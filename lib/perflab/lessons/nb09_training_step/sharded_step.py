"""One training step of a model too large for one device: notebook 08's ``FSDP`` over ranks,
for notebook 09's leaderboard (the 2026 handout's 8B model, 2 x 32,768 tokens, on 2 GPUs).

Each rank holds a shard of the parameters, their gradients and AdamW's state, and trains on
its part of the global batch; the loss head is a module call (``LossModel``), so FSDP gathers
the output projection's weight for the fused head too. ``sharded_step_memory`` says per rank
what the step holds, from the shapes (activations: one block's saved bytes per token counted on
the meta device), so one sees before running it how many devices the step needs.
``check_sharded_step`` compares the sharded step with the same recipe in one process.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
import torch.distributed as dist
from torch import Tensor, nn

from perflab.bench.recipe import Recipe, head_loss, make_optimizer, prepare_model
from perflab.bench.steps import random_batch
from perflab.distributed.launch import launch, max_world_size, rank_device
from perflab.implementations.fsdp import FSDP
from perflab.implementations.fused_cross_entropy import default_chunk_size
from perflab.implementations.model import (
    ModelConfig,
    TransformerLM,
    build_model,
    get_preset,
    sized_for,
)
from perflab.measure.device import parse_dtype
from perflab.measure.stats import is_unstable
from perflab.measure.sweep import is_out_of_memory
from perflab.measure.timer import time_fn
from perflab.memory.saved import saved_bytes, saved_tensors
from perflab.training.ladder import (
    UPDATE_TOLERANCE,
    TrainingStep,
    relative_error,
    tolerance_for,
)

GB = 1e9


class LossModel(nn.Module):
    """(inputs, targets) -> the mean next-token loss through ``head`` ("plain": logits and
    ``cross_entropy``; "fused": ``model.lm_head(hidden, targets)``)."""

    def __init__(self, model: TransformerLM, head: str):
        super().__init__()
        self.model, self.head = model, head

    def forward(self, inputs: Tensor, targets: Tensor) -> Tensor:
        return head_loss(self.model, self.head, inputs, targets)


@dataclass
class ShardedStep:
    """What ``sharded_training_step`` measured."""

    world_size: int
    tokens: int  # of the global batch, per step
    loss: float  # the first step's, averaged over ranks: the global batch's mean loss
    step_s: list[float]  # each timed step, on the slowest rank
    peak_bytes: int | None  # CUDA: the largest rank's peak allocation; None on a CPU
    grads: dict[str, Tensor] | None  # the first step's full gradients (``check``)
    params: dict[str, Tensor] | None  # the full parameters after the first step (``check``)
    #: the same batch's loss after the first step (``check``): a second forward, which must
    #: use the updated weights
    next_loss: float | None = None

    @property
    def median_s(self) -> float:
        return float(pd.Series(self.step_s).median())


def _rank(
    config: ModelConfig,
    recipe: Recipe,
    batch_size: int,
    seq_len: int,
    warmup: int,
    steps: int,
    seed: int,
    param_dtype: torch.dtype,
    check: bool,
    prefetch: int,
) -> dict:
    device = rank_device()
    rank, world = dist.get_rank(), dist.get_world_size()
    # the same weights as TrainingStep's with this seed
    model = build_model(config, seed=seed, device=device, dtype=param_dtype)
    prepare_model(model, recipe, device)
    compute = parse_dtype(recipe.dtype)
    sharded = FSDP(
        LossModel(model, recipe.head),
        compute_dtype=None if compute == torch.float32 else compute,
        prefetch=prefetch,
    )
    optimizer = make_optimizer(sharded, recipe)
    inputs, targets = random_batch(config.vocab_size, batch_size, seq_len, device, seed)
    share = batch_size // world
    inputs, targets = (t[rank * share : (rank + 1) * share] for t in (inputs, targets))

    def loss_and_backward() -> Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = sharded(inputs, targets)
        loss.backward()
        sharded.finish_gradient_synchronization()
        return loss.detach()

    def step() -> None:
        loss_and_backward()
        optimizer.step()

    def full(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
        return {name.removeprefix("model."): value.cpu() for name, value in tensors.items()}

    loss = loss_and_backward().to(torch.float64)
    grads = full(sharded.gather_full_grads()) if check else None
    optimizer.step()
    params = full(sharded.gather_full_params()) if check else None
    next_loss = None
    if check:
        with torch.no_grad():
            next_loss = sharded(inputs, targets).detach().to(torch.float64)
        dist.all_reduce(next_loss)
    dist.all_reduce(loss)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timing = time_fn(step, warmup=warmup, steps=steps, device=device)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return {
        "loss": float(loss) / world,
        "next_loss": None if next_loss is None else float(next_loss) / world,
        "samples": list(timing.samples),
        "peak": peak,
        "grads": grads if rank == 0 else None,
        "params": params if rank == 0 else None,
    }


def sharded_training_step(
    config: ModelConfig,
    recipe: Recipe,
    batch_size: int,
    seq_len: int,
    world_size: int,
    *,
    warmup: int = 1,
    steps: int = 3,
    seed: int = 0,
    param_dtype: torch.dtype = torch.float32,
    check: bool = False,
    backend: str = "auto",
    prefetch: int = 1,
) -> ShardedStep:
    """``steps`` timed AdamW steps (after one untimed step, kept for ``check``, and ``warmup``
    more) of ``config`` run by ``recipe`` under FSDP on ``world_size`` ranks, each on
    ``batch_size / world_size`` of the global batch's sequences. A low-precision recipe dtype
    becomes FSDP's compute dtype (weights gathered and computed in it; master weights, gradients
    and AdamW's state in ``param_dtype``). ``check``: also return the first step's full
    gradients, the full parameters after it and the same batch's loss with them. ``prefetch``:
    FSDP's gathers started ahead."""
    if batch_size % world_size:
        raise ValueError(
            f"batch_size ({batch_size}) must be a multiple of world_size ({world_size}): each "
            "rank trains on an equal part of the global batch"
        )
    config = sized_for(config, seq_len)
    results = launch(
        _rank,
        world_size,
        (config, recipe, batch_size, seq_len, warmup, steps, seed, param_dtype, check, prefetch),
        backend=backend,
        parameters=config.num_parameters(),
    )
    slowest = [max(times) for times in zip(*(r["samples"] for r in results), strict=True)]
    peaks = [r["peak"] for r in results if r["peak"] is not None]
    return ShardedStep(
        world_size,
        batch_size * seq_len,
        results[0]["loss"],
        slowest,
        max(peaks) if peaks else None,
        results[0]["grads"],
        results[0]["params"],
        results[0]["next_loss"],
    )


def check_sharded_step(
    config: ModelConfig,
    recipe: Recipe,
    batch_size: int,
    seq_len: int,
    world_size: int,
    *,
    seed: int = 0,
    param_dtype=torch.float32,
    tolerance: float | None = None,
    prefetch: int = 1,
) -> dict:
    """One sharded step on ``world_size`` ranks, and the loss of a second forward, against the
    same recipe in one process (``compare_with_one_process``)."""
    sharded = sharded_training_step(
        config,
        recipe,
        batch_size,
        seq_len,
        world_size,
        warmup=0,
        steps=1,
        seed=seed,
        param_dtype=param_dtype,
        check=True,
        prefetch=prefetch,
    )
    return compare_with_one_process(
        sharded,
        config,
        recipe,
        batch_size,
        seq_len,
        seed=seed,
        param_dtype=param_dtype,
        tolerance=tolerance,
    )


def compare_with_one_process(
    sharded: ShardedStep,
    config: ModelConfig,
    recipe: Recipe,
    batch_size: int,
    seq_len: int,
    *,
    seed: int = 0,
    param_dtype=torch.float32,
    tolerance: float | None = None,
) -> dict:
    """A sharded step (run with ``check=True`` and the same arguments) against the same recipe
    in one process on the whole batch (the same weights and batch): the loss, every gradient
    (within ``tolerance``, default ``TOLERANCE`` of the dtype) and every parameter's update in
    the first AdamW step (within ``UPDATE_TOLERANCE``, or ``tolerance`` when given), as
    relative errors (max |a - b| / max |b|). The update is the single process's AdamW stepping
    from the sharded step's gradients, which isolates the sharded optimizer: Adam's first update
    g / (|g| + eps) magnifies the rounding of gradients near zero, and is blind to their scale,
    so the gradients are checked on their own (as ``check_ladder`` does). Then the same batch's
    loss after that step, within ``tolerance``: it shows the sharded model's next forward
    computes with the updated weights (one once ran on weights gathered before the step)."""
    if sharded.grads is None or sharded.params is None or sharded.next_loss is None:
        raise ValueError("compare_with_one_process needs a sharded step run with check=True")
    single = TrainingStep(
        sized_for(config, seq_len),
        recipe,
        batch_size,
        seq_len,
        torch.device("cpu"),
        seed,
        param_dtype,
    )
    loss = float(single.loss_and_backward())
    named = dict(single.model.named_parameters())
    grads = {name: p.grad.detach().clone() for name, p in named.items()}
    before = {name: p.detach().clone() for name, p in named.items()}
    for name, param in named.items():  # the update from the sharded step's own gradients
        param.grad = sharded.grads[name].to(param.dtype)
    single.optimizer.step()
    next_loss = float(single.loss())

    def relative(a: Tensor, b: Tensor) -> float:
        return relative_error(a.double(), b.detach().double())

    errors = {
        "loss_error": abs(sharded.loss - loss) / abs(loss),
        "next_loss_error": abs(sharded.next_loss - next_loss) / abs(next_loss),
        "grad_error": max(relative(sharded.grads[n], g) for n, g in grads.items()),
        "update_error": max(
            relative(sharded.params[n] - before[n], p - before[n]) for n, p in named.items()
        ),
    }
    limit = tolerance_for(recipe.dtype) if tolerance is None else tolerance
    update_limit = UPDATE_TOLERANCE if tolerance is None else tolerance
    return {
        "world_size": sharded.world_size,
        **errors,
        "tolerance": limit,
        "update_tolerance": update_limit,
        "matches_single_process": errors["loss_error"] <= limit
        and errors["next_loss_error"] <= limit
        and errors["grad_error"] <= limit
        and errors["update_error"] <= update_limit,
    }


def block_bytes_per_token(
    config: ModelConfig, dtype: torch.dtype = torch.bfloat16, seq_len: int = 256
) -> float:
    """Bytes one block saves for backward per token with FlashAttention (no seq x seq matrix),
    in ``dtype``: the slope between ``seq_len`` and twice that, counted on the meta device."""
    from perflab.implementations.attention.flash_torch import flash_attention_torch

    counts = []
    for length in (seq_len, 2 * seq_len):
        with torch.device("meta"):
            model = build_model(config, context=length, layers=1, dtype=dtype)
            model.set_attention(flash_attention_torch)
            x = torch.randn(1, length, config.d_model, dtype=dtype, requires_grad=True)
        counts.append(saved_bytes(saved_tensors(lambda: model.blocks[0](x), model.parameters())))  # noqa: B023
    return (counts[1] - counts[0]) / seq_len


def sharded_step_memory(
    config: ModelConfig,
    batch_size: int,
    seq_len: int,
    world_sizes: list[int],
    *,
    state_dtype: str = "float32",
    compute_dtype: str = "bfloat16",
) -> pd.DataFrame:
    """Per rank, in GB, a lower bound on what one FSDP step with the fused head, FlashAttention
    and checkpointing at every block holds at its peak: the shards of the parameters, gradients
    and AdamW's two moments (P / W values each, in ``state_dtype``), every block's input kept
    for the recomputation (L x tokens x d in ``compute_dtype``), one block's saved activations
    while it is recomputed (``block_bytes_per_token`` x tokens), one chunk of the head's logits
    (``default_chunk_size`` tokens x V; float32, with the compute-dtype matmul output beside it),
    and the largest module's transients in backward (its weight gathered and its gradient, in
    ``compute_dtype``, a float32 gradient accumulator and the float32 buffer that is
    reduce-scattered: the V x d head or embedding). Counted parts, not a measured peak: the
    allocator's fragmentation and the CUDA context come on top. Beside the total,
    ``unchecked_activations_GB``: what every block's saved activations would take without
    checkpointing, which shows where checkpointing is needed."""
    state = torch.finfo(parse_dtype(state_dtype)).bits // 8
    compute = parse_dtype(compute_dtype)
    width = torch.finfo(compute).bits // 8
    per_token = block_bytes_per_token(config, compute)
    params = config.num_parameters()
    largest = config.vocab_size * config.d_model
    rows = []
    for world in world_sizes:
        if world < 1 or batch_size % world:
            raise ValueError(f"world size {world} must divide the batch of {batch_size}")
        tokens = batch_size // world * seq_len
        chunk = default_chunk_size(tokens, config.vocab_size, config.d_model)
        parts = {
            "parameters": state * params / world,
            "gradients": state * params / world,
            "AdamW moments": 2 * state * params / world,
            "block inputs (checkpoints)": config.num_layers * tokens * config.d_model * width,
            "one block recomputed": per_token * tokens,
            "head chunk logits": chunk * config.vocab_size * (4 + width),
            "largest module's transients": largest * (2 * width + 4 + 4),
        }
        rows.append(
            {
                "world_size": world,
                "tokens_per_rank": tokens,
                **{k: v / GB for k, v in parts.items()},
                "at_least_GB": sum(parts.values()) / GB,
                "unchecked_activations_GB": config.num_layers * per_token * tokens / GB,
            }
        )
    return pd.DataFrame(rows)


def sharded_step_row(
    preset: str,
    recipe: Recipe,
    batch_size: int,
    seq_len: int,
    world_size: int,
    *,
    steps: int,
    state: str = "float32",
    check: bool = False,
) -> tuple[dict | None, str]:
    """``sharded_training_step`` of ``preset`` as one row (time, tokens/s, peak, whether its
    samples are unstable; with ``check`` also ``compare_with_one_process``'s columns), or None
    and why not: more ranks than this machine holds, or a rank out of memory."""
    if world_size > max_world_size():
        return None, (
            f"the sharded step needs {world_size} ranks; this machine holds {max_world_size()}: "
            "not run here"
        )
    config, param_dtype = get_preset(preset), parse_dtype(state)
    try:
        sharded = sharded_training_step(
            config,
            recipe,
            batch_size,
            seq_len,
            world_size,
            warmup=0,
            steps=steps,
            param_dtype=param_dtype,
            check=check,
        )
    except RuntimeError as error:
        if not is_out_of_memory(error):
            raise
        return None, f"out of memory on a rank: {state} state does not fit, as counted above"
    row = {
        "preset": preset,
        "world_size": world_size,
        "dtype": recipe.dtype,
        "state": state,
        "tokens": sharded.tokens,
        "steps": len(sharded.step_s),
        "step_s": sharded.median_s,
        "tokens_per_s": sharded.tokens / sharded.median_s,
        "loss": sharded.loss,
        "peak_bytes": sharded.peak_bytes,
        "unstable": is_unstable(sharded.step_s),
    }
    if check:
        row.update(
            compare_with_one_process(
                sharded, config, recipe, batch_size, seq_len, param_dtype=param_dtype
            )
        )
    return row, ""
