"""What notebook 10's measurements say, as sentences computed from their tables.

Each function reads the frames or rows that ``perflab.lessons.nb10_decoding.measurements`` returned
and returns the sentences the notebook prints; where a sentence states a verdict it comes from the
comparison behind it (``Finding``), so that ``conclude_all`` stores it and ``perflab check-results``
can hold it to the numbers. They are tested on small frames, GPU branches included
(``tests/test_decode_findings.py``)."""

from __future__ import annotations

import pandas as pd

from perflab.implementations.model import ModelConfig
from perflab.lessons.nb10_decoding.costs import kv_bytes_per_token, matmul_weights
from perflab.measure.stats import apart, level_text, rounded

MiB = 2**20


def model_line(config: ModelConfig, element: int, dtype: str, device_type: str) -> str:
    """The model's size, its matmul weights and its keys and values per token."""
    return (
        f"{config.name}: {config.num_parameters() / 1e6:.1f} M parameters, "
        f"{matmul_weights(config) * element / MiB:.1f} MiB of matmul weights in {dtype}, "
        f"{kv_bytes_per_token(config, element) / 1024:.1f} KiB of keys and values per token; "
        f"on {device_type}"
    )


def yardstick_line(bandwidth, peak, dtype: str) -> str:
    """The copy bandwidth and the matmul peak (each a best of several), and the ridge point."""
    return (
        f"copy bandwidth {bandwidth.bytes_per_s / 1e9:.1f} GB/s (the best of {bandwidth.steps} "
        f"copies; median {bandwidth.median_bytes_per_s / 1e9:.1f} GB/s), matmul peak "
        f"{peak.flops_per_s / 1e9:.0f} GFLOP/s in {dtype} (the best of {peak.steps} runs at n = "
        f"{peak.size}; median {peak.median_flops_per_s / 1e9:.0f} GFLOP/s): a kernel needs "
        f"{peak.flops_per_s / bandwidth.bytes_per_s:.1f} FLOPs per byte to be compute-bound"
    )


def phase_sentence(phases: pd.DataFrame, ridge: float, steps: int) -> str:
    """Prefill against decode (``prefill_vs_decode``): the time per token, and which bound
    each phase's FLOPs per byte puts it under against the ``ridge`` (peak / bandwidth)."""
    by = phases.set_index("phase")

    def bound(phase: str) -> str:
        return "compute" if by.loc[phase, "flops_per_byte"] > ridge else "memory"

    per_token = by.loc["decode", "s_per_token"] / by.loc["prefill", "s_per_token"]
    side = "above" if by.loc["decode", "flops_per_byte"] > ridge else "not above"
    return (
        f"a decoded token takes {per_token:.0f}x the time of a prefilled one (medians of "
        f"{steps}): "
        f"prefill does {by.loc['prefill', 'flops_per_byte']:.0f} FLOPs per byte of weights and "
        f"KV, decode {by.loc['decode', 'flops_per_byte']:.2f}, {side} the {ridge:.1f} this "
        f"device needs to be compute-bound: by the roofline, decode at batch 1 is bound by "
        f"{bound('decode')}, prefill by {bound('prefill')} (the time ratio is of two medians, "
        "not an interleaved comparison)"
    )


def error_bar_line(throughput: pd.DataFrame, steps: int) -> str:
    """What the roofline plot's error bars are, and how many points are unstable."""
    levels = ", ".join(sorted({level_text(v) for v in throughput["median_ci_level"]}))
    return (
        f"error bars: the median's {levels} interval ({steps} steps); unstable points: "
        f"{int(throughput['unstable'].sum())} of {len(throughput)}"
    )


def roofline_sentences(throughput: pd.DataFrame) -> list[str]:
    """From ``throughput_by_batch`` (eager and compiled steps, and frozen ones if measured):
    the share of the roofline per batch, the step with the most tokens/s at the medians at the
    smallest and largest batch, compiled over eager per batch and what freezing the weights
    adds to compiling (separate medians: ratios stated, no winner claimed)."""
    share = throughput.pivot(index="batch", columns="step", values="fraction_of_roofline")
    kinds = [k for k in ("eager", "compiled", "frozen") if k in share.columns]
    fastest = throughput.loc[throughput.groupby("batch")["tokens_per_s"].idxmax()]
    fastest = fastest.set_index("batch")
    first, last_batch = fastest.index[0], fastest.index[-1]
    best, last = fastest.loc[first], fastest.loc[last_batch]
    sentences = [
        f"share of the roofline per batch, {' -> '.join(kinds)}: "
        + "; ".join(
            f"{b}: " + " -> ".join(f"{r[k]:.0%}" for k in kinds) for b, r in share.iterrows()
        )
    ]
    text = (
        f"batch {first}: the most tokens/s at the medians is the {best['step']} step's, "
        f"{best['tokens_per_s']:.0f} tokens/s, {best['fraction_of_roofline']:.0%} of its "
        f"{best['bound']}-bound roofline ({best['roofline_tokens_per_s']:.0f} tokens/s); "
        f"batch {last_batch}: {last['tokens_per_s']:.0f} tokens/s "
        f"({last['tokens_per_s'] / best['tokens_per_s']:.1f}x batch {first}'s, separate medians), "
        f"{last['fraction_of_roofline']:.0%} of a roofline that is {last['bound']}-bound there. "
    )
    gain = share["compiled"] / share["eager"]  # the same roofline: the ratio of tokens/s
    text += (
        "The compiled step's tokens/s over the eager one's: "
        + ", ".join(f"{v:.2f}x at batch {b}" for b, v in gain.items())
        + " (separate medians, not interleaved: no step is called faster from them; section "
        "5 compares compiled with eager, interleaved, at one batch only)."
    )
    if "frozen" in share.columns:
        frozen = share["frozen"] / share["compiled"]
        text += (
            " The frozen step's tokens/s (the weights frozen into the compiled graph) over the "
            "plain compiled step's: "
            + ", ".join(f"{v:.2f}x at batch {b}" for b, v in frozen.items())
            + " (separate medians, not interleaved: no difference is claimed from them)."
        )
    return [*sentences, text, *beyond_memory_sentences(throughput)]


def beyond_memory_sentences(throughput: pd.DataFrame) -> list[str]:
    """For the steps above their memory-bound roofline (the whole interval of the median's
    tokens/s above it, as ``check-results`` holds it), why that can be: the bytes a step moves
    against the device's last-level cache (``step_bytes``, ``last_level_cache_bytes``), since
    the bound's bandwidth is a copy through memory."""
    low = throughput.get("tokens_per_s_low", throughput["tokens_per_s"])
    above = throughput[low > throughput["memory_bound_tokens_per_s"]]
    if above.empty:
        return []
    steps = ", ".join(  # printed above 100%, as each lies
        f"batch {r['batch']} {r['step']} "
        f"{apart(100 * r['tokens_per_s'] / r['memory_bound_tokens_per_s'], 100, 0)[0]}%"
        for _, r in above.iterrows()
    )
    text = (
        f"above the memory-bound roofline, the whole interval of the median ({steps} of it at "
        "the median): these steps moved their bytes faster "
        "than the measured copy bandwidth, which is a copy through memory, far larger than the "
        "caches. "
    )
    cache = above["last_level_cache_bytes"].iloc[0] if "last_level_cache_bytes" in above else None
    largest = above["step_bytes"].max() if "step_bytes" in above else None
    if cache is None or largest is None or pd.isna(cache) or pd.isna(largest):
        return [text + "This device's last-level cache is unknown, so why is not shown here."]
    moved, held = apart(largest / 2**20, cache / 2**20, 1)  # on their own sides of each other
    if largest <= cache:
        return [
            text + f"Each of them moves at most {moved} MiB a step, within this "
            f"device's {held} MiB last-level cache (shared with whatever else "
            "runs), so part of it may be served from the cache: for a model this small the "
            "memory roofline need not bound the step (a model far larger than the cache, like "
            "the 8B one on a GPU, has no such way around it)."
        ]
    return [
        text + f"The largest moves {moved} MiB a step, more than this device's "
        f"{held} MiB last-level cache: the copy bandwidth understates what this "
        "machine can read."
    ]


def _median_text(row) -> str:
    return (
        f"{row['median_s'] * 1e3:.2f} ms ({level_text(row['median_ci_level'])} CI "
        f"{row['median_ci_low_s'] * 1e3:.2f}–{row['median_ci_high_s'] * 1e3:.2f} ms"
        + (", unstable)" if row["unstable"] else ")")
    )


def repeat_sentence(
    phases: pd.DataFrame, throughput: pd.DataFrame, prompt_len: int, context: int
) -> str:
    """The batch-1 eager decode step timed in section 1 and again in section 2: how far apart
    these two medians of the same work, measured at different moments, lie (one pair: an
    example of the gap, not its usual size)."""
    batches = set(throughput["batch"])
    if 1 not in batches or prompt_len != context:
        return (
            f"not compared: section 1 decodes at {prompt_len} tokens of context and section 2 "
            f"at {context}" + ("" if 1 in batches else ", without batch 1")
        )
    first = phases.set_index("phase").loc["decode"]
    second = throughput[throughput["step"] == "eager"].set_index("batch").loc[1]
    apart = second["median_s"] / first["median_s"]
    overlap = (
        first["median_ci_low_s"] <= second["median_ci_high_s"]
        and second["median_ci_low_s"] <= first["median_ci_high_s"]
    )
    return (
        f"the batch-1 decode step at {context} tokens: {_median_text(first)} in section 1, "
        f"{_median_text(second)} here; the second is {apart:.2f}x the first ({apart - 1:+.0%}), "
        + ("and their intervals overlap" if overlap else "and their intervals do not overlap")
        + ". One pair of separate, non-interleaved medians of the same work: it shows that two "
        "such medians differed this much here once, not how much they usually do. This "
        "notebook's verdicts come from interleaved comparisons only; a sentence that sets a "
        "number beside another section's names that section and draws no verdict from the pair."
    )


def cache_rates_line(caches: pd.DataFrame) -> str:
    """Each cache mode's tokens/s in the comparisons of ``compare_caches``."""
    return "tokens/s per mode, the median of its rounds in each comparison: " + "; ".join(
        f"{row.a} {row.tokens_per_s_a:.0f} and {row.b} {row.tokens_per_s_b:.0f}"
        for row in caches.itertuples()
    )


def kv_sentences(kv: pd.DataFrame, prompt_lens: list[int], new_tokens: list[int]) -> list[str]:
    """From ``kv_memory`` (the contiguous cache first, then the paged one per block size): the
    requests, the bytes each cache held, the best and worst block size and what each wastes."""
    requests = list(zip(prompt_lens, new_tokens, strict=True))
    contiguous, paged = kv.iloc[0], kv.iloc[1:].set_index("block_size")
    best, worst = int(paged["kv_bytes"].idxmin()), int(paged["vs_contiguous"].idxmax())
    held = ", ".join(
        f"{r.kv_bytes / MiB:.2f} MiB with blocks of {int(b)}" for b, r in paged.iterrows()
    )
    return [
        f"{len(requests)} requests (prompt, new tokens): {requests}",
        f"contiguous: {contiguous['kv_bytes'] / MiB:.2f} MiB; paged: {held}; the tokens "
        f"themselves at the peak: {contiguous['peak_token_bytes'] / MiB:.2f} MiB",
        f"the paged cache needs {paged.loc[best, 'vs_contiguous']:.0%} of the contiguous "
        f"cache's memory with block size {best} ({paged.loc[best, 'waste']:.0%} of it wasted) "
        f"and {paged.loc[worst, 'vs_contiguous']:.0%} with block size {worst} "
        f"({paged.loc[worst, 'waste']:.0%} wasted); the contiguous cache wastes "
        f"{contiguous['waste']:.0%}. The pool given to the paged cache here held "
        f"{rounded(paged['pool_bytes'].max() / MiB, 2, 'up')} MiB at most (room for every "
        "sequence at its longest); a server sizes one pool to its memory and shares it, so "
        "what this batch costs it is the peak in use.",
    ]


def graphs_line(compilations: pd.DataFrame, calls: int) -> str:
    """How many graphs dynamo traced for each kind of step (``count_compilations``)."""
    graphs = compilations.groupby("shapes")["graphs"].max()
    return (
        f"over {calls} decode steps: the growing-shape step was traced into "
        f"{graphs['growing']} graphs, the fixed-shape step into {graphs['fixed']}"
    )


def tracing_sentence(compilations: pd.DataFrame, calls: int) -> str:
    """The tracing time of each kind of step, and what dynamo did with the growing one: hit
    its recompile limit (its warning quoted), made the lengths symbolic, or traced every
    call."""
    graphs = compilations.groupby("shapes")["graphs"].max()["growing"]
    traced = compilations.groupby("shapes")["seconds"].agg(["sum", "median"])
    text = (
        f"tracing the growing step took {traced.loc['growing', 'sum']:.1f} s over {calls} "
        f"calls, the fixed one {traced.loc['fixed', 'sum']:.1f} s; a steady call takes about "
        f"{traced.loc['fixed', 'median'] * 1e3:.0f} ms"
    )
    warnings = compilations.attrs.get("dynamo_warnings") or []
    if warnings:
        return (
            text + "; dynamo reached its recompile limit and runs the step eagerly from there: "
            f"{warnings[0].splitlines()[0]}"
        )
    if 1 < graphs < calls:
        return text + (
            "; after its first recompilation dynamo made the lengths symbolic (automatic dynamic "
            "shapes) and reused that graph, and the cache's lengths, Python values that change "
            "at every step, are guards dynamo checks at every call (on a GPU with "
            'mode="reduce-overhead", every new length would also need a new CUDA graph '
            "recorded: a GPU claim, not measured here, where the counting backend counts "
            "dynamo's graphs only)"
        )
    if graphs >= calls:
        return text + "; the growing step was traced anew at every call"
    return text


def compiled_step_sentence(compiled: dict, conclusion: str) -> str:
    """The compiled fixed-shape step against the eager one (``compile_static_step``), with the
    comparison's stored ``conclusion``."""
    return (
        f"mode {compiled['mode']}: first call {compiled['compile_s']:.1f} s (compilation, or "
        "less where inductor finds the kernels in its on-disk cache from an earlier run), then "
        f"{compiled['median_b_s'] * 1e3:.2f} ms a step against "
        f"{compiled['median_a_s'] * 1e3:.2f} ms eager: "
        f"{compiled['tokens_per_s_compiled']:.0f} against {compiled['tokens_per_s_eager']:.0f} "
        f"tokens/s; {conclusion} ({compiled['graphs_compiled']} graph compiled by this call)"
    )


def profile_sentences(
    parts: pd.DataFrame,
    calls: pd.DataFrame,
    config: ModelConfig,
    element: int,
    bandwidth_bytes_per_s: float,
    peak_flops_per_s: float,
    largest: int,
    device_type: str,
    timed_ms: pd.Series,
) -> list[str]:
    """Where the batch-1 step's time goes (``profile_steps``' ``parts`` and ``calls``, ms and
    calls per step per part and step): on a CPU, the matmuls' share against reading the weights
    at the copy bandwidth, what else the step spends, and the largest batch's matmul rate
    against the peak; on a GPU, that the profile is the host's side. Last, each profiled step
    against its timed median (``timed_ms`` by step name)."""
    sentences = []
    weights = matmul_weights(config) * element  # bytes every step reads, whatever the batch
    at_copy_ms = weights / bandwidth_bytes_per_s * 1e3
    if device_type == "cpu":
        step = parts["compiled"]
        matmul_ms, rest = step["matmuls"], step.drop("matmuls")
        rate = weights / (matmul_ms / 1e3)
        beyond_copy = max(matmul_ms - at_copy_ms, 0)
        sentences.append(
            f"batch 1 compiled, profiled: {step.sum():.2f} ms a step (eager "
            f"{parts['eager'].sum():.2f} ms). The matmuls take {matmul_ms:.2f} ms, reading "
            f"{weights / 1e6:.1f} MB of weights at {rate / 1e9:.1f} GB/s, "
            f"{rate / bandwidth_bytes_per_s:.0%} of the copy bandwidth (which would move them "
            f"in {at_copy_ms:.2f} ms); the other {rest.sum():.2f} ms "
            f"({rest.sum() / step.sum():.0%} of the step) are "
            + ", ".join(f"{name} {ms:.2f} ms" for name, ms in rest.items() if ms > 0)
            + f". Eager, the same step made {calls.loc['other operators', 'eager']:.0f} calls to "
            f"other operators per token, {parts.loc['other operators', 'eager']:.2f} ms, and "
            f"spent {parts.loc['Python between operators', 'eager']:.2f} ms in Python between "
            "them; compiled, those are inductor's fused kernels in one call of its graph "
            f"({parts.loc['compiled kernels', 'compiled']:.2f} ms) and "
            f"{calls.loc['other operators', 'compiled']:.0f} small operator calls. Of the time "
            f"beyond reading the weights at the copy bandwidth, {rest.sum():.2f} ms are outside "
            f"the matmuls and {beyond_copy:.2f} ms inside them (one profiled step)."
        )
        if "frozen" in parts.columns and parts.loc["matmuls", "frozen"] > 0:
            frozen = parts["frozen"]
            frozen_rate = weights / (frozen["matmuls"] / 1e3)
            sentences.append(
                f"batch 1 frozen (the weights packed once, each linear a GEMM kernel of its "
                f"own shape), profiled: {frozen.sum():.2f} ms a step; its matmuls take "
                f"{frozen['matmuls']:.2f} ms, reading the weights at {frozen_rate / 1e9:.1f} "
                f"GB/s ({frozen_rate / bandwidth_bytes_per_s:.0%} of the copy bandwidth, "
                f"{frozen_rate / rate:.2f}x the plain compiled step's rate; one profiled step "
                "each)."
            )
        elif "frozen" in parts.columns:
            sentences.append(
                f"batch 1 frozen, profiled: {parts['frozen'].sum():.2f} ms a step; the profiler "
                "saw no matmul in it (its GEMMs ran inside kernels it could not tell apart)."
            )
        big = parts[f"compiled, batch {largest}"]
        big_rate = largest * 2 * matmul_weights(config) / (big["matmuls"] / 1e3)
        sentences.append(
            f"at batch {largest}, compiled: the matmuls take {big['matmuls']:.2f} ms of "
            f"{big.sum():.2f}, {big['matmuls'] / matmul_ms:.1f}x their time at batch 1 for "
            f"{largest}x the FLOPs, at {big_rate / 1e9:.0f} GFLOP/s against the "
            f"{peak_flops_per_s / 1e9:.0f} GFLOP/s of the square matmul peak "
            f"({big_rate / peak_flops_per_s:.0%}), and {big['matmuls'] / at_copy_ms:.1f}x the "
            f"{at_copy_ms:.2f} ms a copy of the weights takes (one profiled step; what holds "
            f"these {largest}-row products where they are is not measured here)."
        )
    else:
        sentences.append(
            "on a GPU the profile above is the host's side (launches, guards, Python); the "
            "device kernels are in notebook 02's profiles"
        )
    for name, timed in timed_ms.items():
        slower = parts[name].sum() / timed
        sentences.append(
            f"the profiled {name} batch-1 step took {parts[name].sum():.2f} ms, {slower:.1f}x "
            f"its timed median in section 2 ({timed:.2f} ms; one profiled step beside another "
            "section's median: the profiler's own cost and the machine's noise are not told "
            "apart" + ("; read its parts as shares, not as times)" if slower > 2 else ")")
        )
    return sentences


def sampling_lines(rotary: dict, sampling: dict, vocab_size: int, element: int) -> list[str]:
    """The correctness of the rotary-table and sampling comparisons, and the bytes that cross
    to the host per token either way."""
    return [
        "the same logits with tables computed every step (largest difference below 1e-5): "
        f"{rotary['max_abs_diff'] < 1e-5}",
        f"the same ids picked on the device and on the host: {sampling['same_ids']}",
        f"bytes to the host per token: {sampling['device_bytes_per_token']:.0f} (one int64 id) "
        f"against {sampling['host_bytes_per_token']:,.0f} (the logits: {vocab_size:,} x "
        f"{element} bytes), {sampling['bytes_ratio']:,.0f}x fewer",
    ]


#: Below this share of its roofline a step is far from its bound: bytes alone do not set its time.
FAR_FROM_ROOFLINE = 0.5


def _roofline_share(throughput: pd.DataFrame, batch: int, step: str) -> float | None:
    rows = throughput[(throughput["batch"] == batch) & (throughput["step"] == step)]
    return float(rows["fraction_of_roofline"].iloc[0]) if len(rows) else None


def int8_sentences(
    row: dict, throughput: pd.DataFrame, batch: int, new_tokens: int, dtype: str
) -> list[str]:
    """int8 weights against the original (``compare_int8``'s row, compiled steps): bytes,
    tokens/s against the roofline section 2 computed at this batch, the logits' error and the
    first token that changes; and, where the speed-up passes the bytes saved (its whole
    interval: ``ci_high`` of int8's time over the original's), what section 2's
    compiled step at this batch says of it (far from its roofline: bytes do not set its time)."""
    same_batch = throughput[throughput["batch"] == batch]
    roofline = (
        f", against the roofline of {same_batch['roofline_tokens_per_s'].iloc[0]:,.0f} tokens/s "
        "that section 2 computed for the original weights at this batch"
        if len(same_batch)
        else ""
    )
    byte_ratio = row["weight_bytes_original"] / row["weight_bytes_int8"]
    differs = (
        "none differs"
        if row["first_differing_token"] == new_tokens
        else f"the first to differ is token {row['first_differing_token']}"
    )
    sentences = [
        f"weights {row['weight_bytes_original'] / 1e6:.1f} MB -> "
        f"{row['weight_bytes_int8'] / 1e6:.1f} MB ({byte_ratio:.2f}x fewer); "
        f"{row['tokens_per_s_original']:,.0f} -> {row['tokens_per_s_int8']:,.0f} tokens/s at the "
        f"medians{roofline}; the logits move by {row['logits_relative_error']:.2%} (relative); "
        f"of {new_tokens} greedy tokens per sequence, {differs} "
        f"({row['tokens_agreeing']:.0%} of all agree)."
    ]
    share = _roofline_share(throughput, batch, "compiled")
    # int8's time over the original's: the whole interval of the speed-up above the bytes'
    # ratio, or no claim that it is more than the bytes give.
    slowest_speedup = 1 / row["ci_high"] if row.get("ci_high", 0) > 0 else float("nan")
    if share is not None and slowest_speedup > byte_ratio:
        why = (
            "far from its memory bound, where bytes need not set a step's time: a possible "
            "reason, not tested here"
            if share < FAR_FROM_ROOFLINE
            else "near enough its bound that these measurements do not explain the difference"
        )
        at_least, fewer = apart(slowest_speedup, byte_ratio)
        sentences.append(
            f"The speed-up, at least {at_least}x by the interval of the paired rounds above, is "
            f"more than the {fewer}x fewer bytes stored "
            "(the embedding, which a step reads one row of, counted whole). The compiled "
            f"{dtype} step with the original weights ran at {share:.0%} of its roofline in "
            f"section 2 (another measurement), {why}."
        )
    return sentences


def gqa_sentences(
    row: dict,
    conclusion: str,
    throughput: pd.DataFrame,
    num_heads: int,
    kv_heads: int,
    batch: int,
    context: int,
    roofline_context: int,
    step: str = "eager",
) -> list[str]:
    """Grouped-query attention against multi-head (``compare_kv_heads``' row and its stored
    ``conclusion``): the cache and the bytes a step moves, the measured ratio against the bytes'
    ratio; and, where it falls short of it (the ratio's whole interval above the bytes'), what
    section 2's ``step`` (eager or compiled, as
    compared) at this batch says of it (far from its roofline: bytes do not set its time)."""
    sentences = [
        f"{num_heads} query heads, {kv_heads} key and value heads, batch {batch} at context "
        f"{context}: the cache holds {row['kv_cache_bytes_grouped'] / 1e6:.1f} MB instead of "
        f"{row['kv_cache_bytes_mha'] / 1e6:.1f} MB, and a step must move "
        f"{row['step_bytes_ratio']:.2f}x the bytes. Measured: {conclusion}. A step bound by "
        f"memory would take {row['step_bytes_ratio']:.2f}x the time; the measured median ratio "
        f"is {row['ratio_b_over_a']:.2f}."
    ]
    share = _roofline_share(throughput, batch, step)
    # the whole interval of the time ratio above the bytes' ratio: less gained than bytes give
    if share is not None and row.get("ci_low", float("nan")) > row["step_bytes_ratio"]:
        why = (
            "far from its memory bound, where moving fewer bytes need not save their share of "
            "a step's time: a possible reason, not tested here"
            if share < FAR_FROM_ROOFLINE
            else "near enough its bound that these measurements do not explain the difference"
        )
        other = "" if roofline_context == context else f", not this comparison's {context}"
        starts, bytes_ratio = apart(row["ci_low"], row["step_bytes_ratio"])
        sentences.append(
            f"Less than the bytes would give (the ratio's interval starts at {starts}, "
            f"above {bytes_ratio}). At batch {batch} the multi-head {step} step "
            f"reached {share:.0%} of its roofline in section 2 (another measurement, at context "
            f"{roofline_context}{other}), {why}."
        )
    return sentences


def leaderboard_decode_line(config: ModelConfig, context: int = 32768) -> str:
    """What one decode step of ``config`` reads in bfloat16, and its cache at ``context``."""
    per_token = kv_bytes_per_token(config, 2)
    return (
        f"{config.name} in bfloat16: {matmul_weights(config) * 2 / 1e9:.1f} GB of matmul "
        f"weights read per decode step, {per_token / 1e6:.2f} MB of keys and values per token "
        f"of context ({per_token * context / 1e9:.1f} GB for one sequence at its full "
        f"{context:,}-token context)"
    )
