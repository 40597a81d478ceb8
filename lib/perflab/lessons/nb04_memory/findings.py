"""What notebook 04's measurements and models say, as sentences computed from their numbers.

Each function reads what ``perflab.memory`` returned (timelines, peak tables, saved tensors,
the meta-device models, the checkpointing sweeps) and returns the lines the notebook prints;
they are tested on small frames (``tests/test_memory_findings.py``).
"""

from __future__ import annotations

import math

import pandas as pd

from perflab.implementations.checkpointing import forward_counts
from perflab.implementations.model import ModelConfig
from perflab.lessons.nb04_memory.checkpoint_study import modelled_group_peaks
from perflab.lessons.nb04_memory.step_memory import log_fit
from perflab.measure.stats import rounded
from perflab.memory.saved import saved_bytes

MiB = 2**20


def peak_lines(timelines: dict) -> list[str]:
    """Where each timeline (``record_timeline``) peaks: how high, when, in which operator and
    Python frames, and what is still held at the end."""
    lines = []
    for mode, timeline in timelines.items():
        peak = timeline.at_peak()
        lines.append(
            f"{mode}: peak {peak['peak_bytes'] / MiB:.1f} MiB above the memory held before, "
            f"{peak['time_share']:.0%} of the way through, in {peak['origin']} "
            f"({peak['python_stack']}); {peak['end_bytes'] / MiB:.1f} MiB still held at the end"
        )
    return lines


def logits_line(config: ModelConfig, batch: int, context: int, largest: pd.DataFrame) -> str:
    """The logits' size beside the training step's largest allocation."""
    logits = batch * context * config.vocab_size * 4
    return (
        f"logits of batch x context x vocabulary = {batch} x {context} x {config.vocab_size} "
        f"float32 = {logits / MiB:.2f} MiB; the largest allocation is "
        f"{largest['delta_bytes'].iloc[0] / MiB:.2f} MiB ({largest['origin'].iloc[0]})"
    )


def peak_table(peaks: pd.DataFrame) -> pd.DataFrame:
    """The peak-memory sweep in MiB, by context length (rows) and mode and dtype (columns)."""
    return (
        peaks.pivot_table(index="context_length", columns=["mode", "dtype"], values="peak_bytes")
        / MiB
    )


def growth_lines(table: pd.DataFrame) -> list[str]:
    """How each peak grows from the shortest context to the longest, and what bfloat16
    autocast changes at the longest (``peak_table``)."""
    first, last = table.index[0], table.index[-1]
    growth = table.iloc[-1] / table.iloc[0]
    longest = table.iloc[-1]
    change = ", ".join(
        f"{longest[mode, 'bfloat16'] / longest[mode, 'float32'] - 1:+.1%} ({mode})"
        for mode in ("forward", "train-step")
    )
    return [
        f"from context {first} to {last} ({last / first:.0f}x), peak memory grows "
        + ", ".join(f"{m}/{d} {g:.1f}x" for (m, d), g in growth.items()),
        f"at context {last}, bfloat16 autocast changes the peak by {change} against float32",
    ]


def rmsnorm_lines(saved: dict[str, pd.DataFrame]) -> list[str]:
    """What RMSNorm saves for backward, eager and compiled (``rmsnorm_saved_tensors``)."""
    lines = [
        f"{name} RMSNorm saves {saved_bytes(table)} bytes in {int(table['counted'].sum())} "
        f"tensors: {list(table.loc[table['counted'], 'shape'])}"
        for name, table in saved.items()
    ]
    ratio = saved_bytes(saved["compiled"]) / saved_bytes(saved["eager"])
    return [*lines, f"compiled / eager: {ratio:.3f}"]


def module_line(whole: pd.DataFrame, by_module: pd.DataFrame, preset: str, context: int) -> str:
    """What the whole model saves, and the module that saves the most of it."""
    top = by_module.iloc[0]
    return (
        f"the whole {preset} model and its loss save {saved_bytes(whole) / MiB:.2f} MiB at "
        f"context {context}; the most, {top['share']:.1%}, is saved by {top['module']} "
        f"({top['producers']})"
    )


def gradient_line(gradients: pd.DataFrame, backward_ms: float) -> str:
    """``gradient_memory``'s table as a sentence: each block's gradients as the allocator
    allocated them, held against 4 bytes (the element size) x the block's parameters, when
    they were allocated, and in which order."""
    blocks = gradients[gradients["module"].str.startswith("blocks.")]
    equal = bool((gradients["allocated_bytes"] == gradients["formula_bytes"]).all())
    all_found = bool((gradients["found"] == gradients["gradients"]).all())
    after = bool((gradients["first_ms"] > backward_ms).all())
    reverse = bool(blocks["first_ms"].is_monotonic_decreasing)
    sizes = sorted(set(blocks["allocated_bytes"]))
    per_block = " or ".join(f"{b / MiB:.2f} MiB" for b in sizes)
    return (
        f"each block's gradients: {per_block} from the allocator, the element size x its "
        f"parameters for every module: {equal}; every gradient found as a live allocation: "
        f"{all_found}; all allocated after backward began: {after}; the blocks' gradients "
        f"allocated last block first: {reverse}"
    )


def xl_sizes_sentence(sizes: pd.DataFrame, config: ModelConfig) -> str:
    """xl's residual stream, one block's gradients and what it saves (``handout_sizes``)."""
    xl = sizes[sizes["preset"] == "xl"].set_index("seq_len")
    at = xl.loc[2048]
    return (
        f"xl residual stream at context 2048: 4 x 2048 x {config.d_model} x 4 bytes = "
        f"{at['residual_stream_MiB']:.2f} MiB (at context 512, the 2025 handout's 2.7B: "
        f"{xl.loc[512, 'residual_stream_MiB']:.2f} MiB). One block's gradients: "
        f"{at['block_gradients_MiB']:.2f} MiB, its parameters x 4 bytes, whatever the context; "
        f"over {config.num_layers} blocks "
        f"{config.num_layers * at['block_gradients_MiB'] / 1024:.2f} GiB. At context 2048 one "
        f"block saves {at['block_saves_MiB'] / at['block_gradients_MiB']:.1f}x its gradients' "
        "size for backward"
    )


def handout_example_sentence(example: pd.DataFrame, sizes: pd.DataFrame) -> str:
    """The handout's worked figures against this workbook's model (``handout_example``): the
    checkpointed pairs, and the compiled block's gap in score tensors."""
    pairs = example.loc["four blocks as two checkpointed pairs"]
    block = example.loc["one block, compiled"]
    score = 4 * 16 * 2048 * 2048 * 4 / MiB
    gap = block["handout_MiB"] - block["this_workbook_MiB"]
    residual = sizes.set_index(["preset", "seq_len"]).loc[("xl", 2048), "residual_stream_MiB"]
    exact = (
        "the handout figure exactly" if pairs["difference_MiB"] == 0 else "not the handout figure"
    )
    return (
        f"two checkpointed pairs save {pairs['this_workbook_MiB']:.2f} MiB here, {exact} (two "
        f"pair inputs of {residual:.2f} MiB). One compiled block saves {abs(gap):.2f} MiB "
        f"{'less' if gap > 0 else 'more'} here than the handout's implementation: "
        f"{abs(gap) / score:.3f}x the size of one (4, 16, 2048, 2048) float32 score tensor "
        f"({score:.0f} MiB)"
    )


def model_against_measured(peaks: pd.DataFrame, modelled: pd.DataFrame) -> pd.DataFrame:
    """The measured float32 peaks beside ``modelled_step_peaks``, with their ratio."""
    measured = peaks[peaks["dtype"] == "float32"][["context_length", "mode", "peak_bytes"]]
    held = measured.merge(modelled, on=["context_length", "mode"])
    return held.assign(model_over_measured=held["model_bytes"] / held["peak_bytes"])


def model_line(held: pd.DataFrame) -> str:
    """How close the model comes to every measured peak (``model_against_measured``)."""
    worst = (held["model_over_measured"] - 1).abs().max()
    contexts = ", ".join(map(str, sorted(set(held["context_length"]))))
    return (
        f"the model is within {rounded(worst * 100, 2, 'up')}% of all {len(held)} measured "
        "float32 peaks (forward and "
        f"training step at contexts {contexts})"
    )


def xl_step_sentence(steps: pd.DataFrame, memory_gib: float) -> str:
    """xl's modelled step (``whole_step_table``): what it always holds, where it peaks at the
    shortest and longest context, and which contexts fit a GPU of ``memory_gib``."""
    by = steps.set_index("seq_len")
    short, long = by.iloc[0], by.iloc[-1]
    held = short["parameters_GiB"] + short["optimizer_state_GiB"]
    fits = ", ".join(
        f"context {n} {'fits' if row['step_peak_GiB'] <= memory_gib else 'does not fit'}"
        for n, row in by.iterrows()
    )
    return (
        f"xl holds {held:.2f} GiB in every step (parameters and AdamW's moments). At context "
        f"{by.index[0]} the step peaks in the {short['step_peak_in']} at "
        f"{short['step_peak_GiB']:.2f} GiB (a forward pass alone, parameters and activations with "
        f"no optimizer state: {short['forward_peak_GiB']:.2f} GiB); at {by.index[-1]} in the "
        f"{long['step_peak_in']} at {long['step_peak_GiB']:.2f} GiB, of which "
        f"{long['saved_activations_GiB']:.2f} GiB are saved activations "
        f"({long['largest_saver_share']:.0%} of them by {long['largest_saver']}). Against a "
        f"{memory_gib:.1f} GiB GPU: {fits}"
    )


def group_line(optimum: dict, layers: int) -> str:
    """The measured best group size against sqrt(L) and the cost model (``best_group_size``)."""
    return (
        f"L = {layers}: measured best group size {optimum['best']}; nearest to sqrt(L) = "
        f"{optimum['sqrt_layers']:.1f}: {optimum['nearest_to_sqrt']} "
        f"({optimum['steps_from_sqrt']} grid steps away); cost-model optimum sqrt(L*b/A) = "
        f"{optimum['model_optimum']:.2f} -> {optimum['nearest_to_model']} "
        f"({optimum['steps_from_model']} grid steps away)"
    )


def xl_group_line(sizes: pd.DataFrame, config: ModelConfig) -> str:
    """The cost model's best group size for xl at context 2048, from ``handout_sizes``' b and
    A, with its first activation peaks."""
    at = sizes.set_index(["preset", "seq_len"]).loc[("xl", 2048)]
    residual, block = at["residual_stream_MiB"] * MiB, at["block_saves_MiB"] * MiB
    peaks = modelled_group_peaks(config.num_layers, residual, block)
    best = int(peaks.loc[peaks["peak_bytes"].idxmin(), "group_size"])
    shown = ", ".join(
        f"g={g} {b / 2**30:.2f} GiB"
        for g, b in zip(peaks["group_size"][:4], peaks["peak_bytes"][:4], strict=True)
    )
    return (
        f"xl: the cost model's best group size is {best} (sqrt(L*b/A) = "
        f"{math.sqrt(config.num_layers * residual / block):.2f}), activation peaks: {shown}"
    )


def k_way_line(ks=(2, 3, 4, 8)) -> str:
    """Inputs held per ln L for a k-way nested split: k / ln k."""
    return "inputs held per ln L for a k-way split, k / ln k: " + ", ".join(
        f"k={k}: {k / math.log(k):.2f}" for k in ks
    )


def depth_lines(depth: pd.DataFrame, residual: int) -> list[str]:
    """The nested peak fitted against log2 of the depth, in residual streams per doubling, and
    the growth with and without checkpointing (``depth_sweep``)."""
    nested = depth[depth["strategy"] == "nested"]
    plain = depth[depth["strategy"] == "none"]
    fit = log_fit(list(nested["layers"]), list(nested["peak_bytes"]))
    # Judged as printed: an exact slope of one stream (a CUDA allocator's) can land a rounding
    # error below 1, which read "1.00 ... outside the one-to-two" on an H200.
    per_level = round(fit["slope_per_doubling"] / residual, 2)
    return [
        f"nested: peak = {fit['intercept'] / MiB:.2f} MiB + "
        f"{fit['slope_per_doubling'] / MiB:.3f} MiB per doubling of depth (R^2 = "
        f"{fit['r2']:.3f}), {per_level:.2f} residual streams of {residual / MiB:.3f} MiB: "
        + (
            "between one and two inputs held per level, as argued"
            if 1 <= per_level <= 2
            else "outside the one-to-two inputs per level argued above"
        ),
        f"from {plain['layers'].min()} to {plain['layers'].max()} layers the peak grows "
        f"{plain['peak_bytes'].iloc[-1] / plain['peak_bytes'].iloc[0]:.1f}x without "
        f"checkpointing and {nested['peak_bytes'].iloc[-1] / nested['peak_bytes'].iloc[0]:.2f}x "
        "nested",
    ]


def recompute_table(layers: list[int]) -> pd.DataFrame:
    """Forwards per block in one forward + backward (``forward_counts``), per depth: no
    checkpointing, single level with groups of 2, nested, and 1 + log2 L."""
    arrangements = {"none": ("none",), "single, g=2": ("single", 2), "nested": ("nested",)}
    return pd.DataFrame(
        [
            {
                "layers": n,
                **{name: sum(forward_counts(n, *how)) / n for name, how in arrangements.items()},
                "1 + log2(L)": 1 + math.log2(n),
            }
            for n in layers
        ]
    ).set_index("layers")


def nested_forwards_line(layers: list[int]) -> str:
    """Whether every block of a nested stack runs 1 + log2 L forwards at each depth."""
    every = all(count == 1 + math.log2(n) for n in layers for count in forward_counts(n, "nested"))
    return (
        "nested: every block runs 1 + log2(L) forwards, so O(L log L) forward compute for "
        f"O(log L) memory: {every}"
    )


def nested_keep_line(depth: pd.DataFrame) -> str:
    """What nested checkpointing keeps of the plain peak at the deepest stack."""
    deepest = depth["layers"].max()
    peaks = depth[depth["layers"] == deepest].set_index("strategy")["peak_bytes"]
    return (
        f"nested checkpointing at {deepest} layers keeps "
        f"{peaks['nested'] / peaks['none']:.1%} of the plain peak memory"
    )


def full_step_lines(
    plain_bytes: int,
    best_bytes: int,
    groups: pd.DataFrame,
    depth: pd.DataFrame,
    layers: int,
    preset: str,
    best: int,
) -> list[str]:
    """The whole training step's peak with and without the best single-level checkpointing,
    beside the block stack's own ratio."""
    plain = depth[(depth["strategy"] == "none") & (depth["layers"] == layers)]["peak_bytes"]
    stack = groups["peak_bytes"].min() / plain.iloc[0]
    return [
        f"{layers}-layer {preset} training step: peak {plain_bytes / MiB:.1f} MiB plain, "
        f"{best_bytes / MiB:.1f} MiB with single-level checkpointing (g={best}): ratio "
        f"{best_bytes / plain_bytes:.2f}",
        f"the block stack alone: ratio {stack:.2f}",
    ]
