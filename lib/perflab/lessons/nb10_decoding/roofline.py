"""How close a decode step comes to its roofline: ``perflab bench --mode decode`` and notebook
10's batch sweep.

The step of each cache, as ``generate`` runs it, held at one context so that every timed call
does the same work:

- "contiguous": ``StaticDecoder``, the fixed-shape step (each new key and value written at its
  sequence's position in a cache of context + 1 slots, attention over all of them); the one
  ``compiled`` compiles, since its shapes never change and one graph serves every token;
- "paged": ``cached_logits`` over a ``PagedKVCache`` (each sequence's blocks gathered through
  its block table);
- "none": the whole sequence of context + 1 tokens run again for its last token's logits.

The paged and no-cache steps change shape at every token of a real generation: compiled at one
context they would time a graph that generation compiles again at the next token (notebook 10,
section 5), so only the fixed-shape step is compiled.

What a step must move and compute is counted from the shapes (``costs``); the copy bandwidth
and the matmul peak are measured in the same run, as maxima (the best of several runs,
``perflab.measure.peak``); the roofline is the lower of ``bandwidth / bytes per token`` and
``peak / FLOPs per token`` (Williams et al. 2009), and ``fraction_of_roofline`` is the median
step's tokens/s over it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from functools import partial

import torch
from torch import Tensor

from perflab.implementations.decode import CACHES
from perflab.implementations.decode.caches import PagedKVCache
from perflab.implementations.decode.decoder import StaticDecoder, cached_logits
from perflab.implementations.model import ModelConfig, TransformerLM, get_preset
from perflab.lessons.nb10_decoding.costs import decode_cost, recompute_cost, rooflines
from perflab.lessons.nb10_decoding.inputs import (
    check_batch,
    check_context,
    element_bytes,
    inference_model,
    random_prompts,
)
from perflab.measure.device import (
    describe,
    last_level_cache_bytes,
    parse_dtype,
    resolve_device,
    synchronize,
)
from perflab.measure.paths import library_tree, library_versions
from perflab.measure.peak import (
    CopyBandwidth,
    PeakMatmul,
    measure_copy_bandwidth,
    measure_peak_matmul,
)
from perflab.measure.stats import is_unstable
from perflab.measure.timer import Timing, time_fn

COMPILED_NEEDS_FIXED_SHAPES = (
    "compile needs the fixed-shape step, cache 'contiguous' (StaticDecoder): the paged and "
    "no-cache steps change shape at every token, so a graph compiled at one context is "
    "compiled again at the next"
)


def decode_step(
    model: TransformerLM,
    cache: str,
    batch: int,
    context: int,
    *,
    compiled: bool = False,
    mode: str | None = None,
    freeze: bool = False,
    block_size: int = 16,
    seed: int = 0,
) -> Callable[[], Tensor]:
    """A decode step of ``batch`` sequences at ``context`` tokens each (random prompts,
    prefilled), set back to ``context`` before every call; it returns the logits (batch,
    vocab). ``compiled``: the fixed-shape step under ``torch.compile`` with ``mode`` (compiled
    at its first call; "reduce-overhead" records it as a CUDA graph on a GPU), static shapes.
    Dynamo keeps what it compiled by the shapes it guards on, not by the decoder object, so a
    later step of the same model shape, batch and context reuses the compiled graph (no second
    compile) until ``torch._dynamo.reset()``, except a frozen one, whose graph dynamo guards on
    its own decoder's cache buffers; ``compiled_graphs()`` counts the compilations.
    ``freeze``: compile with inductor's freezing (``compile_options``): the weights become
    constants of the graph, and on a CPU (where ``cpu_gemm_template_applies``: float32 with
    MKL, for example) each linear becomes inductor's C++ GEMM template, its weight packed once
    into the template's blocked layout and a micro-kernel generated for the step's shape."""
    check_context(model, context)
    check_batch(batch)
    if cache not in CACHES:
        raise ValueError(f"unknown cache {cache!r}; valid: {', '.join(CACHES)}")
    if compiled and cache != "contiguous":
        raise ValueError(COMPILED_NEEDS_FIXED_SHAPES)
    weight = next(model.parameters())
    device = weight.device
    options = compile_options(compiled, mode, freeze, device, weight.dtype)
    prompts = random_prompts(model.config.vocab_size, [context] * batch, seed)
    tokens = torch.zeros(batch, dtype=torch.long, device=device)
    if cache == "contiguous":
        decoder = StaticDecoder(model, batch, context + 1)
        decoder.prefill(prompts)
        positions = torch.full((batch,), context, device=device)
        if not compiled:
            run = decoder
        elif options:  # compiled through its own function: dynamo's cache keeps it apart
            frozen = torch.compile(_frozen_call, mode=mode, fullgraph=True, dynamic=False)
            run = _compile_first_call_with(partial(frozen, decoder), options)
        else:
            run = torch.compile(decoder, mode=mode, fullgraph=True, dynamic=False)
        return torch.no_grad()(lambda: run(tokens, positions))
    if cache == "none":
        sequences = torch.tensor([p + [0] for p in prompts], device=device)
        return torch.no_grad()(lambda: model(sequences)[:, -1])
    rows = list(range(batch))
    kv = PagedKVCache(model, batch * math.ceil((context + 1) / block_size), block_size)
    with torch.no_grad():
        for row, prompt in zip(rows, prompts, strict=True):
            kv.reserve(row, context + 1)
            cached_logits(model, kv, [row], torch.tensor([prompt], device=device))

    @torch.no_grad()
    def paged_step() -> Tensor:
        kv.lengths = dict.fromkeys(rows, context)
        return cached_logits(model, kv, rows, tokens[:, None])

    return paged_step


#: Inductor's options for a frozen step: parameters folded into the graph as constants, valid
#: while the weights do not change.
FREEZE_OPTIONS = {"freezing": True}

#: With frozen weights on a CPU, inductor's own C++ GEMM template for every linear layer: the
#: weight packed once into the template's blocked layout and a micro-kernel generated for the
#: step's shapes (batch rows), instead of MKL's packed sgemm, which was slower at a decode
#: step's few rows on the 2-core CPU this was measured on. "CPP" alone, not "CPP,ATEN": with
#: both, inductor times each candidate at compile time, at every batch size. Alone,
#: it leaves no ATen kernel to fall back on except where freezing made the linear MKL's or
#: oneDNN's packed one (``cpu_gemm_template_applies``).
CPU_GEMM_TEMPLATE = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "CPP"}

#: Inductor's option that wraps each C++ kernel of a compiled CPU graph in a profiler range
#: named after it ("graph_0_gemm_m1n1024k256_kernel", "graph_0_cpp_fused_..."); without it the
#: profiler sees one call to the whole graph. A frozen CPU step is compiled with it, so that
#: notebook 10's profile can tell its GEMM kernels from its other kernels and reuse the step
#: its throughput table compiled; with no profiler running, each range is a check that no
#: profiler listens.
KERNEL_PROFILE = {"cpp.enable_kernel_profile": True}


def cpu_gemm_template_applies(dtype: torch.dtype | None) -> bool:
    """Whether a frozen CPU step of weights in ``dtype`` asks for ``CPU_GEMM_TEMPLATE``: where
    freezing packs its linears for MKL (float32, a build with MKL) or oneDNN (bfloat16,
    float16, where this CPU supports them), whose lowering falls back to ATen for a shape the
    template refuses. Elsewhere (float64, which the template has no kernel for; no MKL; inductor
    told not to prepack weights) a refused matmul would find no kernel at all."""
    if not torch._inductor.config.cpp.weight_prepack:
        return False
    if dtype == torch.float32:
        return torch.backends.mkl.is_available()
    if dtype == torch.bfloat16:
        return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if dtype == torch.float16:
        return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_fp16_supported()
    return False


def compile_options(
    compiled: bool,
    mode: str | None,
    freeze: bool,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> dict:
    """Inductor's configuration for a decode step's compilation: none without ``freeze``; with
    it (which needs a compiled step, in the default mode or "reduce-overhead"),
    ``FREEZE_OPTIONS``, and on a CPU ``KERNEL_PROFILE`` too, and ``CPU_GEMM_TEMPLATE`` where
    ``cpu_gemm_template_applies`` to the weights' dtype. It is patched in around the first
    call, where the compilation happens (``torch.compile``'s own ``options`` do not reach
    freezing)."""
    if not freeze:
        return {}
    if not compiled:
        raise ValueError("freeze applies to a compiled step: pass compiled=True with it")
    if mode not in (None, "default", "reduce-overhead"):
        raise ValueError(
            f"freeze combines with the default mode or 'reduce-overhead', got mode {mode!r}"
        )
    on_cpu = device is not None and torch.device(device).type == "cpu"
    if not on_cpu:
        return dict(FREEZE_OPTIONS)
    gemm = CPU_GEMM_TEMPLATE if cpu_gemm_template_applies(dtype) else {}
    return {**FREEZE_OPTIONS, **gemm, **KERNEL_PROFILE}


def _frozen_call(decoder: StaticDecoder, tokens: Tensor, positions: Tensor) -> Tensor:
    """The frozen step's entry point. Dynamo keeps compiled graphs by code object and guards,
    and inductor's config is not among the guards: compiled through this function, a frozen
    step neither reuses nor replaces the plain compiled step of the same shape."""
    return decoder(tokens, positions)


def _compile_first_call_with(run: Callable, options: dict) -> Callable:
    """``run`` whose first call (the compilation) happens under inductor's ``options``."""
    if not options:
        return run
    pending = [True]

    def call(*args):
        if pending:
            pending.clear()
            with torch._inductor.config.patch(options):
                return run(*args)
        return run(*args)

    return call


def compiled_graphs() -> int:
    """Graphs dynamo has built in this process (each a compilation; ``torch._dynamo.reset()``
    does not set the count back)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def time_decode(
    step: Callable[[], Tensor], device: torch.device, *, warmup: int, steps: int
) -> tuple[Timing, float]:
    """Seconds of ``step``'s first call (its compilation, for a compiled step), then
    ``time_fn``'s timing of ``steps`` calls after ``warmup`` more."""
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    first = time.perf_counter() - start
    return time_fn(step, warmup=warmup, steps=steps, device=device), first


def median_columns(timing: Timing) -> dict:
    """A timing's median, its interval with the interval's real level, and the unstable flag
    (``perflab.measure.stats.is_unstable`` of the samples)."""
    interval = timing.median_ci
    return {
        "median_s": timing.median,
        "median_ci_low_s": interval.low,
        "median_ci_high_s": interval.high,
        "median_ci_level": interval.level,
        "steps": len(timing.samples),
        "unstable": is_unstable(timing.samples),
    }


def step_cost(config: ModelConfig, cache: str, batch: int, context: int, element_size: int) -> dict:
    """FLOPs and bytes per generated token of the step of ``cache``: with a cache, the decode
    step's (``decode_cost``); without, the whole sequence's again (``recompute_cost``)."""
    if cache == "none":
        return recompute_cost(config, batch, context, element_size)
    return decode_cost(config, batch, context, element_size)


def roofline_columns(
    model: TransformerLM,
    cache: str,
    batch: int,
    context: int,
    timing: Timing,
    bandwidth: float,
    peak_flops: float,
) -> dict:
    """The row of one timed step: its median and interval, tokens/s (batch / the median, and
    the interval inverted), FLOPs and bytes per token, the two bounds from the measured
    ``bandwidth`` (bytes/s) and ``peak_flops`` (FLOP/s), the roofline, which bound it is, and
    ``fraction_of_roofline``; and the device's last-level cache (``last_level_cache_bytes``)
    beside the bytes a step moves, since a step that fits in it can beat the memory bound."""
    low, high = timing.median_ci
    cost = step_cost(model.config, cache, batch, context, element_bytes(model))
    bounds = rooflines(cost, bandwidth, peak_flops)
    tokens_per_s = batch / timing.median
    fraction = tokens_per_s / bounds["roofline_tokens_per_s"]
    return {
        **median_columns(timing),
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_low": batch / high,
        "tokens_per_s_high": batch / low,
        **cost,
        **bounds,
        "fraction_of_roofline": fraction,
        "step_bytes": cost["bytes_per_token"] * batch,
        "last_level_cache_bytes": last_level_cache_bytes(next(model.parameters()).device),
    }


def _positive(minimum: int) -> dict:
    return {"minimum": minimum}


@dataclass(frozen=True)
class DecodeConfig:
    """One decode measurement (``perflab bench --mode decode``); validated on construction with
    one-line errors. The model is the preset's ``TransformerLM`` with random weights built in
    ``dtype``; ``context_length`` is the tokens each sequence attends over."""

    preset: str = "cpu-small"
    batch_size: int = field(default=1, metadata=_positive(1))
    context_length: int = field(default=128, metadata=_positive(1))
    cache: str = "contiguous"
    compile: bool = False
    dtype: str = "float32"
    device: str = "auto"
    warmup: int = field(default=5, metadata=_positive(0))
    steps: int = field(default=20, metadata=_positive(1))
    freeze: bool = False

    def __post_init__(self) -> None:
        config = get_preset(self.preset)  # one line naming the valid presets
        for f in fields(self):
            value = getattr(self, f.name)
            if "minimum" in f.metadata and (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < f.metadata["minimum"]
            ):
                raise ValueError(
                    f"{f.name} must be an integer >= {f.metadata['minimum']}, got {value!r}"
                )
        if self.context_length >= config.context_length:
            raise ValueError(
                f"context_length must be in 1 .. {config.context_length - 1} for "
                f"{self.preset} (a decode step writes the token after it, within "
                f"the model's {config.context_length}), got "
                f"{self.context_length}"
            )
        if self.cache not in CACHES:
            raise ValueError(f"unknown cache {self.cache!r}; valid: {', '.join(CACHES)}")
        if not isinstance(self.compile, bool):
            raise ValueError(f"compile must be True or False, got {self.compile!r}")
        if self.compile and self.cache != "contiguous":
            raise ValueError(COMPILED_NEEDS_FIXED_SHAPES)
        if not isinstance(self.freeze, bool):
            raise ValueError(f"freeze must be True or False, got {self.freeze!r}")
        if self.freeze and not self.compile:
            raise ValueError("freeze applies to a compiled step: add --compile")
        parse_dtype(self.dtype)

    def as_dict(self) -> dict:
        return asdict(self)


def yardstick_columns(bandwidth: CopyBandwidth, peak: PeakMatmul) -> dict:
    """The copy bandwidth and matmul peak as ``copy_*`` and ``peak_*`` columns (each the best
    of its runs, with the median run beside it)."""
    return {f"copy_{key}": value for key, value in bandwidth.as_dict().items()} | {
        f"peak_{key}": value for key, value in peak.as_dict().items()
    }


def decode_benchmark(
    config: DecodeConfig,
    *,
    bandwidth: CopyBandwidth | None = None,
    peak: PeakMatmul | None = None,
    seed: int = 0,
) -> tuple[dict, Timing]:
    """``config``'s step timed against its roofline: (the result row, the timing). The copy
    bandwidth and the matmul peak are measured here unless given (both maxima); the row
    records the configuration, the device, the library that measured it (``library_tree``,
    versions), ``first_call_s`` (the compilation, for a compiled step: the default mode on a
    CPU, "reduce-overhead", a CUDA graph, on a GPU), the timing, tokens/s,
    FLOPs and bytes per token, the bounds and ``fraction_of_roofline``."""
    device, dtype = resolve_device(config.device), parse_dtype(config.dtype)
    model = inference_model(get_preset(config.preset), device, dtype, seed=seed)
    if bandwidth is None:
        bandwidth = measure_copy_bandwidth(device)
    if peak is None:
        peak = measure_peak_matmul(device, dtype)
    mode = "reduce-overhead" if device.type == "cuda" else None  # CUDA graphs on a GPU
    step = decode_step(
        model,
        config.cache,
        config.batch_size,
        config.context_length,
        compiled=config.compile,
        mode=mode,
        freeze=config.freeze,
        seed=seed,
    )
    try:
        timing, first = time_decode(step, device, warmup=config.warmup, steps=config.steps)
    finally:
        torch._dynamo.reset()  # a compiled step's graphs go with it
    info = describe(device)
    row = {
        **config.as_dict(),
        "device": info["device"],
        "device_name": info["device_name"],
        "cpu_threads": info["cpu_threads"],
        **library_versions(),
        "library_tree": library_tree(),
        "num_parameters": model.config.num_parameters(),
        "compile_mode": ((mode or "default") + (", frozen" if config.freeze else ""))
        if config.compile
        else None,
        "first_call_s": first,
        **roofline_columns(
            model,
            config.cache,
            config.batch_size,
            config.context_length,
            timing,
            bandwidth.bytes_per_s,
            peak.flops_per_s,
        ),
        **yardstick_columns(bandwidth, peak),
    }
    return row, timing
