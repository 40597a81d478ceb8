"""What the workbook times: a forward pass, forward + backward, and a full AdamW training step.

``BenchConfig`` is one configuration (a CSV row's inputs); ``build_step`` makes its model and
step function; ``run_benchmark`` times the step with the one timer and returns the row;
``benchmark_sweep`` runs many through the sweep runner. Used by ``perflab bench`` and notebooks
01 and 03 (timings), 02 (profiled steps) and 04 (peak memory).
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import pandas as pd
import torch

from perflab.bench.comparison import Comparison, compare
from perflab.bench.sweep import Sweep
from perflab.bench.timer import TIMING_METHOD, PhaseClock, Timing, time_fn
from perflab.device import DTYPES, describe, parse_dtype, resolve_device
from perflab.model import (
    PRESET_ALIASES,
    PRESETS,
    AttentionFn,
    TransformerLM,
    cross_entropy,
    get_preset,
    sized_for,
)
from perflab.ranges import annotate

#: forward: logits and loss with autograd recording, as in training;
#: forward-backward: that plus ``loss.backward()``; train-step: that plus ``AdamW.step()``.
MODES = ("forward", "forward-backward", "train-step")


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark configuration; validated on construction with one-line errors.

    Declared once: ``perflab bench``'s arguments (``add_arguments``, ``from_arguments``) and the
    command line that runs a configuration in another process (``command_line``) are derived
    from these fields and their ``help`` and ``choices``.
    """

    preset: str = field(metadata={"help": "model size", "choices": (*PRESETS, *PRESET_ALIASES)})
    context_length: int = field(metadata={
        "help": "tokens per sequence, any length (default: the preset's context)",
        "minimum": 1})  # fmt: skip
    mode: str = field(metadata={"help": "what one step does", "choices": MODES})
    batch_size: int = field(default=4, metadata={"help": "sequences per step", "minimum": 1})
    warmup: int = field(default=5, metadata={"help": "untimed steps", "minimum": 0})
    steps: int = field(default=10, metadata={"help": "timed steps", "minimum": 1})
    dtype: str = field(default="float32", metadata={
        "help": "float32, or autocast to a lower precision", "choices": tuple(DTYPES)})  # fmt: skip
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda or cuda:N"})

    @classmethod
    def add_arguments(cls, parser, count_type: Callable[[int], Callable[[str], int]]) -> None:
        """One ``--field-name`` option per field; ``count_type(minimum)`` parses an integer
        field with its minimum. ``--context-length`` may be left out."""
        for f in fields(cls):
            options = {"help": f.metadata["help"]}
            if "minimum" in f.metadata:
                options["type"] = count_type(f.metadata["minimum"])
            if "choices" in f.metadata:
                options["choices"] = list(f.metadata["choices"])
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
        return [
            text
            for f in fields(self)
            for text in ("--" + f.name.replace("_", "-"), str(getattr(self, f.name)))
        ]

    def __post_init__(self) -> None:
        get_preset(self.preset)
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; valid: {', '.join(MODES)}")
        for f in fields(self):
            if "minimum" in f.metadata:
                value, minimum = getattr(self, f.name), f.metadata["minimum"]
                if not isinstance(value, int) or value < minimum:
                    raise ValueError(f"{f.name} must be an integer >= {minimum}, got {value!r}")
        parse_dtype(self.dtype)

    def as_dict(self) -> dict:
        return asdict(self)


def autocast_context(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for a low-precision dtype, nothing for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


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
) -> Callable[[], None]:
    """A zero-argument function that runs one step of ``mode``; with a ``clock``, each step's
    forward (with zero_grad and the loss), backward and optimizer times are recorded in it.

    ``train-step`` needs an optimizer; gradients are reset with ``set_to_none`` at each step.
    The step and its parts are annotated with the ranges "step", "forward", "backward" and
    "optimizer" (``perflab.ranges``), visible to nsys and torch.profiler.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    if mode == "train-step" and optimizer is None:
        raise ValueError("mode 'train-step' needs an optimizer")
    device = inputs.device

    mark = clock.mark if clock else lambda phase: None

    def step() -> None:
        if clock:
            clock.start()
        with annotate("step"):
            model.zero_grad(set_to_none=True)
            with annotate("forward"), autocast_context(device, dtype):
                loss = cross_entropy(model(inputs), targets)
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
    random batch of ``config``, and the step function that uses them; ``attention_fn``
    replaces the model's attention, ``clock`` records the phases of each step."""
    model_config = sized_for(get_preset(config.preset), config.context_length)
    torch.manual_seed(seed)
    with torch.device(device):  # initialise on the device: no full-size copy in host memory
        model = TransformerLM(model_config, attention_fn=attention_fn)
    optimizer = (
        torch.optim.AdamW(model.parameters(), lr=1e-4) if config.mode == "train-step" else None
    )
    inputs, targets = random_batch(
        model_config.vocab_size, config.batch_size, config.context_length, device, seed
    )
    dtype = parse_dtype(config.dtype)
    return make_step(model, inputs, targets, config.mode, dtype, optimizer, clock)


def run_benchmark(config: BenchConfig, seed: int = 0) -> tuple[dict, Timing]:
    """Build the preset's model, time ``config.mode`` and return (result row, timing).

    The row holds the full configuration, the model's shape, device and library versions,
    the timing statistics, tokens/s and achieved FLOP/s (training FLOPs from
    ``ModelConfig.train_step_flops`` for the modes with a backward, forward FLOPs otherwise).
    """
    device = resolve_device(config.device)
    model_config = get_preset(config.preset)
    clock = PhaseClock(device)
    step = build_step(config, device, seed=seed, clock=clock)
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
        "num_parameters": model_config.num_parameters(),
        "tokens_per_step": tokens,
        "flops_per_step": flops,
        **timing.summary(),
        "tokens_per_s": tokens / timing.median,
        "achieved_flops_per_s": flops / timing.median,
        **phase_columns(clock.last(config.steps)),
    }
    return row, timing


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
    configs: Sequence[BenchConfig],
    path: str | Path,
    *,
    measure: Callable[[dict], dict] = measure_in_process,
    resume: bool = True,
    metadata: dict | None = None,
    desc: str | None = None,
) -> pd.DataFrame:
    """Benchmark every configuration through a ``Sweep`` keyed by all of ``BenchConfig``'s
    fields: each row lands in ``path`` as soon as it is measured, and a re-run skips it."""
    key = list(BenchConfig.__dataclass_fields__)
    meta = {"timing_method": TIMING_METHOD, **(metadata or {})}
    sweep = Sweep(path, key=key, metadata=meta)
    return sweep.run([c.as_dict() for c in configs], measure, resume=resume, desc=desc)


def compare_configs(config_a: BenchConfig, config_b: BenchConfig, device: torch.device, *,
                    rounds: int = 10, warmup: int = 2) -> Comparison:  # fmt: skip
    """The steps of two configurations (e.g. float32 and bfloat16 autocast) built side by side
    and timed interleaved by ``perflab.bench.compare``: b against a."""
    step_a, step_b = build_step(config_a, device), build_step(config_b, device)
    names = (_difference(config_a, config_b), _difference(config_b, config_a))
    try:
        return compare(step_a, step_b, rounds=rounds, warmup=warmup, device=device, names=names)
    finally:
        del step_a, step_b
        gc.collect()


def _difference(config: BenchConfig, other: BenchConfig) -> str:
    """The values of the fields in which ``config`` differs from ``other`` (its name)."""
    changed = [f.name for f in fields(config) if getattr(config, f.name) != getattr(other, f.name)]
    return ", ".join(str(getattr(config, name)) for name in changed) or config.preset
