"""The measurements of notebook 10, each returning a DataFrame: prefill against decode per
token, decode tokens/s against batch size beside the roofline, the three caches' tokens/s
and KV memory, the fixed-shape step eager against compiled (and how often a growing-shape step
recompiles), rotary tables, sampling on the device, grouped-query attention against
multi-head attention, and int8 weights against the original's (``compare_int8``).

Every timed decode step runs at a fixed context: the cache's lengths are set back before each
call, so that each sample does the same work. Every table of timing medians carries the
median's order-statistic interval with its real level (``median_ci_level``: 5 samples give
93.75%, 6 give 96.8%) and ``unstable`` (``perflab.measure.stats.is_unstable`` of the samples).
Comparisons go through ``perflab.bench.compare`` (interleaved rounds, an interval with its real
confidence, and a verdict: "inconclusive" below 95% or when the interval is neither inside nor
outside the noise band).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable
from functools import partial

import pandas as pd
import torch
from torch.profiler import ProfilerActivity

from perflab.implementations.decode import generate, make_cache
from perflab.implementations.decode.caches import ContiguousKVCache
from perflab.implementations.decode.decoder import StaticDecoder, cached_logits, pick
from perflab.implementations.decode.quantize import quantize_int8, weight_bytes
from perflab.implementations.model import ModelConfig, TransformerLM
from perflab.implementations.rotary import RotaryEmbedding
from perflab.lessons.nb10_decoding.costs import (
    decode_cost,
    decode_step_bytes,
    kv_bytes_per_token,
    prefill_cost,
)
from perflab.lessons.nb10_decoding.inputs import (
    check_context,
    element_bytes,
    inference_model,
    random_prompts,
)
from perflab.lessons.nb10_decoding.roofline import (
    compiled_graphs,
    decode_step,
    median_columns,
    roofline_columns,
    time_decode,
)
from perflab.measure.capture import profiling
from perflab.measure.comparison import Comparison, compare
from perflab.measure.device import synchronize
from perflab.measure.progress import progress
from perflab.measure.stats import ROUNDS
from perflab.measure.timer import time_fn


def prefill_vs_decode(
    model: TransformerLM, prompt_len: int, *, warmup: int = 2, steps: int = 5
) -> pd.DataFrame:
    """One sequence: the prompt's prefill (all ``prompt_len`` tokens in one pass) against one
    decode step at the same context, per token: time (the median, its interval with its real
    level, ``unstable``), FLOPs, bytes, FLOPs per byte and the rates they imply."""
    check_context(model, prompt_len, "prompt_len")
    device = next(model.parameters()).device
    prompt = torch.tensor(random_prompts(model.config.vocab_size, [prompt_len]), device=device)

    @torch.no_grad()
    def prefill() -> torch.Tensor:
        return cached_logits(model, ContiguousKVCache(model, 1, prompt_len), [0], prompt)

    config, element = model.config, element_bytes(model)
    rows = []
    for phase, fn, tokens, cost in (
        ("prefill", prefill, prompt_len, prefill_cost(config, prompt_len, element)),
        (
            "decode",
            decode_step(model, "contiguous", 1, prompt_len),
            1,
            decode_cost(config, 1, prompt_len, element),
        ),
    ):
        timing = time_fn(fn, warmup=warmup, steps=steps, device=device)
        per_token = timing.median / tokens
        rows.append(
            {
                "phase": phase,
                "tokens": tokens,
                **median_columns(timing),
                "s_per_token": per_token,
                **cost,
                "flops_per_byte": cost["flops_per_token"] / cost["bytes_per_token"],
                "achieved_gflops": cost["flops_per_token"] / per_token / 1e9,
                "achieved_gb_per_s": cost["bytes_per_token"] / per_token / 1e9,
            }
        )
    return pd.DataFrame(rows)


def throughput_by_batch(
    model: TransformerLM,
    batch_sizes: list[int],
    context: int,
    bandwidth: float,
    peak_flops: float,
    *,
    compiled: tuple[bool, ...] = (False,),
    mode: str | None = None,
    freeze: bool = False,
    warmup: int = 5,
    steps: int = 5,
    keep_frozen: dict | None = None,
) -> pd.DataFrame:
    """Decode tokens/s of the fixed-shape step (``StaticDecoder``, eager and/or compiled, one row
    each: ``step``; with ``freeze`` also compiled with inductor's freezing, step "frozen",
    ``decode_step``) for each batch size at ``context``: batch / the median step, with the median's
    interval at the level its ``steps`` samples give (``median_ci_level``) and ``unstable``, the
    first call's seconds (the compilation, for a compiled step: with ``mode``, e.g.
    "reduce-overhead" for CUDA graphs), and the roofline of
    ``perflab.lessons.nb10_decoding.roofline.roofline_columns`` from the measured ``bandwidth``
    (bytes/s) and ``peak_flops`` (FLOP/s). ``keep_frozen``, a dict, receives the frozen step of
    every batch size by (batch, context), each with its KV cache, for ``profile_steps`` to
    profile without compiling it again (it profiles batch 1's, and empties the dict): dynamo
    guards a frozen graph on its own decoder's cache buffers, so a new decoder of the same shape
    compiles anew (a plain compiled graph is reused by shape). That makes every frozen step one
    more graph of one function, which dynamo allows ``torch._dynamo.config.recompile_limit``
    times in a process: more batch sizes than that with ``freeze`` are refused."""
    if not batch_sizes:
        raise ValueError("batch_sizes must list at least one batch size")
    if not compiled or not all(isinstance(flag, bool) for flag in compiled):
        raise ValueError(f"compiled must list True and/or False, got {compiled!r}")
    limit = torch._dynamo.config.recompile_limit
    if freeze and len(batch_sizes) > limit:
        raise ValueError(
            f"freeze compiles a graph per batch size, at most {limit} in a process "
            f"(torch._dynamo.config.recompile_limit); got {len(batch_sizes)} batch sizes"
        )
    check_context(model, context)
    device, rows = next(model.parameters()).device, []
    kinds = [("compiled" if flag else "eager", flag, False) for flag in compiled]
    kinds += [("frozen", True, True)] if freeze else []
    for batch, (kind, flag, frozen) in progress(
        [(b, k) for b in batch_sizes for k in kinds], desc="batch sizes"
    ):
        step = decode_step(
            model, "contiguous", batch, context, compiled=flag, mode=mode, freeze=frozen
        )
        # No dynamo reset after it: a later section's step of this shape reuses the graph.
        timing, first = time_decode(step, device, warmup=warmup, steps=steps)
        if frozen and keep_frozen is not None:
            keep_frozen[batch, context] = step
        rows.append(
            {
                "batch": batch,
                "step": kind,
                "first_call_s": first,
                **roofline_columns(
                    model, "contiguous", batch, context, timing, bandwidth, peak_flops
                ),
            }
        )
    return pd.DataFrame(rows)


def compare_caches(
    model: TransformerLM,
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    rounds: int = ROUNDS,
    warmup: int = 1,
    block_size: int = 16,
) -> list[Comparison]:
    """Generation with no cache against the contiguous cache, and the contiguous against the
    paged cache (``compare``): one comparison per pair, each side's tokens/s in its details."""
    device = next(model.parameters()).device
    tokens = len(prompts) * max_new_tokens
    runs = {
        cache: partial(generate, model, prompts, max_new_tokens, cache, block_size=block_size)
        for cache in ("none", "contiguous", "paged")
    }
    results = []
    for a, b in (("none", "contiguous"), ("contiguous", "paged")):
        result = compare(
            runs[a], runs[b], rounds=rounds, warmup=warmup, device=device, names=(a, b)
        )
        results.append(
            result.with_details(
                tokens_per_s_a=tokens / result.median_a_s,
                tokens_per_s_b=tokens / result.median_b_s,
            )
        )
    return results


def kv_memory(
    model: TransformerLM, prompt_lens: list[int], new_tokens: list[int], block_sizes: list[int]
) -> pd.DataFrame:
    """KV memory of one generation of a batch of requests (prompt lengths and new tokens per
    request; a sequence leaves the batch when it has its tokens), measured from the caches as
    it runs: the contiguous cache's allocation against the paged cache's most blocks in use,
    for each block size; beside them the most bytes that held tokens at once (what any cache
    must hold), the share wasted, and the block-table entries at the peak. ``pool_bytes`` is
    what the paged pool was given here (room for every sequence at its longest at once); a
    server sizes its pool to its memory and shares it among all requests, so what a batch
    costs it is the peak in use."""
    if not block_sizes or min(block_sizes) < 1:
        raise ValueError(
            f"block_sizes must be a non-empty list of positive ints, got {block_sizes}"
        )
    prompts = random_prompts(model.config.vocab_size, prompt_lens)
    rows, peak_tokens = [], 0
    for cache, block_size in [("contiguous", None)] + [("paged", b) for b in block_sizes]:
        kv = make_cache(model, cache, prompts, new_tokens, block_size=block_size or 1)
        generate(model, prompts, new_tokens, kv)
        if cache == "paged":
            peak_tokens = kv.peak_stored_bytes
        rows.append(
            {
                "cache": cache,
                "block_size": block_size,
                "kv_bytes": kv.peak_bytes if cache == "paged" else kv.reserved_bytes,
                "pool_bytes": kv.reserved_bytes,
                "table_entries": kv.peak_blocks if cache == "paged" else None,
            }
        )
    frame = pd.DataFrame(rows)
    frame["peak_token_bytes"] = peak_tokens  # the same tokens, whatever the cache
    frame["waste"] = 1 - peak_tokens / frame["kv_bytes"]
    frame["vs_contiguous"] = frame["kv_bytes"] / frame.loc[0, "kv_bytes"]
    return frame


def compile_static_step(
    model: TransformerLM,
    batch: int,
    context: int,
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    mode: str | None = None,
) -> Comparison:
    """The fixed-shape decode step (``StaticDecoder``) eager against ``torch.compile``d (with
    ``mode``; on CUDA "reduce-overhead" captures it as a CUDA graph, recorded on a later call
    than the first), at ``context``: the compiled step's first call (``compile_s``: its
    compilation, unless a step of this shape was compiled before in this process, which
    ``graphs_compiled`` tells: 0 then), its logits' largest difference from eager and whether
    both pick the same next tokens, and the interleaved comparison."""
    device = next(model.parameters()).device
    eager = decode_step(model, "contiguous", batch, context)
    compiled = decode_step(model, "contiguous", batch, context, compiled=True, mode=mode)
    eager_logits = eager()
    graphs_before = compiled_graphs()
    synchronize(device)
    start = time.perf_counter()
    compiled_logits = compiled().clone()
    synchronize(device)
    compile_s = time.perf_counter() - start
    graphs_compiled = compiled_graphs() - graphs_before
    result = compare(
        eager, compiled, rounds=rounds, warmup=warmup, device=device, names=("eager", "compiled")
    )
    return result.with_details(
        mode=mode or "default",
        compile_s=compile_s,
        graphs_compiled=graphs_compiled,
        max_abs_diff=(eager_logits - compiled_logits).abs().max().item(),
        same_next_tokens=bool((eager_logits.argmax(-1) == compiled_logits.argmax(-1)).all()),
        tokens_per_s_eager=batch / result.median_a_s,
        tokens_per_s_compiled=batch / result.median_b_s,
    )


class _RecompileLog(logging.Handler):
    """Keeps dynamo's warnings (such as reaching its recompile limit) out of the output and
    remembers them."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _compiled_step(
    model: TransformerLM, shapes: str, prompts: list[list[int]], room: int, backend: Callable
) -> Callable[[], torch.Tensor]:
    """A decode step of ``prompts`` (all of one length) compiled with ``backend``: "growing"
    (``cached_logits``) or "fixed" (``StaticDecoder``); each call decodes the next position."""
    device, batch = next(model.parameters()).device, len(prompts)
    tokens = torch.zeros(batch, dtype=torch.long, device=device)
    rows = list(range(batch))
    if shapes == "growing":
        cache = ContiguousKVCache(model, batch, room)
        with torch.no_grad():
            cached_logits(model, cache, rows, torch.tensor(prompts, device=device))
        return torch.compile(
            lambda: cached_logits(model, cache, rows, tokens[:, None]), backend=backend
        )
    decoder = StaticDecoder(model, batch, room)
    decoder.prefill(prompts)
    compiled, position = torch.compile(decoder, backend=backend, fullgraph=True), [len(prompts[0])]

    def step() -> torch.Tensor:
        logits = compiled(tokens, torch.full((batch,), position[0], device=device))
        position[0] += 1
        return logits

    return step


def count_compilations(model: TransformerLM, batch: int, context: int, calls: int) -> pd.DataFrame:
    """Graphs ``torch.compile`` builds over ``calls`` decode steps, for the step with growing
    shapes (``cached_logits``: the keys grow by one per step, and the cache's lengths are
    Python ints that dynamo guards on) and for the fixed-shape ``StaticDecoder``: per call,
    graphs so far and seconds. A counting backend stands in for the compiler (the graphs are
    traced, not compiled), so the seconds are dynamo's tracing alone; dynamo gives up on a
    function after ``torch._dynamo.config.recompile_limit`` graphs and runs it eagerly (its
    warnings are kept in ``attrs["dynamo_warnings"]``)."""
    prompts = random_prompts(model.config.vocab_size, [context] * batch)
    rows, log = [], _RecompileLog()
    dynamo_log = logging.getLogger("torch._dynamo")
    for shapes in ("growing", "fixed"):
        graphs: list = []

        def backend(gm, example_inputs, graphs=graphs):
            graphs.append(gm)
            return gm.forward

        step = _compiled_step(model, shapes, prompts, context + 2 * calls, backend)  # never full
        dynamo_log.addHandler(log)
        previous, dynamo_log.propagate = dynamo_log.propagate, False
        try:
            with torch.no_grad():
                for call in range(calls):
                    start = time.perf_counter()
                    step()
                    rows.append(
                        {
                            "shapes": shapes,
                            "call": call + 1,
                            "graphs": len(graphs),
                            "seconds": time.perf_counter() - start,
                        }
                    )
        finally:
            dynamo_log.removeHandler(log)
            dynamo_log.propagate = previous
    # No reset here: it would drop the steps compiled for the other sections, which would then
    # compile again (the counting backend's graphs are its own: its guards name the backend).
    frame = pd.DataFrame(rows)
    frame.attrs["dynamo_warnings"] = log.messages
    return frame


def _rotary_modules(model: TransformerLM) -> list[RotaryEmbedding]:
    return [m for m in model.modules() if isinstance(m, RotaryEmbedding)]


def compare_rotary_tables(
    model: TransformerLM, batch: int, context: int, *, rounds: int = ROUNDS, warmup: int = 2
) -> Comparison:
    """A decode step with the rotary cos/sin tables computed once (at construction) against
    computing them at every step from the positions; and the logits' largest difference."""
    device = next(model.parameters()).device
    step = decode_step(model, "contiguous", batch, context)

    def with_tables(precomputed: bool) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            for module in _rotary_modules(model):
                module.precomputed = precomputed
            try:
                return step()
            finally:
                for module in _rotary_modules(model):
                    module.precomputed = True

        return run

    once, every = with_tables(True), with_tables(False)
    diff = (once() - every()).abs().max().item()
    result = compare(
        once,
        every,
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=("tables once", "tables every step"),
    )
    return result.with_details(max_abs_diff=diff)


def host_pick(logits: torch.Tensor) -> tuple[list[int], int]:
    """Greedy ids chosen on the host: the whole logits copied to host memory (a device-to-host
    transfer on a GPU; a copy on a CPU), then numpy's argmax. Returns the ids and the bytes
    that crossed."""
    on_host = logits.to("cpu", copy=True)
    return on_host.float().numpy().argmax(axis=-1).tolist(), on_host.nbytes


def device_pick(logits: torch.Tensor) -> tuple[list[int], int]:
    """Greedy ids chosen on the logits' device (``pick``); only the ids cross to the host."""
    ids = pick(logits).to("cpu")
    return ids.tolist(), ids.nbytes


def compare_sampling_place(
    model: TransformerLM, batch: int, context: int, *, rounds: int = ROUNDS, warmup: int = 2
) -> Comparison:
    """A decode step with the next ids picked on the device (ids to the host) against with
    the logits copied to the host and picked there: bytes to the host per token, measured
    from what was copied, and the interleaved comparison of the two steps."""
    device = next(model.parameters()).device
    step = decode_step(model, "contiguous", batch, context)
    logits = step()
    (device_ids, device_bytes), (host_ids, host_bytes) = device_pick(logits), host_pick(logits)
    result = compare(
        lambda: device_pick(step()),
        lambda: host_pick(step()),
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=("on the device", "on the host"),
    )
    return result.with_details(
        same_ids=device_ids == host_ids,
        device_bytes_per_token=device_bytes / batch,
        host_bytes_per_token=host_bytes / batch,
        bytes_ratio=host_bytes / device_bytes,
    )


_PARTS = (
    (
        "matmuls",
        re.compile(
            r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear)$|^mkldnn::|^mkl::|^graph_\d+_gemm_"
        ),
    ),
    ("compiled kernels", re.compile(r"^## Call CompiledFxGraph|^graph_\d+_cpp_")),
    (
        "dynamo guards and wrappers",
        re.compile(r"TorchDynamo|Torch-Compiled Region|Pregraph|AOTDispatcher|CompiledFunction"),
    ),
)
PARTS = (*(name for name, _ in _PARTS), "other operators", "Python between operators")


def profile_step(
    step: Callable[[], torch.Tensor], device: torch.device, *, warmup: int = 3, steps: int = 20
) -> pd.DataFrame:
    """Where a decode step's host time goes, from ``torch.profiler`` (each CPU operator's self
    time, per step): the matmuls (they read the weights; in a compiled CPU step, inductor's C++
    GEMM kernels too where ``roofline.KERNEL_PROFILE`` named them), inductor's compiled
    kernels, dynamo's guard checks and wrappers, the other operators, and the Python between
    operators (the wall time no operator accounts for). One row per part of ``PARTS``:
    milliseconds and calls per step, and the share. The parts sum to a profiled step, which may
    carry the profiler's own cost."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    for _ in range(warmup):
        step()
    synchronize(device)
    with profiling(activities=[ProfilerActivity.CPU]) as profiler:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        synchronize(device)
        wall = time.perf_counter() - start
    seconds, calls = dict.fromkeys(PARTS, 0.0), dict.fromkeys(PARTS, 0)
    for event in profiler.key_averages():
        part = next(
            (name for name, pattern in _PARTS if pattern.search(event.key)), "other operators"
        )
        seconds[part] += event.self_cpu_time_total / 1e6
        calls[part] += event.count
    seconds["Python between operators"] = max(wall - sum(seconds.values()), 0.0)
    frame = pd.DataFrame(
        {
            "part": PARTS,
            "ms_per_step": [seconds[p] / steps * 1e3 for p in PARTS],
            "calls_per_step": [calls[p] / steps for p in PARTS],
        }
    )
    frame["share"] = frame["ms_per_step"] / frame["ms_per_step"].sum()
    return frame


def profile_steps(
    model: TransformerLM,
    context: int,
    largest: int,
    mode: str | None,
    device: torch.device,
    freeze: bool = True,
    frozen_steps: dict | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``profile_step`` of the contiguous-cache step at ``context``: eager, compiled and (with
    ``freeze``) frozen, compiled with the weights frozen (``decode_step``), at batch 1, and
    compiled at batch ``largest``. Returns the rows of all, and two tables by part (``PARTS``)
    and step: milliseconds and calls per step.

    The compiled steps reuse what an earlier section compiled for their shapes (dynamo keeps it
    until a reset): on a GPU at the lease sizes each is an 8B model's compile saved. The frozen
    step is reused as the step itself, from ``frozen_steps`` (what ``throughput_by_batch`` kept
    for this model by batch and context), its graph being guarded on its own decoder's buffers.
    On a CPU a frozen step is compiled with ``KERNEL_PROFILE`` (``compile_options``), so that
    its GEMM kernels, which run inside inductor's code, are told apart from its other kernels
    (the other steps call ATen's). At the end dynamo is reset, as it was before section 2
    compiled, and ``frozen_steps`` emptied: a kept step compiled again after a reset would
    lose its frozen options, which only its first call applies."""
    steps = {
        "eager": (1, False, False),
        "compiled": (1, True, False),
        **({"frozen": (1, True, True)} if freeze else {}),
        f"compiled, batch {largest}": (largest, True, False),
    }
    frames = []
    for name, (batch, compiled, frozen) in steps.items():
        kept = (frozen_steps or {}).get((batch, context)) if frozen else None
        step = kept or decode_step(
            model, "contiguous", batch, context, compiled=compiled, mode=mode, freeze=frozen
        )
        frames.append(profile_step(step, device).assign(step=name, batch=batch))
    torch._dynamo.reset()
    if frozen_steps is not None:
        frozen_steps.clear()
    profiles = pd.concat(frames, ignore_index=True)
    by_part = profiles.pivot(index="part", columns="step", values="ms_per_step")
    calls = profiles.pivot(index="part", columns="step", values="calls_per_step")
    return profiles, by_part.loc[list(PARTS), list(steps)], calls.loc[list(PARTS), list(steps)]


def compare_kv_heads(
    config: ModelConfig,
    kv_heads: int,
    batch: int,
    context: int,
    device: torch.device,
    dtype: torch.dtype,
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    seed: int = 0,
    compiled: bool = True,
) -> Comparison:
    """The fixed-shape decode step (``compiled``, or eager) of ``config`` (multi-head attention)
    against the same shape with ``kv_heads`` key and value heads (grouped-query attention;
    random weights of its own), at ``batch`` sequences of ``context`` tokens, interleaved
    (ratio = grouped / multi-head): each one's parameters, KV-cache bytes per token and for the
    whole batch, the bytes a step must move (``decode_step_bytes``) and their ratio, which a
    step bound by memory would follow; tokens/s at the medians; and whether the grouped model
    decodes a few greedy tokens as its own full recomputation does."""
    grouped_config = dataclasses.replace(
        config, name=f"{config.name} ({kv_heads} kv heads)", num_kv_heads=kv_heads
    )
    models = {
        "mha": inference_model(config, device, dtype, seed),
        "grouped": inference_model(grouped_config, device, dtype, seed),
    }
    steps = {
        name: decode_step(model, "contiguous", batch, context, compiled=compiled, seed=seed)
        for name, model in models.items()
    }
    for step in steps.values():
        step()  # compiles each (when compiled) before the timed rounds
    result = compare(
        steps["mha"],
        steps["grouped"],
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=("multi-head", f"{kv_heads} kv heads"),
    )
    prompts = random_prompts(config.vocab_size, [5, 9], seed + 1)
    with torch.no_grad():
        same = generate(models["grouped"], prompts, 4, "contiguous") == generate(
            models["grouped"], prompts, 4, "none"
        )
    element = element_bytes(models["mha"])
    details = {}
    for name, shape in (("mha", config), ("grouped", grouped_config)):
        details[f"parameters_{name}"] = shape.num_parameters()
        details[f"kv_bytes_per_token_{name}"] = kv_bytes_per_token(shape, element)
        details[f"kv_cache_bytes_{name}"] = batch * context * kv_bytes_per_token(shape, element)
        details[f"step_bytes_{name}"] = decode_step_bytes(shape, batch, context, element)
    details["step_bytes_ratio"] = details["step_bytes_grouped"] / details["step_bytes_mha"]
    return result.with_labels(
        batch=batch, context=context, heads=config.num_heads, kv_heads=kv_heads, compiled=compiled
    ).with_details(
        **details,
        tokens_per_s_mha=batch / result.median_a_s,
        tokens_per_s_grouped=batch / result.median_b_s,
        decodes_like_recomputation=same,
    )


def compare_int8(
    model: TransformerLM,
    batch: int,
    context: int,
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    new_tokens: int = 16,
    seed: int = 0,
) -> Comparison:
    """``model``'s compiled fixed-shape decode step against its int8 copy's (``quantize_int8``),
    at ``batch`` sequences of ``context`` tokens: the weights' bytes of each (``_original``: the
    model's own dtype), each first call (its compilation), the largest absolute and the relative
    (norm) error of the int8 logits and whether they pick the same next tokens, the interleaved
    ``Comparison`` (the original as a, int8 as b), and, over ``new_tokens`` greedy tokens from
    the same random prompts, where each sequence's tokens first differ and the share of
    positions that agree."""
    device = next(model.parameters()).device
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    quantised = quantize_int8(model)
    steps, logits, first_s = {}, {}, {}
    for name, which in (("original", model), ("int8", quantised)):
        steps[name] = decode_step(which, "contiguous", batch, context, compiled=True, seed=seed)
        start = time.perf_counter()
        logits[name] = steps[name]().clone()
        first_s[name] = time.perf_counter() - start
    result = compare(
        steps["original"],
        steps["int8"],
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=(
            f"the compiled step with {dtype} weights ({batch} x {context} tokens)",
            "int8 weights",
        ),
    )
    prompts = random_prompts(model.config.vocab_size, [context] * batch, seed + 1)
    with torch.no_grad():
        tokens = {
            name: generate(which, prompts, new_tokens, "contiguous")
            for name, which in (("original", model), ("int8", quantised))
        }
    firsts = [
        next((i for i, (a, b) in enumerate(zip(x, y, strict=True)) if a != b), new_tokens)
        for x, y in zip(tokens["original"], tokens["int8"], strict=True)
    ]
    agree = sum(
        a == b
        for x, y in zip(tokens["original"], tokens["int8"], strict=True)
        for a, b in zip(x, y, strict=True)
    )
    error = logits["int8"] - logits["original"]
    return result.with_labels(batch=batch, context=context).with_details(
        **{
            "weight_bytes_original": weight_bytes(model),
            "weight_bytes_int8": weight_bytes(quantised),
            "first_call_s_original": first_s["original"],
            "first_call_s_int8": first_s["int8"],
            "logits_max_abs_error": error.abs().max().item(),
            "logits_relative_error": (error.norm() / logits["original"].norm()).item(),
            "same_next_tokens": bool(
                (logits["int8"].argmax(-1) == logits["original"].argmax(-1)).all()
            ),
            "new_tokens": new_tokens,
            "first_differing_token": min(firsts),
            "tokens_agreeing": agree / (batch * new_tokens),
            "tokens_per_s_original": batch / result.median_a_s,
            "tokens_per_s_int8": batch / result.median_b_s,
        }
    )
