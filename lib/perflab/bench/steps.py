"""What the workbook times: a forward pass, forward + backward, and a full AdamW training step.

``BenchConfig`` is one configuration (a CSV row's inputs); ``build_step`` makes its model and
step function; ``run_benchmark`` times the step with the one timer and returns the row;
``benchmark_sweep`` runs many through the sweep runner. Used by ``perflab bench`` and notebooks
01 and 03 (timings), 02 (profiled steps) and 04 (peak memory).
"""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import pandas as pd
import torch

from perflab.bench.recipe import (
    ATTENTIONS,
    HEADS,
    OPTIMIZERS,
    QKV,
    Recipe,
    autocast_context,
    make_loss,
    make_optimizer,
    prepare_model,
)
from perflab.implementations.model import (
    PRESET_ALIASES,
    PRESETS,
    AttentionFn,
    ModelConfig,
    TransformerLM,
    build_model,
    cross_entropy,
    get_preset,
    sized_for,
)
from perflab.implementations.model_loading import load_model_class
from perflab.measure.comparison import Comparison, compare, paired_comparison
from perflab.measure.device import DTYPES, describe, resolve_device
from perflab.measure.ranges import annotate
from perflab.measure.stats import ROUNDS
from perflab.measure.sweep import Sweep
from perflab.measure.timer import TIMING_METHOD, PhaseClock, Timing, time_fn

#: forward: logits and loss with autograd recording, as in training;
#: forward-backward: that plus ``loss.backward()``; train-step: that plus ``AdamW.step()``.
MODES = ("forward", "forward-backward", "train-step")


#: Options that change perflab's model itself, not how a step runs: not for ``--model``.
PERFLAB_MODEL_ONLY = ("qkv", "attention", "head", "checkpoint_group")

#: The model's shape, each taken from the preset unless given.
MODEL_FIELDS = ("d_model", "d_ff", "num_layers", "num_heads", "vocab_size")


def _shape(name: str) -> dict:
    return {"help": f"the model's {name} (default: the preset's)", "minimum": 1, "optional": True}


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark configuration; validated on construction with one-line errors.

    The model is the preset's, with any of ``MODEL_FIELDS`` given instead (left out, they are
    filled in from the preset, so a configuration always names its shape); the step is run by
    the ``Recipe`` of ``dtype``, ``qkv``, ``attention``, ``head``, ``optimizer``, ``compile`` and
    ``checkpoint_group`` (``perflab.bench.recipe``). Declared once: ``perflab bench``'s
    arguments (``add_arguments``, ``from_arguments``), the command line that runs a
    configuration in another process (``command_line``) and a sweep's key (``sweep``) are
    derived from these fields and their ``help`` and ``choices``.
    """

    preset: str = field(metadata={"help": "model size", "choices": (*PRESETS, *PRESET_ALIASES)})
    context_length: int = field(
        metadata={
            "help": "tokens per sequence, any length (default: the preset's context)",
            "minimum": 1,
        }
    )
    mode: str = field(metadata={"help": "what one step does", "choices": MODES})
    batch_size: int = field(default=4, metadata={"help": "sequences per step", "minimum": 1})
    warmup: int = field(default=5, metadata={"help": "untimed steps", "minimum": 0})
    steps: int = field(default=10, metadata={"help": "timed steps", "minimum": 1})
    dtype: str = field(
        default="float32",
        metadata={"help": "float32, or autocast to a lower precision", "choices": tuple(DTYPES)},
    )
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda or cuda:N"})
    d_model: int | None = field(default=None, metadata=_shape("width"))
    d_ff: int | None = field(default=None, metadata=_shape("feed-forward width"))
    num_layers: int | None = field(default=None, metadata=_shape("number of blocks"))
    num_heads: int | None = field(default=None, metadata=_shape("number of attention heads"))
    vocab_size: int | None = field(default=None, metadata=_shape("vocabulary"))
    qkv: str = field(
        default="fused",
        metadata={
            "help": "Q, K, V projected by one matmul (fused) or three (separate)",
            "choices": QKV,
        },
    )
    attention: str = field(
        default="naive",
        metadata={
            "help": "naive; flash (the Triton kernels on a GPU, tiled PyTorch on a CPU); sdpa",
            "choices": ATTENTIONS,
        },
    )
    head: str = field(
        default="plain",
        metadata={
            "help": "loss head: plain (logits + F.cross_entropy) or fused (chunked, never the "
            "whole logits)",
            "choices": HEADS,
        },
    )
    optimizer: str = field(
        default="for-loop",
        metadata={"help": "AdamW's implementation (train-step)", "choices": OPTIMIZERS},
    )
    compile: bool = field(default=False, metadata={"help": "torch.compile the forward and loss"})
    checkpoint_group: int | None = field(
        default=None,
        metadata={
            "help": "activation checkpointing every N blocks (default: none)",
            "minimum": 1,
            "optional": True,
        },
    )
    model: str = field(
        default="",
        metadata={
            "help": "your model class, package.module:Class, built with the course's "
            "BasicsTransformerLM arguments in the preset's shape (default: perflab's "
            "TransformerLM)"
        },
    )

    @classmethod
    def add_arguments(
        cls,
        parser,
        count_type: Callable[[int], Callable[[str], int]],
        more_choices: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        """One ``--field-name`` option per field (a flag for ``compile``); ``count_type(minimum)``
        parses an integer field with its minimum; ``more_choices`` adds choices to a field's
        (``perflab bench``'s ``--mode decode``, run by ``perflab.lessons.nb10_decoding.roofline``).
        ``--context-length`` and the model's shape may be left out."""
        for f in fields(cls):
            options = {"help": f.metadata["help"]}
            if isinstance(f.default, bool):
                options.update(action="store_true")
                parser.add_argument("--" + f.name.replace("_", "-"), **options)
                continue
            if "minimum" in f.metadata:
                options["type"] = count_type(f.metadata["minimum"])
            if "choices" in f.metadata:
                extra = (more_choices or {}).get(f.name, ())
                options["choices"] = [*f.metadata["choices"], *extra]
            if f.name == "context_length":
                options["default"] = None
            elif f.default is f.default_factory:  # no default: required
                options["required"] = True
            else:
                options["default"] = f.default
            parser.add_argument("--" + f.name.replace("_", "-"), **options)

    @classmethod
    def from_arguments(cls, args) -> BenchConfig:
        """The configuration parsed by ``add_arguments``; a left-out context length is the
        preset's maximum."""
        values = {f.name: getattr(args, f.name) for f in fields(cls)}
        if values["context_length"] is None:
            values["context_length"] = get_preset(values["preset"]).context_length
        return cls(**values)

    def command_line(self) -> list[str]:
        """``perflab bench``'s arguments for this configuration."""
        preset, words = get_preset(self.preset), []
        for f in fields(self):
            value, flag = getattr(self, f.name), "--" + f.name.replace("_", "-")
            if f.name in MODEL_FIELDS and value == getattr(preset, f.name):
                continue  # the preset's own: left out, so that a new --preset changes it too
            if isinstance(value, bool):
                words += [flag] if value else []
            elif value not in (None, ""):
                words += [flag, str(value)]
        return words

    def __post_init__(self) -> None:
        preset = get_preset(self.preset)
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; valid: {', '.join(MODES)}")
        for f in fields(self):
            value = getattr(self, f.name)
            if "minimum" in f.metadata and not (value is None and f.metadata.get("optional")):
                minimum = f.metadata["minimum"]
                if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                    raise ValueError(f"{f.name} must be an integer >= {minimum}, got {value!r}")
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile must be True or False, got {self.compile!r}")
        for name in MODEL_FIELDS:  # the preset's value where none is given
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(preset, name))
        self.model_config()
        self.recipe  # noqa: B018 (validates dtype, attention, head, optimizer)
        if self.model:
            load_model_class(self.model)  # one line if it is malformed or does not import
            changed = [
                f"{name}={getattr(self, name)!r}"
                for name in PERFLAB_MODEL_ONLY
                if getattr(self, name) != BenchConfig.__dataclass_fields__[name].default
            ]
            if changed:
                raise ValueError(
                    f"model {self.model!r} is timed as it is: {', '.join(changed)} apply to "
                    f"perflab's TransformerLM only ({', '.join(PERFLAB_MODEL_ONLY)})"
                )

    def model_config(self) -> ModelConfig:
        """The preset with this configuration's shape, sized for its context length."""
        shape = {name: getattr(self, name) for name in MODEL_FIELDS}
        return sized_for(dataclasses.replace(get_preset(self.preset), **shape), self.context_length)

    @property
    def recipe(self) -> Recipe:
        """How the step runs (``perflab.bench.recipe``)."""
        return Recipe(
            self.preset,
            dtype=self.dtype,
            qkv=self.qkv,
            head=self.head,
            attention=self.attention,
            optimizer=self.optimizer,
            compiled=self.compile,
            checkpoint_group=self.checkpoint_group,
        )

    @classmethod
    def from_recipe(
        cls, recipe: Recipe, preset: str, context_length: int, mode: str, **fields_
    ) -> BenchConfig:
        """The configuration that runs ``recipe`` (e.g. a rung of notebook 09's ladder)."""
        return cls(
            preset,
            context_length,
            mode,
            dtype=recipe.dtype,
            qkv=recipe.qkv,
            attention=recipe.attention,
            head=recipe.head,
            optimizer=recipe.optimizer,
            compile=recipe.compiled,
            checkpoint_group=recipe.checkpoint_group,
            **fields_,
        )

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def filled_key(cls, row: dict) -> dict:
        """The fields that a row of an older sweep file (written before they existed) lacks or
        left blank, at the values it was measured with: the preset's shape and the defaults."""
        missing = [f for f in fields(cls) if row.get(f.name, "") == "" and f.name != "preset"]
        try:
            preset = get_preset(row.get("preset", ""))
        except ValueError:  # no preset, or one renamed since: the row stays as written
            return {}
        return {
            f.name: getattr(preset, f.name) if f.name in MODEL_FIELDS else f.default
            for f in missing
            if f.default is not dataclasses.MISSING
        }

    @classmethod
    def sweep(cls, path: str | Path, metadata: dict | None = None) -> Sweep:
        """A ``Sweep`` keyed by every field, which reads older files too (``filled_key``)."""
        return Sweep(
            path, key=[f.name for f in fields(cls)], metadata=metadata, fill_key=cls.filled_key
        )


def random_batch(
    vocab_size: int, batch_size: int, seq_len: int, device: torch.device, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and their next-token targets, the same for a given seed."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(vocab_size, (batch_size, seq_len + 1), generator=generator)
    tokens = tokens.to(device)
    return tokens[:, :-1], tokens[:, 1:]


def make_step(
    model: TransformerLM,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    mode: str,
    dtype: torch.dtype = torch.float32,
    optimizer: torch.optim.Optimizer | None = None,
    clock: PhaseClock | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> Callable[[], None]:
    """A zero-argument function that runs one step of ``mode``; with a ``clock``, each step's
    forward (with zero_grad and the loss), backward and optimizer times are recorded in it.

    The loss is ``loss_fn(inputs, targets)`` (``perflab.bench.recipe.make_loss``), by default
    the model's logits and ``cross_entropy`` under autocast to ``dtype``. ``train-step`` needs
    an optimizer; gradients are reset with ``set_to_none`` at each step.
    The step and its parts are annotated with the ranges "step", "forward", "backward" and
    "optimizer" (``perflab.measure.ranges``), visible to nsys and torch.profiler.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    if mode == "train-step" and optimizer is None:
        raise ValueError("mode 'train-step' needs an optimizer")
    device = inputs.device
    if loss_fn is None:

        def loss_fn(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            with autocast_context(device, dtype):
                return cross_entropy(model(inputs), targets)

    mark = clock.mark if clock else lambda phase: None

    def step() -> None:
        if clock:
            clock.start()
        with annotate("step"):
            model.zero_grad(set_to_none=True)
            with annotate("forward"):
                loss = loss_fn(inputs, targets)
            mark("forward")
            if mode != "forward":
                with annotate("backward"):
                    loss.backward()
                mark("backward")
            if mode == "train-step":
                with annotate("optimizer"):
                    optimizer.step()
                mark("optimizer")
        if clock:
            clock.finish()

    return step


def build_step(
    config: BenchConfig,
    device: torch.device,
    seed: int = 0,
    attention_fn: AttentionFn | None = None,
    clock: PhaseClock | None = None,
) -> Callable[[], None]:
    """The model (on ``device``, ``config.device`` resolved by the caller), optimizer and
    random batch of ``config``, and the step function that uses them, run by the config's
    recipe; ``attention_fn`` replaces the recipe's attention, ``clock`` records the phases of
    each step."""
    model_config = config.model_config()
    recipe = config.recipe
    # initialised on the device: no full-size copy in host memory
    model = build_model(model_config, seed=seed, device=device, model_class=config.model or None)
    if not config.model:
        prepare_model(model, recipe, device)
    if attention_fn is not None:
        if config.model:
            raise ValueError(f"attention_fn replaces perflab's attention, not {config.model}'s")
        model.set_attention(attention_fn)
    optimizer = make_optimizer(model, recipe, lr=1e-4) if config.mode == "train-step" else None
    inputs, targets = random_batch(
        model_config.vocab_size, config.batch_size, config.context_length, device, seed
    )
    loss_fn = make_loss(model, recipe, device)
    step = make_step(
        model, inputs, targets, config.mode, optimizer=optimizer, clock=clock, loss_fn=loss_fn
    )
    step.num_parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return step


def run_benchmark(config: BenchConfig, seed: int = 0) -> tuple[dict, Timing]:
    """Build the preset's model, time ``config.mode`` and return (result row, timing).

    The row holds the full configuration, the model's shape, device and library versions,
    the timing statistics, tokens/s and achieved FLOP/s (training FLOPs from
    ``ModelConfig.train_step_flops`` for the modes with a backward, forward FLOPs otherwise).
    """
    device = resolve_device(config.device)
    model_config = config.model_config()
    clock = PhaseClock(device)
    step = build_step(config, device, seed=seed, clock=clock)
    num_parameters = _num_parameters(config, model_config, step)
    try:
        timing = time_fn(step, warmup=config.warmup, steps=config.steps, device=device)
    finally:
        del step  # the model and optimizer live in its closure
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()

    tokens = config.batch_size * config.context_length
    if config.mode == "forward":
        flops = model_config.forward_flops(config.batch_size, config.context_length)
    else:
        flops = model_config.train_step_flops(config.batch_size, config.context_length)
    info = describe(device)
    row = {
        **config.as_dict(),
        "device": info["device"],
        "device_name": info["device_name"],
        "torch": info["torch"],
        "d_model": model_config.d_model,
        "d_ff": model_config.d_ff,
        "num_layers": model_config.num_layers,
        "num_heads": model_config.num_heads,
        "vocab_size": model_config.vocab_size,
        "num_parameters": num_parameters,
        "tokens_per_step": tokens,
        "flops_per_step": flops,
        **timing.summary(),
        "tokens_per_s": tokens / timing.median,
        "achieved_flops_per_s": flops / timing.median,
        **phase_columns(clock.last(config.steps)),
    }
    return row, timing


def _num_parameters(config: BenchConfig, model_config: ModelConfig, step) -> int:
    """perflab's count from the shapes, or yours counted on the model the step trains. The
    FLOPs, and so MFU, are perflab's model's: the same for the course's architecture."""
    if not config.model:
        return model_config.num_parameters()
    return step.num_parameters


PHASES = ("forward", "backward", "optimizer")


def phase_columns(steps: list[dict[str, float]]) -> dict:
    """Mean seconds of each phase over the timed steps (they add up to the mean clocked step)
    and every step's phases as JSON text (``phase_samples_s``) for intervals."""
    names = [p for p in PHASES if steps and p in steps[0]]
    samples = {p: [s[p] for s in steps] for p in names}
    means = {f"{p}_phase_s": sum(v) / len(v) for p, v in samples.items()}
    return {**means, "phase_samples_s": json.dumps(samples)}


def measure_in_process(config: dict) -> dict:
    """Sweep measure function: ``run_benchmark`` in this process; samples kept as JSON text."""
    row, timing = run_benchmark(BenchConfig(**config))
    return {**row, "samples_s": json.dumps(list(timing.samples))}


def benchmark_sweep(
    path: str | Path,
    configs: Sequence[BenchConfig],
    *,
    measure: Callable[[dict], dict] = measure_in_process,
    resume: bool = True,
    metadata: dict | None = None,
    desc: str | None = None,
) -> pd.DataFrame:
    """Benchmark every configuration through a ``Sweep`` keyed by all of ``BenchConfig``'s
    fields: each row lands in ``path`` as soon as it is measured, and a re-run skips it. (Every
    sweep of the workbook takes its file first, then what it measures.)"""
    meta = {"timing_method": TIMING_METHOD, **(metadata or {})}
    sweep = BenchConfig.sweep(path, metadata=meta)
    return sweep.run([c.as_dict() for c in configs], measure, resume=resume, desc=desc)


def compare_configs(
    config_a: BenchConfig,
    config_b: BenchConfig,
    device: torch.device,
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    budget_s: float | None = None,
    names: tuple[str, str] | None = None,
    clocks: tuple[PhaseClock, PhaseClock] | None = None,
) -> Comparison:
    """The steps of two configurations (e.g. float32 and bfloat16 autocast) built side by side
    and timed interleaved by ``perflab.bench.compare`` (adaptive rounds within ``budget_s``
    seconds when given): b against a, named by ``names`` or by the values they differ in.
    ``clocks`` record each call's phases (``phase_comparisons`` reads them)."""
    clock_a, clock_b = clocks or (None, None)
    step_a = build_step(config_a, device, clock=clock_a)
    step_b = build_step(config_b, device, clock=clock_b)
    names = names or (_difference(config_a, config_b), _difference(config_b, config_a))
    try:
        return compare(
            step_a,
            step_b,
            rounds=rounds,
            warmup=warmup,
            device=device,
            names=names,
            budget_s=budget_s,
        )
    finally:
        del step_a, step_b
        gc.collect()


def phase_comparisons(
    step: Comparison, clock_a: PhaseClock, clock_b: PhaseClock, warmup: int
) -> list[Comparison]:
    """Each phase (forward, backward, optimizer) of b against a, labelled with ``phase`` (after
    the step's own labels), paired by the rounds of the
    interleaved ``step`` comparison the clocks recorded: ``compare`` calls each step ``warmup``
    times, then twice a round and keeps the faster call; the phases kept are that call's. A
    secondary reading of the same rounds: their number was chosen for the whole step's
    verdict, and each phase's interval is the paired one at the default confidence."""
    rounds = len(step.times_a)
    for clock in (clock_a, clock_b):
        if len(clock.steps) != warmup + 2 * rounds:
            raise ValueError(
                f"a clock holds {len(clock.steps)} steps; {warmup} warm-up and 2 x {rounds} "
                "rounds need the clocks of this comparison's calls only"
            )

    def kept(clock: PhaseClock) -> list[dict[str, float]]:
        calls = clock.steps[warmup:]
        pairs = zip(calls[0::2], calls[1::2], strict=True)
        return [min(first, second, key=lambda c: sum(c.values())) for first, second in pairs]

    phases_a, phases_b = kept(clock_a), kept(clock_b)
    names = [p for p in PHASES if p in phases_a[0] and p in phases_b[0]]
    return [
        paired_comparison(
            [c[phase] for c in phases_a],
            [c[phase] for c in phases_b],
            names=(step.name_a, step.name_b),
            noise_band=step.noise_band,
        ).with_labels(**step.labels, phase=phase)
        for phase in names
    ]


def bf16_against_fp32(
    presets,
    context_length: int,
    batch_size: int,
    device: torch.device,
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    budget_s: float | None = None,
) -> list[Comparison]:
    """Per preset, the bfloat16-autocast training step against the float32 one
    (``compare_configs``, labelled with ``preset`` and the phase "step"), then each phase of it
    (forward, backward, optimizer: ``phase_comparisons`` of the same rounds, labelled with
    ``preset`` and ``phase``). A preset whose two steps do not fit in memory together (two
    models with their AdamW states at once: xl on 80 GB) has no comparison."""
    comparisons = []
    for preset in presets:
        fp32 = BenchConfig(
            preset=preset,
            context_length=context_length,
            mode="train-step",
            batch_size=batch_size,
            dtype="float32",
            device=str(device),
        )
        clocks = (PhaseClock(device), PhaseClock(device))
        try:
            step = compare_configs(
                fp32,
                dataclasses.replace(fp32, dtype="bfloat16"),
                device,
                rounds=rounds,
                warmup=warmup,
                budget_s=budget_s,
                clocks=clocks,
            ).with_labels(preset=preset)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            continue
        comparisons += [step.with_labels(phase="step"), *phase_comparisons(step, *clocks, warmup)]
    return comparisons


def _difference(config: BenchConfig, other: BenchConfig) -> str:
    """The values of the fields in which ``config`` differs from ``other`` (its name)."""
    changed = [f.name for f in fields(config) if getattr(config, f.name) != getattr(other, f.name)]
    return ", ".join(str(getattr(config, name)) for name in changed) or config.preset
