"""The training-step ladder of notebook 09: each optimisation tried on top of the best stack so
far (``greedy_ladder``), checked against the baseline (loss, gradients, the AdamW update) and
timed against that stack, interleaved, with a verdict; kept only when it pays off
(``keep_rung``). ``stack_against_baseline`` times the kept stack against the baseline.

A rung is a ``Recipe`` (``perflab.bench.recipe``: dtype, Q, K, V projection, loss head,
attention, AdamW's implementation, ``torch.compile``, activation checkpointing). The baseline
projects Q, K and V with three matmuls, as an unfused model would; the workbook's model fuses
them (``QKVProjection``), and the ladder's "fused QKV" rung measures that.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from perflab.bench.recipe import Recipe, make_loss, make_optimizer, prepare_model
from perflab.bench.steps import random_batch
from perflab.implementations.model import ModelConfig, build_model
from perflab.measure.comparison import Comparison, compare
from perflab.measure.device import dtype_name, parse_dtype, synchronize
from perflab.measure.stats import ROUNDS
from perflab.measure.timeline import peak_memory
from perflab.measure.timer import PhaseClock

#: The ladder's first rung: the workbook's model with Q, K and V projected by three matmuls.
BASELINE = Recipe("baseline", qkv="separate")

#: The changes of the ladder, in the order of the full profile (a GPU).
CHANGES = {
    "fused QKV": {"qkv": "fused"},
    "bf16 autocast": {"dtype": "bfloat16"},
    "fused loss head": {"head": "fused"},
    "FlashAttention": {"attention": "flash"},
    "SDPA": {"attention": "sdpa"},
    "foreach AdamW": {"optimizer": "foreach"},
    "fused AdamW": {"optimizer": "fused"},
    "torch.compile": {"compiled": True},
    "activation checkpointing": {"checkpoint_group": 1},
}


def ladder(rungs: list[str] | None = None) -> list[Recipe]:
    """The baseline, then one rung per change in ``rungs`` (default: all of ``CHANGES``), in
    the order given, each keeping every change before it."""
    if isinstance(rungs, str):
        raise ValueError(
            f"rungs must be a list of change names, e.g. [{rungs!r}]; got the string {rungs!r}"
        )
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

    def __init__(
        self,
        config: ModelConfig,
        recipe: Recipe,
        batch_size: int,
        seq_len: int,
        device: torch.device,
        seed: int = 0,
        param_dtype=torch.float32,
    ):
        self.recipe = recipe
        self.device = device
        self.tokens = batch_size * seq_len
        self.model = build_model(config, seed=seed, device=device, dtype=param_dtype)
        prepare_model(self.model, recipe, device)
        self.optimizer = make_optimizer(self.model, recipe)
        self.inputs, self.targets = random_batch(
            config.vocab_size, batch_size, seq_len, device, seed
        )
        self._loss = make_loss(self.model, recipe, device)

    def loss(self) -> torch.Tensor:
        """The batch's loss with the current weights, no backward (no graph kept)."""
        with torch.no_grad():
            return self._loss(self.inputs, self.targets)

    def loss_and_backward(
        self, clock: PhaseClock | None = None, micro_batches: int = 1
    ) -> torch.Tensor:
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
        for inputs, targets in zip(
            self.inputs.chunk(micro_batches), self.targets.chunk(micro_batches), strict=True
        ):
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


def check_ladder(
    config: ModelConfig,
    recipes: list[Recipe],
    batch_size: int,
    seq_len: int,
    device: torch.device,
    seed: int = 0,
    param_dtype=torch.float32,
    tolerance: float | None = None,
) -> pd.DataFrame:
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
            "grad_error": max(
                relative_error(a, _wide(b)) for a, b in zip(grads, base_grads, strict=True)
            ),
            "update_error": max(
                relative_error(_wide(p) - b, u)
                for p, b, u in zip(run.model.parameters(), before, base_updates, strict=True)
            ),
        }
        limit = tolerance_for(recipe.dtype) if tolerance is None else tolerance
        update_limit = UPDATE_TOLERANCE if tolerance is None else tolerance
        rows.append(
            {
                "rung": recipe.name,
                **errors,
                "tolerance": limit,
                "update_tolerance": update_limit,
                "matches_baseline": errors["loss_error"] <= limit
                and errors["grad_error"] <= limit
                and errors["update_error"] <= update_limit,
            }
        )
    return pd.DataFrame(rows)


def check_rung(
    config: ModelConfig,
    recipe: Recipe,
    batch_size: int,
    seq_len: int,
    device: torch.device,
    **kwargs,
) -> dict:
    """``check_ladder`` for one recipe, as a dict."""
    return check_ladder(config, [recipe], batch_size, seq_len, device, **kwargs).iloc[0].to_dict()


def keep_rung(verdict: str, peak_bytes: float, best_peak_bytes: float) -> bool:
    """A change is kept when it makes the step faster, or keeps its time (the same within the
    noise band) with a lower peak; slower, inconclusive or the same at no memory gain: dropped."""
    return verdict == "faster" or (verdict == "same" and peak_bytes < best_peak_bytes)


#: ``greedy_ladder``'s columns, present whether or not any change was timed.
GREEDY_COLUMNS = [
    "rung",
    "tried_on",
    "kept",
    "reason",
    "matches_baseline",
    "verdict",
    "vs_best",
    "ci_low",
    "ci_high",
    "confidence",
    "rounds",
    "base_step_s",
    "step_s",
    "first_step_s",
    "peak_bytes",
    "trace",
    "trace_base",
]


def greedy_ladder(
    config: ModelConfig,
    changes: list[str],
    batch_size: int,
    seq_len: int,
    device: torch.device,
    *,
    rounds: int = ROUNDS,
    warmup: int = 1,
    seed: int = 0,
    budget_s: float | None = None,
    trace_dir: str | Path | None = None,
    trace_steps: int = 2,
) -> tuple[pd.DataFrame, Recipe]:
    """Each change of ``changes``, in order, tried on top of the best stack so far: checked
    against the baseline (``check_rung``), then timed against the best stack, interleaved
    (``compare``, adaptive rounds within ``budget_s``), and kept only when ``keep_rung`` says so.
    Returns one row per rung, kept or dropped (``tried_on``: the stack it was tried on;
    ``vs_best`` with its interval, confidence and verdict; ``first_step_s``: the first step,
    which compiles a compiled rung; ``peak_bytes`` of forward and backward above the
    parameters and AdamW's state), and the kept stack's recipe (named by its changes). With
    ``trace_dir``, a profiler trace of ``trace_steps`` steps of the baseline and of every rung
    tried, for ``ladder_traces.greedy_bound_table`` (``trace``, and ``trace_base``: the trace
    of the stack it was tried on)."""
    from perflab.measure.capture import record_trace

    ladder(changes)  # the same validation: known names, none twice
    best = BASELINE
    best_run = TrainingStep(config, best, batch_size, seq_len, device, seed)
    start = time.perf_counter()
    best_run.step()
    first = time.perf_counter() - start
    best_run.model.zero_grad(set_to_none=True)
    best_peak = peak_memory(best_run.loss_and_backward, device)
    rows = [
        {
            "rung": best.name,
            "tried_on": "",
            "kept": True,
            "verdict": "",
            "reason": "the start",
            "first_step_s": first,
            "peak_bytes": best_peak,
        }
    ]
    kept_names: list[str] = []

    def trace(run: TrainingStep, index: int, name: str) -> str:
        if trace_dir is None:
            return ""
        path = Path(trace_dir) / f"greedy_{_slug(index, name)}"
        return str(record_trace(run.step, path, device, warmup=0, steps=trace_steps))

    rows[0]["trace"] = trace(best_run, 0, best.name)
    best_row = rows[0]
    for index, name in enumerate(changes, start=1):
        stack = " + ".join(kept_names) or "baseline"
        trial = dataclasses.replace(best, name=name, **CHANGES[name])
        row = {"rung": name, "tried_on": stack, "kept": False}
        if dataclasses.replace(trial, name=best.name) == best:
            rows.append({**row, "reason": "already in the stack"})
            continue
        run = TrainingStep(config, trial, batch_size, seq_len, device, seed)
        synchronize(device)
        start = time.perf_counter()
        run.step()  # first, so that a compiled rung's compile time is this step's
        synchronize(device)  # a GPU's kernels finish after the launches return
        row["first_step_s"] = time.perf_counter() - start
        check = check_rung(config, trial, batch_size, seq_len, device, seed=seed + 1)
        row["matches_baseline"] = bool(check["matches_baseline"])
        if not row["matches_baseline"]:
            rows.append({**row, "reason": "differs from the baseline beyond its tolerance"})
            continue
        run.model.zero_grad(set_to_none=True)
        row["peak_bytes"] = peak_memory(run.loss_and_backward, device)
        result = compare(
            best_run.step,
            run.step,
            rounds=rounds,
            warmup=warmup,
            device=device,
            names=(stack, name),
            budget_s=budget_s,
        )
        row.update(
            base_step_s=float(np.median(result.times_a)),
            step_s=float(np.median(result.times_b)),
            vs_best=result.ratio,
            ci_low=result.ci[0],
            ci_high=result.ci[1],
            confidence=result.confidence,
            rounds=result.rounds,
            verdict=result.verdict,
            trace_base=best_row.get("trace", ""),
            trace=trace(run, index, name),
        )
        row["kept"] = keep_rung(result.verdict, row["peak_bytes"], best_peak)
        row["reason"] = (
            ("faster" if result.verdict == "faster" else "the same, less memory")
            if row["kept"]
            else f"{result.verdict}: dropped"
        )
        rows.append(row)
        if row["kept"]:  # a change of the same field (SDPA, then FlashAttention) replaces it
            kept_names = [n for n in kept_names if not set(CHANGES[n]) & set(CHANGES[name])]
            kept_names.append(name)
            best, best_run, best_peak, best_row = trial, run, row["peak_bytes"], row
        else:
            del run
    name = " + ".join(kept_names) or BASELINE.name
    return pd.DataFrame(rows).reindex(columns=GREEDY_COLUMNS), dataclasses.replace(best, name=name)


def _slug(index: int, name: str) -> str:
    return f"{index:02d}_{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}.json.gz"


def stack_against_baseline(
    config: ModelConfig,
    stack: Recipe,
    batch_size: int,
    seq_len: int,
    device: torch.device,
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    seed: int = 0,
    budget_s: float | None = None,
) -> Comparison:
    """The kept stack against the baseline, interleaved: the verdict on the whole ladder
    (``Comparison``; its speed-up is ``1 / ratio``, the interval inverted likewise). Two
    warm-up rounds: the baseline's first step here is cold, and the fastest warm-up round plans
    the adaptive looks."""
    base = TrainingStep(config, BASELINE, batch_size, seq_len, device, seed)
    best = TrainingStep(config, stack, batch_size, seq_len, device, seed)
    best.step()  # compiles a compiled stack before the timed rounds
    return compare(
        base.step,
        best.step,
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=(BASELINE.name, stack.name),
        budget_s=budget_s,
    )


def kv_heads_against_mha(
    config: ModelConfig,
    kv_heads: int,
    recipe: Recipe,
    batch_size: int,
    seq_len: int,
    device: torch.device,
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    seed: int = 0,
) -> Comparison:
    """The training step of ``config`` with ``kv_heads`` key and value heads (grouped-query
    attention) against the same model with multi-head attention, both run by ``recipe``,
    interleaved (ratio = grouped / multi-head), with both parameter counts in its details."""
    grouped_config = dataclasses.replace(
        config, name=f"{config.name} ({kv_heads} kv heads)", num_kv_heads=kv_heads
    )
    mha = TrainingStep(config, recipe, batch_size, seq_len, device, seed)
    grouped = TrainingStep(grouped_config, recipe, batch_size, seq_len, device, seed)
    result = compare(
        mha.step,
        grouped.step,
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=("multi-head", f"{kv_heads} kv heads"),
    )
    return result.with_labels(heads=config.num_heads, kv_heads=kv_heads).with_details(
        parameters_mha=config.num_parameters(),
        parameters_grouped=grouped_config.num_parameters(),
    )
