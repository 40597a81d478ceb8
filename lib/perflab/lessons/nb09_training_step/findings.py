"""What notebook 09's measurements say, as sentences computed from their tables.

Each function reads what ``perflab.training`` measured (the baseline's phases and memory, the
loss head, the ladder, the data path, batching, the leaderboard's modelled step) and returns
the sentences the notebook prints; they are tested on small frames
(``tests/test_training_findings.py``).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pandas as pd

from perflab.distributed.comm_accounting import B200_180GB, H100_80GB
from perflab.implementations.model import ModelConfig
from perflab.lessons.nb09_training_step.sharded_step import sharded_step_memory
from perflab.lessons.nb09_training_step.step_model import Efficiency, StepPlan, step_ops
from perflab.measure.comparison import Comparison, band_edges, describe_ratio
from perflab.measure.stats import apart, level_text, rounded, with_estimate

MiB = 2**20
#: Peaks within this factor of the gradients' bytes: the activations and logits too small to
#: move them.
NEAR_GRADIENTS = 1.25


def setup_lines(
    config: ModelConfig, batch: int, seq_len: int, device_type: str, leaderboard: ModelConfig
) -> list[str]:
    """The model and batch of this run, and the leaderboard's logits (2 x 32,768 tokens)."""
    tokens = 2 * 32768 * leaderboard.vocab_size
    return [
        f"{config.name}: {config.num_parameters() / 1e6:.2f} M parameters, batch {batch} x "
        f"{seq_len} tokens, on {device_type}",
        f"the leaderboard's logits, 2 x 32,768 tokens x {leaderboard.vocab_size:,}: "
        f"{tokens * 2 / 1e9:.1f} GB in bfloat16, {tokens * 4 / 1e9:.1f} GB in float32",
    ]


def phase_sentence(phases: pd.DataFrame) -> str:
    """The shares of forward, backward and optimizer (``step_phases``), and backward against
    forward beside the 2x of the matmuls alone (no interval here: no difference claimed)."""
    by = phases.set_index("phase")
    ratio = by.loc["backward", "median_ms"] / by.loc["forward", "median_ms"]
    return (
        f"forward {by.loc['forward', 'share']:.0%}, backward {by.loc['backward', 'share']:.0%}, "
        f"optimizer {by.loc['optimizer', 'share']:.0%} of the step (median shares); the median "
        f"backward takes {ratio:.2f}x the median forward (the matmuls alone would take 2x: two "
        "gradient matmuls per forward one; a ratio of medians with no interval, so no "
        "difference from 2x is claimed here: notebook 01 tests it)"
    )


def formulas_match(memory: pd.DataFrame) -> bool:
    """Whether every category of ``step_memory`` with a formula measured exactly its bytes."""
    with_formula = memory.dropna(subset=["formula_bytes"])
    return bool((with_formula["measured_bytes"] == with_formula["formula_bytes"]).all())


def logits_sentence(memory: pd.DataFrame, config: ModelConfig) -> str:
    """Whether the logits outweigh one block's saved activations and the parameters."""
    by = memory.set_index("category")["measured_bytes"]
    logits = by["logits"]
    if logits <= max(by["saved activations, one block"], by["parameters"]):
        return f"The logits ({logits / MiB:.1f} MiB) are not the largest category here."
    return (
        f"The logits ({logits / MiB:.1f} MiB) are larger than one block's saved activations "
        f"({by['saved activations, one block'] / MiB:.1f} MiB) and than the parameters "
        f"({by['parameters'] / MiB:.1f} MiB): with a vocabulary of {config.vocab_size:,} and "
        f"d_model {config.d_model}, each token's logits are "
        f"{config.vocab_size / config.d_model:.0f}x its hidden state."
    )


#: The fused head's goal: a peak of at most a quarter of the plain head's.
HEAD_GOAL = 0.25


def head_sentence(head: pd.DataFrame, tokens: int, vocab: int, d_model: int) -> str:
    """The fused head's peak against the plain head's (``head_peak_memory``), against the goal
    of at most a quarter."""
    share = head.set_index("method").loc["fused", "of_plain"]
    shown, _ = apart(share, HEAD_GOAL, decimals=3)  # printed on the side of the goal it lies
    goal = f"{HEAD_GOAL:g}"
    return (
        f"{tokens} tokens x vocabulary {vocab:,} x d {d_model}, float32: the fused head peaks at "
        f"{shown}x the plain head's memory (the goal: at most {goal}x; "
        + ("met)" if share <= HEAD_GOAL else "NOT met)")
    )


def chunk_sentence(chunks: pd.DataFrame, default: int) -> str:
    """The chunk size with the smallest median and the leanest one of ``chunk_size_sweep``
    among its stable rows, beside the ``default``: separate medians, so no size is called
    faster than another."""
    steady = chunks[~chunks["unstable"]]
    if steady.empty:
        return "every chunk size's timing is unstable: no choice is drawn from them"
    fastest = steady.loc[steady["median_s"].idxmin()]
    lean = steady.loc[steady["peak_bytes"].idxmin()]
    return (
        f"smallest median: chunk {int(fastest.chunk_size)} ({fastest.median_s * 1e3:.1f} ms, "
        f"peak {fastest.peak_over_hidden:.1f}x the hidden states); least memory: chunk "
        f"{int(lean.chunk_size)} ({lean.median_s * 1e3:.1f} ms, {lean.peak_over_hidden:.1f}x); "
        f"the default is {default} here"
        + (" (not among the sizes swept)" if default not in set(chunks["chunk_size"]) else "")
        + ". Separate medians, not interleaved: no chunk size is shown faster than another."
    )


def peaks_near_gradients(greedy: pd.DataFrame, memory: pd.DataFrame) -> bool:
    """Whether every rung's peak stays within ``NEAR_GRADIENTS`` x the gradients' bytes."""
    gradients = memory.set_index("category").loc["gradients", "measured_bytes"]
    return bool(greedy["peak_bytes"].max() < NEAR_GRADIENTS * gradients)


def ladder_sentences(
    greedy: pd.DataFrame,
    stack_name: str,
    memory: pd.DataFrame,
    phases: pd.DataFrame,
    batch: int,
    seq_len: int,
    phase_steps: int,
) -> list[str]:
    """Each rung of ``greedy_ladder`` (its ratio, interval, verdict and whether it was kept, or
    why it was not timed), the kept stack, whether the peaks stay near the gradients, and the
    baseline's phases against its median in the first comparison."""
    sentences = []
    for row in greedy.iloc[1:].itertuples():
        if not isinstance(row.verdict, str) or not row.verdict:
            sentences.append(f"{row.rung}: {row.reason}")
            continue
        ratio, interval = with_estimate(row.vs_best, row.ci_low, row.ci_high, edges=band_edges())
        sentences.append(
            f"{row.rung} on {row.tried_on}: {ratio}x its time "
            f"({level_text(row.confidence)} CI {interval}, "
            f"{int(row.rounds)} rounds, {row.verdict}): {'kept' if row.kept else 'dropped'}; "
            f"peak {row.peak_bytes / MiB:.1f} MiB; first step {row.first_step_s:.2f} s"
        )
    sentences.append(f"kept: {stack_name}")
    if peaks_near_gradients(greedy, memory):
        gradients = memory.set_index("category").loc["gradients", "measured_bytes"]
        sentences.append(
            f"At {batch} x {seq_len} tokens the peaks stay within {NEAR_GRADIENTS}x the "
            f"gradients ({gradients / MiB:.1f} MiB): the activations and logits are too small "
            "here to move them; section 2 measures the head where they are not."
        )
    timed = greedy["base_step_s"].iloc[1:].dropna()  # the first rung timed against the baseline
    if timed.empty:  # no rung was timed: nothing to hold the phases against
        return sentences
    phase_ms, base_ms = phases["median_ms"].sum(), timed.iloc[0] * 1e3
    sentences.append(
        f"the baseline's phases (section 1, {phase_steps} steps with synchronised marks) add up "
        f"to {phase_ms:.1f} ms against its {base_ms:.1f} ms median in the first comparison: "
        f"{phase_ms / base_ms:.2f}x, two separate measurements at different moments (possible "
        "reasons, none measured here: a sum of medians is not the median of sums, the marks' "
        "synchronisations may add a cost of their own, and the machine may drift between them)"
    )
    return sentences


def stack_sentence(
    whole: Comparison, flops: float, base_peak: float, stack_peak: float, stack_dtype: str
) -> str:
    """The kept stack's speed-up over the baseline with its interval, and each step's MFU
    against the measured matmul peak in its dtype (``flops``: one step's training FLOPs)."""
    base_s, stack_s = np.median(whole.times_a), np.median(whole.times_b)
    speedup_edges = tuple(1 / edge for edge in band_edges(whole.noise_band))
    speedup, interval = with_estimate(
        1 / whole.ratio, 1 / whole.ci[1], 1 / whole.ci[0], edges=speedup_edges
    )
    return (
        f"speed-up {speedup}x ({level_text(whole.confidence)} CI {interval}x); "
        f"MFU, against the matmul peak in each step's dtype: baseline "
        f"{flops / base_s / base_peak:.0%} of {base_peak / 1e9:.0f} GFLOP/s (float32), kept "
        f"stack {flops / stack_s / stack_peak:.0%} of {stack_peak / 1e9:.0f} GFLOP/s "
        f"({stack_dtype}); at the float32 peak the baseline's step would take "
        f"{flops / base_peak * 1e3:.1f} ms against its {base_s * 1e3:.1f} ms (this comparison's "
        "median)"
    )


def kept_bound_sentence(bounds: pd.DataFrame, greedy: pd.DataFrame, stack_name: str) -> str:
    """Which category of operators (by their names: ``greedy_bound_table``) holds the largest
    share of the kept stack's operator time; a share of time, not a bound."""
    kept = bounds.set_index("rung").loc[greedy.loc[greedy["kept"], "rung"]].iloc[-1]
    return (
        f"in the kept stack ({stack_name}), {kept['dominant']} operators (named so by their "
        f"kernels) hold {kept['dominant_share']:.0%} of the operator time, the largest share"
    )


def gqa_sentence(result: Comparison, num_heads: int, kv_heads: int) -> str:
    """Grouped-query attention's parameters against multi-head, with the timed comparison
    (``kv_heads_against_mha``)."""
    grouped, mha = result.details["parameters_grouped"], result.details["parameters_mha"]
    return (
        f"{num_heads} query heads, {kv_heads} key and value heads: {grouped / 1e6:.2f} M "
        f"parameters against {mha / 1e6:.2f} M ({1 - grouped / mha:.1%} fewer); "
        + result.sentence()
    )


def data_path_sentences(table: pd.DataFrame, modes, device_type: str) -> list[str]:
    """Each data path against synthetic batches (``paired_table``'s rows), and what this
    device does not show (workers sharing the cores; pinned memory, GPU only)."""
    sentences = [
        f"{row.data_path}: {row.median_ms:.1f} ms a step; "
        + describe_ratio(
            "synthetic data",
            row.data_path,
            row.vs_reference,
            (row.ci_low, row.ci_high),
            confidence=row.confidence,
        )
        for row in table.iloc[1:].itertuples()
    ]
    if device_type == "cpu" and any("worker" in mode for mode in modes):
        sentences.append(
            f"(the DataLoader's worker processes share this machine's {os.cpu_count()} cores "
            "with the step)"
        )
    if device_type != "cuda":
        sentences.append(
            "pinned memory with non_blocking copies: GPU only (no host-to-device copy here)"
        )
    return sentences


def speeches_line(speeches: list, seq_len: int) -> str:
    """How many speeches the corpus holds, their median length, and how many were cut."""
    lengths = pd.Series([len(s) - 1 for s in speeches])
    return (
        f"{len(speeches):,} speeches: {lengths.median():.0f} tokens at the median, "
        f"{(lengths == seq_len).mean():.0%} cut at {seq_len}"
    )


def bucketing_sentence(rows: pd.DataFrame, sequences: int, batch: int) -> str:
    """Padding in a random order against bucketed by length (``compare_bucketing``'s rows)."""
    by = rows.set_index("order")
    return (
        f"{sequences} speeches in batches of {batch}: padding is "
        f"{by.loc['random', 'padding_share']:.0%} of the positions in a random order and "
        f"{by.loc['bucketed', 'padding_share']:.0%} bucketed "
        f"({by.loc['bucketed', 'positions'] / by.loc['random', 'positions']:.2f}x the "
        f"positions); real tokens/s at the medians: {by.loc['random', 'tokens_per_s']:,.0f} "
        f"against {by.loc['bucketed', 'tokens_per_s']:,.0f}"
    )


def micro_batch_sizes(global_batch: int) -> list[int]:
    """Micro-batch sizes of 1 to 32 that divide ``global_batch``."""
    return [n for n in (1, 2, 4, 8, 16, 32) if n <= global_batch and global_batch % n == 0]


def batch_size_sentence(sizes: pd.DataFrame, accumulated: pd.DataFrame, global_batch: int) -> str:
    """The largest batch against the smallest (``batch_size_table``), and the finest
    accumulation against one batch (``accumulation_table``): tokens/s, peak and step time."""
    small, large = sizes.iloc[0], sizes.iloc[-1]
    whole, finest = accumulated.iloc[0], accumulated.iloc[-1]
    lower = finest["peak_bytes"] < whole["peak_bytes"]
    return (
        f"batch {int(large['batch_size'])}: {large['tokens_per_s']:,.0f} tokens/s against "
        f"{small['tokens_per_s']:,.0f} at batch {int(small['batch_size'])} (medians of separate "
        f"runs), peak {large['peak_bytes'] / small['peak_bytes']:.1f}x. "
        f"{int(finest['micro_batches'])} micro-batches of {int(finest['micro_batch'])} instead "
        f"of one batch of {global_batch}: peak {finest['peak_bytes'] / whole['peak_bytes']:.2f}x"
        + (
            " (one micro-batch's activations at a time)"
            if lower
            else " (no lower: here the gradients, not the activations, set the peak)"
        )
        + f", step {finest['step_s'] / whole['step_s']:.2f}x the time (separate medians)."
    )


def leaderboard_memory(config: ModelConfig, world_sizes=(1, 2)) -> pd.DataFrame:
    """``sharded_step_memory`` of the leaderboard's step (2 sequences at its full context) with
    the state in float32 and in bfloat16, one frame with a ``state`` column."""
    return pd.concat(
        [
            sharded_step_memory(
                config, 2, config.context_length, list(world_sizes), state_dtype=state
            ).assign(state=state)
            for state in ("float32", "bfloat16")
        ],
        ignore_index=True,
    )


def memory_sentences(
    memory: pd.DataFrame,
    config: ModelConfig,
    ladder_near_gradients: bool,
    gpus=(H100_80GB, B200_180GB),
) -> list[str]:
    """Per state dtype, whether the step may fit on each GPU at each world size (lower bounds),
    and what checkpointing saves at the most GPUs counted (bfloat16 state) against the
    ladder's own peaks: required where the activations alone exceed every GPU's memory."""
    sentences = []
    for state, rows in memory.groupby("state", sort=False):
        per_rank = rows.set_index("world_size")["at_least_GB"]
        verdicts = []
        for gpu in gpus:
            fit = [w for w, total in per_rank.items() if total <= gpu.memory_bytes / 1e9]
            verdicts.append(
                f"{gpu.name}: "
                + (f"may fit on {min(fit)}" if fit else f"does not fit on {per_rank.index.max()}")
            )
        sizes = " / ".join(str(w) for w in per_rank.index)
        totals = " / ".join(rounded(total, 1, "down") for total in per_rank)  # lower bounds
        sentences.append(
            f"{state} state, per rank on {sizes} GPUs: at least {totals} GB; " + "; ".join(verdicts)
        )
    sentences.append(
        "(lower bounds: the allocator's fragmentation and the CUDA context come on top, so "
        "'may fit' still needs a run to confirm)"
    )
    bf16 = memory[memory["state"] == "bfloat16"]
    if bf16.empty:
        return sentences
    most = bf16.loc[bf16["world_size"].idxmax()]
    unchecked = most["unchecked_activations_GB"]
    required = unchecked > max(gpu.memory_bytes for gpu in gpus) / 1e9
    sentences.append(
        f"Without checkpointing, the {config.num_layers} blocks' saved activations alone would "
        f"take {unchecked:.0f} GB per rank on {most['world_size']} GPUs, against "
        f"{most['block inputs (checkpoints)'] + most['one block recomputed']:.1f} GB with it: "
        + (
            "at this size memory requires checkpointing"
            if required
            else "checkpointing saves memory here, though the activations would fit"
        )
        + (
            ", while the ladder above, whose peaks stay near its gradients, does not."
            if ladder_near_gradients and required
            else "."
        )
    )
    return sentences


def gpu_lines(gpus) -> list[str]:
    """Each GPU's datasheet figures with their source (``perflab.measure.hardware``)."""
    return [
        f"{gpu.name}: {gpu.bf16_flops / 1e12:,.0f} TFLOP/s dense bf16, "
        f"{gpu.hbm_bytes_per_s / 1e12:.2f} TB/s, NVLink {gpu.nvlink_bytes_per_s / 1e9:.0f} GB/s a "
        f"direction; source: {gpu.source}"
        for gpu in gpus
    ]


def head_chunk_estimates(
    config: ModelConfig, plan: StepPlan, gpu, efficiency: Efficiency, chunks=(128, 1024, 4096)
) -> pd.DataFrame:
    """The modelled step of ``plan`` on 2 ``gpu``s with each fused-head chunk size, and one
    chunk's float32 logits."""
    return pd.DataFrame(
        [
            {
                "head_chunk": chunk,
                "step_s": step_ops(
                    config,
                    dataclasses.replace(plan, head_chunk=chunk),
                    2,
                    config.context_length,
                    2,
                    gpu,
                    efficiency,
                )["time_s"].sum(),
                "chunk_logits_GB": chunk * config.vocab_size * 4 / 1e9,
            }
            for chunk in chunks
        ]
    )


def best_step_sentences(
    parts: pd.DataFrame, chunks: pd.DataFrame, efficiency: Efficiency, gpu
) -> list[str]:
    """Where the modelled best step spends its time (``time_by_part``), its FLOPs alone at the
    matmul efficiency, and each head chunk size's step."""
    floor = parts["flops"].sum() / (efficiency.matmul * gpu.bf16_flops)
    return [
        f"best step {parts['time_s'].sum():.2f} s: "
        + ", ".join(f"{row.part} {row.share:.0%}" for row in parts.itertuples())
        + f"; its FLOPs alone at {efficiency.matmul:.0%} of the peak take {floor:.2f} s.",
        "fused head chunks of "
        + ", ".join(
            f"{row.head_chunk} tokens: {row.step_s:.2f} s ({row.chunk_logits_GB:.1f} GB of logits)"
            for row in chunks.itertuples()
        ),
    ]


def sharded_sentence(row: dict) -> str:
    """The sharded step's time, tokens/s and (on CUDA) peak (``sharded_step_row``)."""
    return (
        f"{row['preset']} on {row['world_size']} ranks: {row['step_s'] * 1e3:.1f} ms a step "
        f"(median of {row['steps']}, the slowest rank's"
        + ("; unstable: too few or too spread samples to conclude from" if row["unstable"] else "")
        + f"), {row['tokens_per_s']:,.0f} tokens/s"
        + (
            f", peak {row['peak_bytes'] / 1e9:.1f} GB on the fullest GPU"
            if row["peak_bytes"]
            else ""
        )
    )
