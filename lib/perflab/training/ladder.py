"""The training-step ladder of notebook 09: one recipe per rung, each adding one optimisation
to the rung before, every rung checked against the baseline (loss, gradients, parameters after
one AdamW step) and timed against the rung before, interleaved, with a verdict.

A rung is a ``Recipe`` (``perflab.bench.recipe``: dtype, Q, K, V projection, loss head,
attention, AdamW's implementation, ``torch.compile``, activation checkpointing). The baseline
projects Q, K and V with three matmuls, as an unfused model would; the workbook's model fuses
them (``QKVProjection``), and the ladder's "fused QKV" rung measures that.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import torch

from perflab.bench.comparison import compare
from perflab.bench.recipe import Recipe, make_loss, make_optimizer, prepare_model
from perflab.bench.steps import random_batch
from perflab.bench.timer import PhaseClock
from perflab.device import dtype_name, parse_dtype
from perflab.memory.timeline import peak_memory
from perflab.model import ModelConfig, TransformerLM

#: The ladder's first rung: the workbook's model with Q, K and V projected by three matmuls.
BASELINE = Recipe("baseline", qkv="separate")

#: The changes of the ladder, in the order of the full profile (a GPU).
CHANGES = {
    "fused QKV": {"qkv": "fused"},
    "bf16 autocast": {"dtype": "bfloat16"},
    "fused loss head": {"head": "fused"},
    "FlashAttention": {"attention": "flash"},
    "foreach AdamW": {"optimizer": "foreach"},
    "fused AdamW": {"optimizer": "fused"},
    "torch.compile": {"compiled": True},
}


def ladder(rungs: list[str] | None = None) -> list[Recipe]:
    """The baseline, then one rung per change in ``rungs`` (default: all of ``CHANGES``), in
    the order given, each keeping every change before it."""
    if isinstance(rungs, str):
        raise ValueError(f"rungs must be a list of change names, e.g. [{rungs!r}]; got the "
                         f"string {rungs!r}")  # fmt: skip
    rungs = list(CHANGES) if rungs is None else list(rungs)
    unknown = [name for name in rungs if name not in CHANGES]
    if unknown:
        raise ValueError(f"unknown rungs {unknown}; valid: {', '.join(CHANGES)}")
    repeated = sorted({name for name in rungs if rungs.count(name) > 1})
    if repeated:
        raise ValueError(f"rungs {repeated} are given more than once; each change is one rung")
    recipes = [BASELINE]
    for name in rungs:
        recipes.append(dataclasses.replace(recipes[-1], name=name, **CHANGES[name]))
    return recipes


class TrainingStep:
    """A model, an AdamW and one random batch, run by ``recipe``; the same ``seed`` gives the
    same weights and batch whatever the recipe."""

    def __init__(self, config: ModelConfig, recipe: Recipe, batch_size: int, seq_len: int,
                 device: torch.device, seed: int = 0, param_dtype=torch.float32):  # fmt: skip
        self.recipe = recipe
        self.device = device
        self.tokens = batch_size * seq_len
        torch.manual_seed(seed)
        with torch.device(device):
            self.model = TransformerLM(config).to(param_dtype)
        prepare_model(self.model, recipe, device)
        self.optimizer = make_optimizer(self.model, recipe)
        self.inputs, self.targets = random_batch(config.vocab_size, batch_size, seq_len,
                                                 device, seed)  # fmt: skip
        self._loss = make_loss(self.model, recipe, device)

    def loss_and_backward(self, clock: PhaseClock | None = None,
                          micro_batches: int = 1) -> torch.Tensor:  # fmt: skip
        """zero_grad, then forward and backward; with ``micro_batches`` > 1 the batch is
        split and the gradients accumulated, each micro-batch's loss divided by their count,
        which gives the full batch's mean-loss gradient (equal micro-batches)."""
        mark = clock.mark if clock else lambda phase: None
        batch = self.inputs.shape[0]
        if micro_batches < 1 or batch % micro_batches:
            raise ValueError(
                f"micro_batches must divide the batch of {batch} sequences, got {micro_batches}"
            )
        self.model.zero_grad(set_to_none=True)
        total = None
        for inputs, targets in zip(self.inputs.chunk(micro_batches),
                                   self.targets.chunk(micro_batches), strict=True):  # fmt: skip
            loss = self._loss(inputs, targets) / micro_batches
            mark("forward")
            loss.backward()
            mark("backward")
            total = loss.detach() if total is None else total + loss.detach()
        return total

    def step(self, clock: PhaseClock | None = None, micro_batches: int = 1) -> None:
        """One training step: zero_grad, forward and loss, backward, AdamW; with a ``clock``,
        the three phases' times are recorded in it."""
        if clock:
            clock.start()
        self.loss_and_backward(clock, micro_batches)
        self.optimizer.step()
        if clock:
            clock.mark("optimizer")
            clock.finish()

    def set_batch(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """Train on this batch from now on (moved to the step's device)."""
        self.inputs = inputs.to(self.device, non_blocking=True)
        self.targets = targets.to(self.device, non_blocking=True)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b|: the error against the reference's scale."""
    scale = b.abs().max().clamp_min(torch.finfo(b.dtype).tiny)
    return float((a - b).abs().max() / scale)


#: Largest relative error of loss and gradients accepted against the baseline: reordered
#: float32 sums (the fused head's chunks, FlashAttention's tiles) stay far below 1e-4;
#: bfloat16 (8 bits of mantissa) needs a few percent on gradients.
TOLERANCE = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 1e-2}


def tolerance_for(dtype: str | torch.dtype) -> float:
    """``TOLERANCE`` of a recipe's dtype under any name ``Recipe`` accepts ("bf16", "fp16",
    ``torch.bfloat16`` ...)."""
    name = dtype_name(parse_dtype(dtype))
    if name not in TOLERANCE:
        raise ValueError(f"no tolerance for dtype {name}; known: {', '.join(TOLERANCE)}")
    return TOLERANCE[name]


#: The update's: float32 values near 1 are 1.2e-7 apart (2.4e-7 near 2-3, where embedding
#: weights reach), up to about 1e-4 of an update of lr = 1e-3, so two float32 AdamW
#: implementations differ by that much; 1e-3 still catches an update wrong by a tenth of a
#: percent.
UPDATE_TOLERANCE = 1e-3


def _wide(tensor: torch.Tensor) -> torch.Tensor:
    """A detached copy (never a view of the live tensor) in float32 at least (float64 stays
    float64), for comparing."""
    return tensor.detach().to(torch.promote_types(tensor.dtype, torch.float32), copy=True)


def check_ladder(config: ModelConfig, recipes: list[Recipe], batch_size: int, seq_len: int,
                 device: torch.device, seed: int = 0, param_dtype=torch.float32,
                 tolerance: float | None = None) -> pd.DataFrame:  # fmt: skip
    """Each recipe against the baseline on the same weights and a fresh random batch
    (``seed``): the loss, every gradient, and each optimizer's update (new minus old
    parameters) from the same (the baseline's) gradients, as relative errors against the
    baseline's, and whether each is within ``tolerance`` (default: ``TOLERANCE`` of the
    recipe's dtype, and ``UPDATE_TOLERANCE`` for the update; the tests run float64 parameters
    with a far tighter one for all three). An Adam step divides by sqrt(v), which magnifies any
    difference of near-zero gradients; stepping from the same gradients isolates the
    optimizer's own implementation."""
    base = TrainingStep(config, BASELINE, batch_size, seq_len, device, seed, param_dtype)
    base_loss = _wide(base.loss_and_backward())
    base_grads = [p.grad.detach().clone() for p in base.model.parameters()]
    before = [_wide(p) for p in base.model.parameters()]  # every run starts from these
    base.optimizer.step()
    base_updates = [_wide(p) - b for p, b in zip(base.model.parameters(), before, strict=True)]
    rows = []
    for recipe in recipes:
        run = TrainingStep(config, recipe, batch_size, seq_len, device, seed, param_dtype)
        loss = _wide(run.loss_and_backward())
        grads = [_wide(p.grad) for p in run.model.parameters()]
        for param, grad in zip(run.model.parameters(), base_grads, strict=True):
            param.grad = grad.clone().to(param.dtype)
        run.optimizer.step()
        errors = {
            "loss_error": relative_error(loss, base_loss),
            "grad_error": max(relative_error(a, _wide(b))
                              for a, b in zip(grads, base_grads, strict=True)),
            "update_error": max(
                relative_error(_wide(p) - b, u)
                for p, b, u in zip(run.model.parameters(), before, base_updates, strict=True)
            ),
        }  # fmt: skip
        limit = tolerance_for(recipe.dtype) if tolerance is None else tolerance
        update_limit = UPDATE_TOLERANCE if tolerance is None else tolerance
        rows.append({"rung": recipe.name, **errors, "tolerance": limit,
                     "update_tolerance": update_limit,
                     "matches_baseline": errors["loss_error"] <= limit
                     and errors["grad_error"] <= limit
                     and errors["update_error"] <= update_limit})  # fmt: skip
    return pd.DataFrame(rows)


def check_rung(config: ModelConfig, recipe: Recipe, batch_size: int, seq_len: int,
               device: torch.device, **kwargs) -> dict:  # fmt: skip
    """``check_ladder`` for one recipe, as a dict."""
    return check_ladder(config, [recipe], batch_size, seq_len, device, **kwargs).iloc[0].to_dict()


def time_ladder(config: ModelConfig, recipes: list[Recipe], batch_size: int, seq_len: int,
                device: torch.device, *, rounds: int = 6, warmup: int = 1, seed: int = 0,
                budget_s: float | None = None) -> pd.DataFrame:  # fmt: skip
    """Each rung against the rung before, interleaved (``compare``: ratio, its interval and that
    interval's confidence, verdict; adaptive rounds within ``budget_s`` seconds when given),
    with its median step time, tokens/s and the peak memory of its forward and backward above
    the parameters and the optimizer state (``peak_memory``: activations, logits, gradients;
    the optimizer's own temporaries are ``step_memory``'s).

    Two cumulative speed-ups: ``speedup_over_baseline`` from medians of different comparisons,
    and ``chained_speedup``, the product of the paired ratios rung by rung (each from its own
    interleaved rounds: a chain of estimates, with no interval of its own). Drift between the
    comparisons can pull the two apart."""
    if len(recipes) < 2:
        raise ValueError(
            "time_ladder compares each rung with the one before: it needs the baseline and at "
            f"least one rung, got {len(recipes)} recipe(s)"
        )
    rows, previous = [], None
    for recipe in recipes:
        run = TrainingStep(config, recipe, batch_size, seq_len, device, seed)
        run.step()  # gradients and AdamW state exist from here on; compiled rungs compile
        run.model.zero_grad(set_to_none=True)  # made again inside the recording
        row = {"rung": recipe.name, "peak_bytes": peak_memory(run.loss_and_backward, device)}
        if previous is not None:
            result = compare(previous.step, run.step, rounds=rounds, warmup=warmup,
                             device=device, names=(previous.recipe.name, recipe.name),
                             budget_s=budget_s)  # fmt: skip
            rows[-1].setdefault("step_s", float(np.median(result.times_a)))  # the baseline
            row.update(step_s=float(np.median(result.times_b)), vs_previous=result.ratio,
                       ci_low=result.ci[0], ci_high=result.ci[1],
                       confidence=result.confidence, rounds=result.rounds,
                       verdict=result.verdict)  # fmt: skip
        rows.append(row)
        previous = run
    frame = pd.DataFrame(rows)
    tokens = batch_size * seq_len
    frame["tokens_per_s"] = tokens / frame["step_s"]
    # Medians from different comparisons: a cumulative speed-up, not an interleaved verdict.
    frame["speedup_over_baseline"] = frame.loc[0, "step_s"] / frame["step_s"]
    if "vs_previous" in frame:
        frame["chained_speedup"] = 1 / frame["vs_previous"].fillna(1.0).cumprod()
    return frame
