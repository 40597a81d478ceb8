"""The five sources' headline claims beside the workbook's own numbers.

The workbook was designed from five documents (``../shared/sources/``: an FSDP trace note, a
100M-parameter profiling note, a CS336 write-up, a training-loop report, a decode analysis).
``CLAIMS`` holds one row per claim: what the source says, whether it measured or estimated it,
its own arithmetic redone from its own figures (``check``, a function of the figures the source
prints), and where the workbook answers the same question (``ours``: concluding sentences or
saved tables, read from a results folder at render time, never typed). ``claims_table`` builds
the table, ``markdown_table`` renders ``docs/sources.md`` (a test holds the file to the
committed results) and ``perflab report`` puts it in the write-up's appendix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perflab.measure.comparison import band_edges
from perflab.measure.paths import data_dir
from perflab.measure.stats import level_text, with_estimate
from perflab.tools.report import device_folders

SOURCES = {
    "fsdp-note": "FSDP trace-hotspot note (8 B200s, bf16, 47B model)",
    "100m-note": "notes from profiling a 100M-parameter model",
    "cs336-writeup": "a student's CS336 assignment 2 write-up (A100 / H100)",
    "training-report": "a training-loop optimisation report",
    "decode-analysis": "an analysis of tt_transformers' decode optimisations",
}

MEASURED, ESTIMATED = "measured", "estimated"


@dataclass(frozen=True)
class Conclusion:
    """The concluding sentences of ``notebook`` whose key starts with ``key``, on every device
    whose results hold one; ``quantity``: what they measure (held to the claim's)."""

    notebook: str
    key: str
    quantity: str


@dataclass(frozen=True)
class Rows:
    """A sentence computed by ``summary`` from the table ``file`` (a CSV stem) of
    ``notebook``, on every device whose results hold it."""

    notebook: str
    file: str
    summary: Callable[[pd.DataFrame], str]
    quantity: str


@dataclass(frozen=True)
class GpuOnly:
    """A claim only a GPU can answer, and why."""

    why: str


@dataclass(frozen=True)
class NotMeasured:
    """A claim whose quantity the workbook does not measure, and why (what it measures
    nearby, when something)."""

    why: str


Ours = Conclusion | Rows | GpuOnly | NotMeasured


@dataclass(frozen=True)
class Claim:
    source: str
    claim: str
    basis: str
    check: Callable[[], str]
    ours: tuple[Ours, ...]
    quantity: str  # what the claim measures: quantity and scope, which each answer must share


def _times(value: float) -> str:
    return f"{value:,.0f}x" if value >= 100 else f"{value:.1f}x"


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return _times(low) if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}–{_times(high)}"


def _holds(computed: float, stated: float, tolerance: float) -> str:
    return "holds" if abs(computed - stated) <= tolerance else f"does not hold (stated {stated})"


def _product(factors: list[tuple[float, float]]) -> tuple[float, float]:
    low = high = 1.0
    for a, b in factors:
        low, high = low * a, high * b
    return low, high


# Each check redoes the source's arithmetic from the figures it prints (the figures are the
# source's, quoted as inputs; the sentence is computed).


def _fsdp_shares() -> str:
    reduce_scatter, all_gather = 45.9, 11.2
    total = reduce_scatter + all_gather
    return (
        f"{reduce_scatter}% + {all_gather}% = {total:.1f}% of kernel time in the two NCCL "
        f"kernels (the note says ~57%): {_holds(total, 57, 0.5)}"
    )


def _fsdp_reductions() -> str:
    pairs = {"reduce": (10_238_668, 7_147_513, 30.2), "Welford": (1_760_388, 1_231_460, 30.0)}
    pairs["MeanOps"] = (2_265_219, 543_582, 76.0)
    parts = [
        f"{name} −{100 * (1 - after / before):.1f}%: "
        + _holds(100 * (1 - after / before), stated, 0.05)
        for name, (before, after, stated) in pairs.items()
    ]
    return "its µs before and after give " + ", ".join(parts)


def _fsdp_throughput() -> str:
    before, after, step_before, step_after = 645.6, 712.2, 25.38, 23.01
    tokens = 2048 * 1 * 8  # seq_len x batch x world size
    return (
        f"{after / before - 1:+.1%} tokens/s (stated +10.3%); step time {step_before} s → "
        f"{step_after} s is {step_before / step_after:.3f}x; {tokens} tokens / {step_before} s "
        f"= {tokens / step_before:.1f} tokens/s: the throughput counts all 8 ranks' tokens"
    )


def _fsdp_share_fell() -> str:
    return (
        "NCCL's share fell from ~57% to ~49% while other kernels shrank: had the NCCL kernels "
        "kept their duration their share would have risen, so they got shorter too (a "
        "collective's kernel time includes waiting for the slowest rank), and kernel shares "
        "alone do not show how much communication costs"
    )


def _m100_split() -> str:
    forward, backward, optimizer, total = 18, 33, 2, 53
    shares = ", ".join(f"{v / total:.0%}" for v in (forward, backward, optimizer))
    return (
        f"{forward} + {backward} + {optimizer} = {forward + backward + optimizer} ms (stated "
        f"{total}); shares {shares} (stated 35/62/3%); backward/forward "
        f"{backward / forward:.2f}x"
    )


def _m100_weights() -> str:
    weights_mb, parameters = 135e6, 100e6
    return (
        f"{weights_mb / parameters:.2f} bytes per parameter for 135 MB of a 100M model: "
        f"float32 would be {4 * parameters / 1e6:.0f} MB, bf16 {2 * parameters / 1e6:.0f} MB "
        "(the note does not say which parameters or dtype it counted)"
    )


def _m100_peak() -> str:
    layers, per_layer_gb, logits_gb, peak_gb = 8, 0.64, 1.2, 5.4
    total = layers * per_layer_gb + logits_gb
    return (
        f"{layers} x {per_layer_gb} GB + {logits_gb} GB = {total:.1f} GB of activations and "
        f"logits, more than the {peak_gb} GB peak it states; only the checkpointing it lists "
        "(every 2 layers) could reconcile them, and the note does not say it was on"
    )


def _m100_throughput() -> str:
    synthetic, real = 76e3, 31e3
    return (
        f"{synthetic / real:.2f}x fewer tokens/s on real data than synthetic, unexplained "
        f"(53 ms per step at 76K tokens/s is {76e3 * 0.053:,.0f} tokens a step)"
    )


def _cs336_backward() -> str:
    return "stated without a table: backward ≈ 2x forward, std/mean < 1% after warm-up"


def _cs336_softmax() -> str:
    softmax_us, range_us = 122.885, 2001
    share = softmax_us / range_us
    return (
        f"{softmax_us} µs / {range_us} µs = {share:.1%} (stated 6.1%): {_holds(share, 0.061, 5e-4)}"
    )


def _cs336_residual() -> str:
    tokens, d_xl, d_27 = 256 * 4, 1600, 2560
    return (
        f"float32 is 4 bytes, not 8: {tokens} x {d_xl} x 4 B = "
        f"{tokens * d_xl * 4 / 2**20:.2f} MiB for xl (stated 12.5 MB) and "
        f"{tokens * d_27 * 4 / 2**20:.0f} MiB for 2.7B (stated 20 MB)"
    )


_ATTENTION_TIMES = {  # d_model: (forward, backward) at 256, 8192, 16384, the write-up's table
    16: ((0.0312, 0.0898), (1.2175, 2.6391), (4.7718, 10.3709)),
    32: ((0.0272, 0.0819), (1.2485, 2.6671), (4.8859, 10.4795)),
    64: ((0.03, 0.0814), (1.3693, 2.9065), (5.4185, 11.4581)),
    128: ((0.0271, 0.082), (1.6008, 3.3566), (6.3116, 13.2443)),
}
_ATTENTION_MEMORY = {16: (68.9614, 4252.75, 16761.5), 128: (75.0864, 4448.75, 17153.5)}


def attention_growth(times: dict = _ATTENTION_TIMES) -> tuple[list[float], list[float]]:
    """Time ratios 8192/256 and 16384/256 over every d_model and both passes."""
    at_8k = [big[p] / small[p] for small, big, _ in times.values() for p in (0, 1)]
    at_16k = [big[p] / small[p] for small, _, big in times.values() for p in (0, 1)]
    return at_8k, at_16k


def _cs336_attention() -> str:
    at_8k, at_16k = attention_growth()
    memory_8k = [m[1] / m[0] for m in _ATTENTION_MEMORY.values()]
    memory_16k = [m[2] / m[0] for m in _ATTENTION_MEMORY.values()]
    return (
        f"its own table gives time {_span(at_8k)} at 8192 (stated ~80x) and "
        f"{_span(at_16k)} at 16384 (stated ~315x); memory {_span(memory_8k)} and "
        f"{_span(memory_16k)} (stated ~60x, ~240x)"
    )


def _cs336_compile() -> str:
    pairs = {"small, 128": (0.0730, 0.0498), "2.7B, 512": (1.2463, 1.1433)}
    parts = [f"{name}: {base / compiled:.2f}x" for name, (base, compiled) in pairs.items()]
    return "compiled over eager, whole step: " + ", ".join(parts) + " (one run each, no interval)"


def _cs336_allreduce() -> str:
    two, six = (0.62, 6.25), (2.95, 34.6)
    return (
        f"100 MB → 1000 MB: 2 processes {two[1] / two[0]:.1f}x the time, 6 processes "
        f"{six[1] / six[0]:.1f}x for 10x the bytes; 'superlinear' rests on one pair of sizes"
    )


def _report_quick_wins() -> str:
    transfers, batch, amp = (1.2, 1.3), (2, 4), (2, 3)
    low, high = _product([transfers, batch, amp])
    return (
        f"its quick wins' own factors ({transfers[0]}–{transfers[1]}x transfers, "
        f"{batch[0]}–{batch[1]}x batch, {amp[0]}–{amp[1]}x AMP) compound to "
        f"{low:.1f}–{high:.1f}x, not the 2–3x it promises; none was measured"
    )


def _report_hours() -> str:
    hours, quick, everything = 24, (8, 12), (4, 6)
    return (
        f"{hours} h → {quick[0]}–{quick[1]} h is {hours / quick[1]:.0f}–{hours / quick[0]:.0f}x "
        f"and → {everything[0]}–{everything[1]} h is {hours / everything[1]:.0f}–"
        f"{hours / everything[0]:.0f}x: consistent with its headline, inconsistent with its "
        "factors"
    )


def _report_estimate(claimed: str) -> Callable[[], str]:
    return lambda: f"{claimed}: an estimate with no measurement or derivation behind it"


def _decode_sampling() -> str:
    before, after = 256 * 1024, 8
    return (
        f"256 KB / 8 B = {before // after:,}x less data per token (stated 33x; "
        f"{256_000 // after:,}x with decimal KB)"
    )


def _decode_phases() -> str:
    factors = [(2, 3), (1.05, 1.10), (1.05, 1.05), (1.05, 1.05)]
    low, high = _product(factors)
    latency = (1000 / 350, 1000 / 250)
    return (
        f"its phases (2–3x, 5–10%, 5%, 5%) compound to {low:.1f}–{high:.1f}x (stated "
        f"2.6–3.1x); 1000 ms → 250–350 ms per token is {latency[0]:.1f}–{latency[1]:.1f}x"
    )


def _decode_paged() -> str:
    before_gb, after_mb = 8.5, 64
    return (
        f"8.5 GB / 64 MB = {before_gb * 1000 / after_mb:.0f}x decimal, "
        f"{before_gb * 1024 / after_mb:.0f}x binary (stated 100x and 135x in two places)"
    )


# ---- summaries of saved tables (the "ours" side computed from rows) ----


def _attention_growth_rows(table: pd.DataFrame) -> str:
    """Naive attention's growth from the shortest to the longest length that ran, per head
    dimension (a GPU run can run out of memory at the longest length for one and not another):
    one sentence when every head dimension ran the same lengths."""
    naive = table[(table["implementation"] == "naive") & (table["status"] == "ok")]
    spans = {}  # head_dim -> (shortest, longest, time ratio, memory ratio)
    for head_dim, group in naive.groupby("head_dim"):
        by_len = group.set_index("seq_len")
        small, big = by_len.index.min(), by_len.index.max()
        if small < big:
            spans[head_dim] = (
                small,
                big,
                by_len.at[big, "end_to_end_s"] / by_len.at[small, "end_to_end_s"],
                by_len.at[big, "peak_bytes"] / by_len.at[small, "peak_bytes"],
            )
    if not spans:
        return "naive attention ran at fewer than two lengths: no growth to state"
    if len({(small, big) for small, big, _, _ in spans.values()}) == 1:
        small, big, _, _ = next(iter(spans.values()))
        times = [time for _, _, time, _ in spans.values()]
        memory = [peak for _, _, _, peak in spans.values()]
        return (
            f"naive attention from n={small} to {big} ({big / small:.0f}x): time "
            f"{_span(times)}, peak memory {_span(memory)} (quadratic: {(big / small) ** 2:.0f}x)"
            + _apart(naive)
        )
    return (
        "naive attention, each head dimension up to its longest length that ran: "
        + "; ".join(
            f"d={head_dim}: n={small} to {big} ({big / small:.0f}x): time {_times(time)}, peak "
            f"memory {_times(peak)} (quadratic: {(big / small) ** 2:.0f}x)"
            for head_dim, (small, big, time, peak) in spans.items()
        )
        + _apart(naive)
    )


def _apart(rows: pd.DataFrame) -> str:
    """What a ratio of two rows' times is: separate medians, and how many of them are unstable."""
    unstable = int(rows.get("end_to_end_unstable", pd.Series(False, index=rows.index)).sum())
    return "; times: separate medians, no interval" + (
        f", {unstable} of {len(rows)} of them unstable" if unstable else ""
    )


def _statistics_rows(table: pd.DataFrame) -> str:
    median = table.set_index("statistic")["median_s"] * 1e3
    two_passes = median["mean"] + median["var"]
    return (
        f"the statistics alone: var_mean {median['var_mean']:.3f} ms against mean "
        f"{median['mean']:.3f} ms + var {median['var']:.3f} ms = {two_passes:.3f} ms, "
        f"{median['var_mean'] / two_passes:.2f}x (separate medians, not interleaved: no verdict)"
    )


def _allreduce_rows(table: pd.DataFrame) -> str:
    ok = table[table["status"] == "ok"]
    sizes = sorted(ok["size_mb"].unique())
    if not sizes:
        return "no Gloo all-reduce size ran: no growth to state"
    if len(sizes) == 1:
        return (
            f"Gloo all-reduce measured at one message size ({sizes[0]:g} MB) only: "
            "no growth to state"
        )
    small, big = sizes[-2:]
    parts = []
    for world, group in ok.groupby("world_size"):
        by_size = group.set_index("size_mb")["time_ms"]
        if small in by_size and big in by_size:
            parts.append(f"{world} ranks {by_size[big] / by_size[small]:.1f}x")
    return (
        f"Gloo all-reduce {small:g} → {big:g} MB ({big / small:g}x the bytes): "
        + ", ".join(parts)
        + " the time (separate medians, no interval)"
    )


def _weights_rows(table: pd.DataFrame) -> str:
    rows = table.set_index("category")
    parameters = rows.at["parameters", "measured_bytes"]
    count = parameters / 4
    return (
        f"float32 takes 4 bytes an element: parameters {parameters / 2**20:.1f} MiB measured "
        f"by the allocator = 4 bytes x "
        f"{count / 1e6:.2f}M float32 parameters (formula {rows.at['parameters', 'formula']})"
    )


def _data_path_rows(table: pd.DataFrame) -> str:
    """Each data path's step against synthetic batches, paired by round: ratio, interval and
    verdict (``vs_reference``)."""
    rows = table[table["data_path"] != "synthetic"]
    parts = []
    for r in rows.itertuples():
        ratio, interval = with_estimate(r.vs_reference, r.ci_low, r.ci_high, edges=band_edges())
        level = level_text(r.confidence)
        parts.append(f"{r.data_path} {ratio}x ({level} CI {interval}, {r.verdict})")
    return "step time against synthetic batches, paired by round: " + ", ".join(parts)


def _batch_rows(table: pd.DataFrame) -> str:
    first, last = table.iloc[0], table.iloc[-1]
    return (
        f"batch {first['batch_size']:.0f} → {last['batch_size']:.0f}: "
        f"{last['tokens_per_s'] / first['tokens_per_s']:.2f}x the tokens/s (separate medians, "
        "no interval)"
    )


def _accumulation_rows(table: pd.DataFrame) -> str:
    first, last = table.iloc[0], table.iloc[-1]
    return (
        f"{last['micro_batches']:.0f} micro-batches instead of 1: peak "
        f"{last['peak_bytes'] / first['peak_bytes']:.2f}x, "
        f"step {last['step_s'] / first['step_s']:.2f}x (separate medians, no interval)"
    )


def _activation_peak_rows(table: pd.DataFrame) -> str:
    plain = table[table["strategy"] == "none"].set_index("layers")["peak_bytes"].sort_index()
    fewest, most = plain.index.min(), plain.index.max()
    per_layer = (plain[most] - plain[fewest]) / (most - fewest)
    return (
        f"without checkpointing the peak of a block stack's forward and backward grows "
        f"{per_layer / 1e6:.1f} MB a layer from {fewest} to {most} layers, to "
        f"{plain[most] / 1e6:.1f} MB (the activations kept for backward and the temporaries "
        "live at the peak, not told apart)"
    )


def _kv_rows(table: pd.DataFrame) -> str:
    rows = table.drop_duplicates("cache").set_index("cache")
    return (
        f"paged cache holds {rows.at['paged', 'vs_contiguous']:.2f}x the bytes of a contiguous "
        "one preallocated to the longest length the batch can reach "
        f"({rows.at['contiguous', 'waste']:.0%} of that unused)"
    )


def _sampling_bytes_rows(table: pd.DataFrame) -> str:
    row = table[table["a"] == "on the device"].iloc[0]
    return (
        f"{row['host_bytes_per_token']:,.0f} B → {row['device_bytes_per_token']:.0f} B per token "
        f"({row['bytes_ratio']:,.0f}x, counted from the vocabulary); {row['sentence']}"
    )


def _copy_rows(table: pd.DataFrame) -> str:
    return (
        f"copies made by {len(table)} operators take {table['share_of_step'].sum():.1%} of the "
        "step, each traced to the operator that made it"
    )


CLAIMS = (
    Claim(
        "fsdp-note",
        "two NCCL kernels take ~57% of kernel time (45.9% + 11.2%); 'comm-bound'",
        MEASURED,
        _fsdp_shares,
        (GpuOnly("NCCL kernels; the Gloo runs of 07-08 time collectives on the CPU"),),
        "the collectives' share of kernel time",
    ),
    Claim(
        "fsdp-note",
        "LayerNorm statistics in one pass (var_mean): reduce kernels −30.2%, Welford −30.0%, "
        "MeanOps −76.0%",
        MEASURED,
        _fsdp_reductions,
        (
            Rows(
                "02_profiling",
                "layer_norm_statistics",
                _statistics_rows,
                "the statistics reductions' time",
            ),
        ),
        "the statistics reductions' time",
    ),
    Claim(
        "fsdp-note",
        "reusing the statistics in a hand-written backward: +10.3% tokens/s end to end",
        MEASURED,
        _fsdp_throughput,
        (
            NotMeasured(
                "no training step here runs the hand-written LayerNorm backward: 02 times it "
                "on the LayerNorm alone (its forward and backward), a different quantity"
            ),
        ),
        "a training step's tokens/s",
    ),
    Claim(
        "fsdp-note",
        "end to end moved less because the step is communication-dominated (57% → 49%)",
        MEASURED,
        _fsdp_share_fell,
        (GpuOnly("kernel shares of NCCL collectives need a multi-GPU trace"),),
        "the collectives' share of kernel time",
    ),
    Claim(
        "fsdp-note",
        "next step proposed: FSDP prefetch settings to overlap the all-gathers (not tried)",
        ESTIMATED,
        lambda: "a proposal: no figure to check",
        (
            Conclusion("08_sharding", "FSDP prefetch", "an FSDP step's time by prefetch depth"),
            Conclusion("08_sharding", "FSDP gathers", "an FSDP step's time by prefetch depth"),
        ),
        "an FSDP step's time by prefetch depth",
    ),
    Claim(
        "100m-note",
        "forward 35%, backward 62%, optimizer 3% of a 53 ms step",
        MEASURED,
        _m100_split,
        (Conclusion("01_benchmarking", "backward/forward", "each phase's share of a step"),),
        "each phase's share of a step",
    ),
    Claim(
        "100m-note",
        "model weights ~135 MB",
        MEASURED,
        _m100_weights,
        (Rows("09_training_step", "baseline_memory", _weights_rows, "the weights' bytes"),),
        "the weights' bytes",
    ),
    Claim(
        "100m-note",
        "8 layers of ~640 MB activations + 1.2 GB logits, peak ~5.4 GB in backward",
        MEASURED,
        _m100_peak,
        (
            Rows(
                "04_memory",
                "depth_sweep",
                _activation_peak_rows,
                "a step's peak memory and its activations per layer",
            ),
        ),
        "a step's peak memory and its activations per layer",
    ),
    Claim(
        "100m-note",
        "~76K tokens/s on synthetic data, ~31K on real data",
        MEASURED,
        _m100_throughput,
        (
            Rows(
                "09_training_step",
                "data_path",
                _data_path_rows,
                "a step's time with real data against synthetic",
            ),
        ),
        "a step's time with real data against synthetic",
    ),
    Claim(
        "100m-note",
        "19% of time in aten::copy_, 'well-handled, no changes needed'",
        MEASURED,
        lambda: "no breakdown of the 19% is given; the conclusion rests on one 5.6% comparison",
        (Rows("02_profiling", "copy_sites", _copy_rows, "the copies' share of a step"),),
        "the copies' share of a step",
    ),
    Claim(
        "100m-note",
        "attention layer 0 runs 40x longer on its first call (warm-up)",
        MEASURED,
        lambda: "one observation, no repeat; 40x is not derivable from the note's figures",
        (
            NotMeasured(
                "no layer's first call is timed on its own: 01's warm-up study tests whole "
                "training steps (the first timed step against the steps after it)"
            ),
        ),
        "one layer's first call against its later calls",
    ),
    Claim(
        "100m-note",
        "torch.compile with max-autotune-no-cudagraphs (already on)",
        MEASURED,
        lambda: "no speed-up is given for it",
        (
            Conclusion(
                "05_attention_compile",
                "max-autotune-no-cudagraphs",
                "a step's time with that compile mode",
            ),
        ),
        "a step's time with that compile mode",
    ),
    Claim(
        "cs336-writeup",
        "backward takes about 2x the forward; std/mean under 1%",
        MEASURED,
        _cs336_backward,
        (Conclusion("01_benchmarking", "backward/forward", "backward's time over forward's"),),
        "backward's time over forward's",
    ),
    Claim(
        "cs336-writeup",
        "softmax is 6.1% of one attention range (122.885 µs of 2.001 ms)",
        MEASURED,
        _cs336_softmax,
        (
            NotMeasured(
                "02 prints softmax's time beside its attention ranges (scores, softmax, weighted "
                "sum) from one profile on this device, but saves no table of it to quote here"
            ),
        ),
        "softmax's share of the attention range",
    ),
    Claim(
        "cs336-writeup",
        "the residual stream of xl at 256 x 4 is 12.5 MB (8 bytes per float32 element)",
        MEASURED,
        _cs336_residual,
        (
            Rows(
                "09_training_step",
                "baseline_memory",
                _weights_rows,
                "bytes per float32 element",
            ),
        ),
        "bytes per float32 element",
    ),
    Claim(
        "cs336-writeup",
        "attention 256 → 8192 (32x): time ~80x, memory ~60x; → 16384 (64x): ~315x, ~240x",
        MEASURED,
        _cs336_attention,
        (
            Rows(
                "05_attention_compile",
                "attention",
                _attention_growth_rows,
                "naive attention's time and memory growth with length",
            ),
        ),
        "naive attention's time and memory growth with length",
    ),
    Claim(
        "cs336-writeup",
        "torch.compile speeds up the whole Transformer step",
        MEASURED,
        _cs336_compile,
        (
            Conclusion(
                "05_attention_compile", "compiled model train-step", "a compiled step's time"
            ),
        ),
        "a compiled step's time",
    ),
    Claim(
        "cs336-writeup",
        "all-reduce on CPU scales linearly at 2 and 4 processes, superlinearly at 6",
        MEASURED,
        _cs336_allreduce,
        (
            Rows(
                "07_distributed_ddp",
                "allreduce",
                _allreduce_rows,
                "all-reduce time's growth with bytes",
            ),
        ),
        "all-reduce time's growth with bytes",
    ),
    Claim(
        "training-report",
        "quick wins (non-blocking copies, batch size, AMP) give 2–3x",
        ESTIMATED,
        _report_quick_wins,
        (
            NotMeasured(
                "the three quick wins are not measured together; bf16 autocast and batch size "
                "are measured alone (rows below); 09's kept stack is another set of changes"
            ),
        ),
        "a step's speed-up from the three quick wins together",
    ),
    Claim(
        "training-report",
        "24 h → 8–12 h after quick wins, 4–6 h with everything",
        ESTIMATED,
        _report_hours,
        (
            Conclusion(
                "09_training_step", "kept stack vs baseline", "a step's speed-up from everything"
            ),
        ),
        "a step's speed-up from everything",
    ),
    Claim(
        "training-report",
        "AMP: 2–3x speed-up",
        ESTIMATED,
        _report_estimate("2–3x"),
        (Conclusion("03_mixed_precision", "bf16 vs fp32", "a step's speed-up from AMP"),),
        "a step's speed-up from AMP",
    ),
    Claim(
        "training-report",
        "re-tokenising every batch costs 10–15%",
        ESTIMATED,
        _report_estimate("10–15%"),
        (
            Rows(
                "09_training_step",
                "data_path",
                _data_path_rows,
                "a step's time with tokenising against without",
            ),
        ),
        "a step's time with tokenising against without",
    ),
    Claim(
        "training-report",
        "batch size 1 leaves the GPUs at ~10% utilisation; raise it",
        ESTIMATED,
        _report_estimate("~10% utilisation"),
        (
            NotMeasured(
                "the device's utilisation is not measured; 09 measures tokens/s against batch "
                "size (batch_sizes.csv)"
            ),
        ),
        "the device's utilisation at batch size 1",
    ),
    Claim(
        "training-report",
        "a per-example loss loop costs 5–10%",
        ESTIMATED,
        _report_estimate("5–10%"),
        (Conclusion("09_training_step", "loss in one call", "the loss loop's cost"),),
        "the loss loop's cost",
    ),
    Claim(
        "training-report",
        "gradient accumulation with in-place adds avoids OOMs",
        ESTIMATED,
        _report_estimate("no number"),
        (
            Rows(
                "09_training_step",
                "accumulation",
                _accumulation_rows,
                "a step's peak memory with gradient accumulation",
            ),
        ),
        "a step's peak memory with gradient accumulation",
    ),
    Claim(
        "decode-analysis",
        "on-device sampling: 256 KB → 8 bytes per token, '33x I/O reduction'",
        ESTIMATED,
        _decode_sampling,
        (
            Rows(
                "10_decoding",
                "rotary_and_sampling",
                _sampling_bytes_rows,
                "bytes copied per token by sampling",
            ),
        ),
        "bytes copied per token by sampling",
    ),
    Claim(
        "decode-analysis",
        "trace capture 2–3x, memory configs 5–10%, RoPE 5%, sampling 5%: 2.6–3.1x in all",
        ESTIMATED,
        _decode_phases,
        (
            NotMeasured(
                "the four changes are not measured together: 10 compiles the fixed-shape step "
                "(trace capture's part, its own row) and times RoPE and sampling apart"
            ),
        ),
        "a decode step's speed-up from the four changes together",
    ),
    Claim(
        "decode-analysis",
        "paged KV cache: 8.5 GB → 64 MB ('100x', '135x')",
        ESTIMATED,
        _decode_paged,
        (Rows("10_decoding", "kv_memory", _kv_rows, "the KV cache's bytes"),),
        "the KV cache's bytes",
    ),
    Claim(
        "decode-analysis",
        "RoPE tables uploaded once: 5%",
        ESTIMATED,
        _report_estimate("5%"),
        (Conclusion("10_decoding", "rotary tables once", "a decode step's time"),),
        "a decode step's time",
    ),
    Claim(
        "decode-analysis",
        "weights in lower precision (BFP8) for decode",
        ESTIMATED,
        lambda: "no speed-up is given for it",
        (Conclusion("10_decoding", "int8 weights", "a decode step's time"),),
        "a decode step's time",
    ),
)


def _device_files(results: Path, notebook: str, name: str) -> list[tuple[str, Path]]:
    folders = device_folders(Path(results), notebook)
    return [
        (d.relative_to(results / notebook).as_posix(), d / name)
        for d in folders
        if (d / name).is_file()
    ]


NOT_MEASURED = "not measured here"


def ours_cells(ours: Ours, results: Path) -> list[tuple[str, str]]:
    """(where, what) for one of a claim's answers: one pair per device that holds it; none
    when nothing saved answers it (a test holds every claim to at least one)."""
    if isinstance(ours, GpuOnly):
        return [("GPU only", ours.why)]
    if isinstance(ours, NotMeasured):
        return [(NOT_MEASURED, ours.why)]
    if isinstance(ours, Conclusion):
        cells = []
        for device, path in _device_files(results, ours.notebook, "conclusions.csv"):
            table = pd.read_csv(path)
            hits = table[table["key"].astype(str).str.startswith(ours.key)]
            note = _older_code(table, path)
            cells += [(f"{ours.notebook}/{device}", str(s) + note) for s in hits["sentence"]]
        return cells
    cells = []
    for device, path in _device_files(results, ours.notebook, f"{ours.file}.csv"):
        table = pd.read_csv(path)
        where = f"{ours.notebook}/{device}/{ours.file}.csv"
        cells.append((where, ours.summary(table) + _older_code(table, path)))
    return cells


def _older_code(table: pd.DataFrame, path: Path) -> str:
    """'' for rows this library measured; else a note of the older code that did (its
    commit), since what it measured may have changed since."""
    from perflab.measure.paths import from_this_library, library_tree, recorded_trees

    sidecar = path.with_suffix(".json")
    saved = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    if from_this_library(recorded_trees(table, saved), library_tree()):
        return ""
    commits = sorted({str(c) for c in table.get("commit", pd.Series(dtype=str)).dropna()})
    commits = commits or ([str(saved["commit"])] if saved.get("commit") else [])
    at = f" at commit {', '.join(commits)}" if commits else ""
    return f" [measured by older code{at}, not this library: what it measured may differ]"


def claims_table(results: str | Path) -> pd.DataFrame:
    """One row per claim: source, claim, measured/estimated, the source's own arithmetic, and
    the workbook's answers (``answers``: (where, sentence) pairs, empty when none is saved)."""
    rows = []
    for claim in CLAIMS:
        answers = [cell for ours in claim.ours for cell in ours_cells(ours, Path(results))]
        rows.append(
            {
                "source": claim.source,
                "claim": claim.claim,
                "quantity": claim.quantity,
                "basis": claim.basis,
                "own figures": claim.check(),
                "answers": answers,
            }
        )
    return pd.DataFrame(rows)


def ours_text(answers: list[tuple[str, str]], code: str = "`") -> list[str]:
    """Each answer as 'sentence (where)'; 'not saved' when there is none."""
    if not answers:
        return ["not saved"]
    return [
        f"{what} ({where})"
        if where in ("GPU only", NOT_MEASURED)
        else f"{what} ({code}{where}{code})"
        for where, what in answers
    ]


def _escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(results: str | Path) -> str:
    """The tables of ``docs/sources.md``: one section per source, one row per claim."""
    table = claims_table(results)
    lines = []
    for source, rows in table.groupby("source", sort=False):
        lines += [f"## {source}: {SOURCES[source]}", ""]
        lines += [
            "| claim | quantity | basis | its own figures | ours |",
            "|---|---|---|---|---|",
        ]
        for _, row in rows.iterrows():
            ours = "<br>".join(_escape(text) for text in ours_text(row["answers"]))
            cells = [_escape(row[c]) for c in ("claim", "quantity", "basis", "own figures")]
            lines.append("| " + " | ".join([*cells, ours]) + " |")
        lines.append("")
    return "\n".join(lines)


DOC_HEADER = """# The sources' claims beside the workbook's

The five documents the workbook was designed from (`../shared/sources/`; none of them is this
project's) make headline claims. Each row gives the claim, whether the source measured or only
estimated it, its own arithmetic redone from its own figures, and the workbook's answer to the
same question: the concluding sentence or saved table of a notebook, with the results folder it
was read from. Each row names the quantity the claim measures (and its scope); every answer
measures that quantity, or says it is not measured here and why. The workbook's numbers are
from this repository's committed results (a CPU here; GPU rows where `data/GPU_CHECKS.md` lists
them): the sizes differ from the sources', so they answer the same question, not the same
number. Rendered by `perflab.tools.claims.write_doc()` from
`perflab.tools.claims.CLAIMS` and `data/results`; a test holds this file to both.

"""


def write_doc(path: str | Path | None = None, results: str | Path | None = None) -> Path:
    """Render ``docs/sources.md`` from the committed results (or ``results``)."""
    root = Path(__file__).resolve().parents[3]
    path = Path(path) if path else root / "docs" / "sources.md"
    results = Path(results) if results else data_dir() / "results"
    path.write_text(DOC_HEADER + markdown_table(results))
    return path
