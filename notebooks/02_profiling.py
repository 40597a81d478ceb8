# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -papermill,-execution,-ExecuteTime
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -papermill,-widgets
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 Profiling: where does the time go, and what bounds it?
#
# A timer says *how long*; a profiler says *where*. You will annotate a training step with
# named ranges meant for both Nsight Systems and `torch.profiler`, summarise its kernels per
# range the way Nsight's `cuda_gpu_kern_sum` report does, answer four questions about the
# model from those tables, and then use the workbook's **hotspot analysis** on any trace: a
# real 2-GPU A100 training trace, and a pair of the workbook's own traces before and after an
# optimisation.
#
# On a GPU the tables list device kernels; on a CPU there are none, so they list PyTorch's CPU
# operators by self time instead, and every table says which. Nsight Systems (`nsys`) is used
# only where both CUDA and `nsys` exist (GPU-only), and that path has not yet been run: no
# result here comes from it.

# %% tags=["parameters"]
preset = "cpu-small"   # the model profiled, from perflab.implementations.model.PRESETS
context_length = 256   # tokens per sequence
batch_size = 4         # sequences per step
warmup = 2             # unprofiled steps before the profiled ones
steps = 2              # profiled steps per trace
timer_steps = 6        # timed steps of the forward pass that the profiler's view is held against
device = "auto"        # "cuda" when present, else "cpu"
top = 10               # rows shown in each table
ln_tokens = 2048       # section 7: LayerNorm's input, tokens
ln_width = 1024        # by width (float32)
ln_rounds = 6          # interleaved rounds of each LayerNorm comparison (6: the fewest for a 95% verdict)
ln_steps = 20          # timed calls of each statistic alone (x.mean takes a fraction of a millisecond)
copy_seq_len = 128     # section 8: tokens per sequence of the training step whose copies are found
copy_rounds = 6        # interleaved rounds of the step with the mask written in place against without
grid_presets = ["cpu-tiny", "cpu-small"]  # section 3's answers again for two model sizes (full: small, medium)
grid_seq_lens = [256, 512, 1024]          # by three contexts above 128, as the handout asks (full: the same)
grid_batch_size = 2                       # their sequences per step (full: 4, the handout's batch)

# %%
from dataclasses import replace

import pandas as pd
import torch

from perflab.lessons.nb02_profiling import (
    LAYER_NORMS,
    REPO_ROOT,
    BenchConfig,
    Finding,
    attention_time_vs_flops,
    busy_fraction,
    category_shares,
    check_layer_norms,
    compare_layer_norms,
    compare_mask_copy,
    compare_traces,
    conclude_all,
    display_path,
    get_preset,
    grid_answers,
    kernel_hotspots,
    kernel_summary,
    listing,
    load_trace,
    measure_copy_bandwidth,
    nsys_available,
    nsys_kernel_summary,
    open_notebook,
    plot_category_comparison,
    plot_hotspots,
    profile_grid,
    range_names,
    range_totals,
    record_step_trace,
    reduction_counts,
    run_benchmark,
    say,
    short_name,
    statistics_times,
    step_copy_sites,
)

pd.set_option("display.precision", 3)
pd.set_option("display.max_colwidth", 70)
nb = open_notebook("02_profiling", globals(), device=device)
dev, out = nb.device, nb.out
config = get_preset(preset)
print(f"{preset}, context {context_length}, batch {batch_size}, "
      f"{steps} profiled steps after {warmup} warm-up steps, on {dev}")

# %% [markdown]
# ## 1. Ranges for both profilers
#
# `perflab.measure.ranges.annotate(name)` opens an NVTX range (for Nsight, on CUDA; not yet run) and a
# `torch.profiler.record_function` range at once. Every step the workbook times is annotated
# with `step`, `forward`, `backward` and `optimizer`; the annotated attention adds
# `attention/scores`, `attention/softmax` and `attention/weighted_sum`. We record a trace of a
# training step with `torch.profiler` and list the ranges found in it.

# %%
step_config = BenchConfig(preset=preset, context_length=context_length,
                          mode="train-step", batch_size=batch_size, warmup=warmup,
                          steps=steps, device=str(dev))
trace_path = record_step_trace(out / "train_step_annotated.json.gz", step_config, "annotated")
trace = load_trace(trace_path)
print(display_path(trace_path))

# %%
# NBVAL_CHECK_OUTPUT
range_names(trace)

# %% [markdown]
# ## 2. The per-kernel summary, restricted by range
#
# The columns of Nsight's `cuda_gpu_kern_sum` (times in ns). For the forward pass alone:

# %%
forward = kernel_summary(trace, "forward")
step = kernel_summary(trace, "step")
print(forward.source)
forward.table.head(top)

# %% [markdown]
# and for the whole training step (forward, backward, optimizer):

# %%
step.table.head(top)

# %% [markdown]
# ## 3. Questions answered from the numbers
#
# **How long does the forward pass take, as the profiler sees it and as the timer does?** The
# profiler's `forward` ranges (their kernels' device time on a GPU, their span on a CPU) per
# step, against the workbook's timer on the forward mode of the same model (median of
# `timer_steps` steps with the median's interval, at the confidence level that many steps give:
# printed with it, 96.8% for 6 steps). The profiler records every operator, which can cost
# time of its own; one profiled figure cannot show how much.

# %%
timer_row, _ = run_benchmark(replace(step_config, mode="forward", steps=timer_steps))
print(say.timer_line(range_totals(trace, ["forward"]).iloc[0], timer_row))

# %% [markdown]
# **Which kernel dominates the forward pass, and how often does it run?**

# %%
print(say.dominant_line(forward, steps, config))

# %% [markdown]
# **What besides matrix multiplies takes time?** Everything that is not compute-bound, with at
# least 1% of the forward pass (the handout's question), and what the training step adds:

# %%
print(say.training_only_line(forward, step))
forward.not_matmul(at_least=1.0)[["Time (%)", "Instances", "Avg (ns)", "Name", "category"]]

# %% [markdown]
# **How does the matmul share change from inference to a training step?**

# %%
shares = say.category_frame(forward, step)
print(say.matmul_share_line(shares))
shares

# %% [markdown]
# The backward pass repeats every matmul twice (gradients with respect to inputs and weights),
# and adds the backward of every elementwise op, norm and softmax; AdamW adds pure memory-bound
# work over every parameter. Which of the two grows faster decides whether the matmul share
# rises or falls from inference to training on a given device.
#
# **Softmax against matmul inside attention, compared with their FLOPs.** Time of each range
# (on a GPU the device time of the kernels launched in it), FLOPs from the shapes:

# %%
attention = attention_time_vs_flops(trace, batch_size, config.num_heads, context_length,
                                    config.head_dim)
attention

# %%
# scores read + probabilities written per call, 4 bytes each (float32, the dtype of this step)
score_bytes = 2 * batch_size * config.num_heads * context_length**2 * 4
softmax_ratio, softmax_bandwidth = say.softmax_lines(attention, measure_copy_bandwidth(dev),
                                                    score_bytes)
print(softmax_ratio)

# %% [markdown]
# Softmax does about 5 FLOPs per score against the matmuls' 4·d, yet it reads and writes the
# whole score matrix. Is it then bound by memory traffic? Its bytes (the scores read, the
# probabilities written, float32) over its time, against the copy bandwidth measured on this
# device (the best of several large copies, `perflab.measure.peak`), answer that from the numbers:

# %%
print(softmax_bandwidth)

# %% [markdown]
# Whatever bounds it here (not measured: the line above gives its bytes per second only),
# softmax reads and writes the whole score matrix, and that traffic exists only because the
# scores are written out: fusing softmax into the matmuls so the scores never leave fast memory
# is what FlashAttention does (notebook 06).
#
# ### The same answers for two model sizes and three contexts
#
# The handout asks each question for two model sizes by three contexts.
# `perflab.lessons.nb02_profiling.grid.profile_grid` records one annotated trace per configuration
# (`grid_presets` x `grid_seq_lens`, batch `grid_batch_size`, the same warm-up and profiled steps)
# and reads the answers above from each, beside the timer's median of `timer_steps` forward
# passes. On a CPU the "kernels" are operators and their times spans; on a GPU (`--full`: small
# and medium at 256, 512 and 1024, batch 4) CUDA kernels and device time.

# %%
grid = profile_grid(grid_presets, grid_seq_lens, batch_size=grid_batch_size, warmup=warmup,
                    steps=steps, timer_steps=timer_steps, device=str(dev))
nb.save(grid, "profile_grid.csv")
grid.drop(columns=["source", "batch_size", "forward_timer_ci_level"]).set_index(
    ["preset", "seq_len"]).T

# %%
# NBVAL_CHECK_OUTPUT
print(f"{len(grid)} configurations profiled: {len(grid_presets)} presets x "
      f"{len(grid_seq_lens)} contexts")

# %%
nb.say(grid_answers(grid))

# %% [markdown]
# These are few steps each, on a shared machine. A profiled forward outside the timer's
# interval has two candidate causes this section does not separate: the profiler's own cost
# (it records every operator) and the machine's noise between the two measurements; telling
# them apart needs the two timed in turns (`perflab.bench.compare`). A timing flagged
# unstable says little either way. The answers that hold in every configuration are the ones
# to trust.
#
# ## 4. The same table from Nsight Systems (GPU-only, not yet run)
#
# Written for a GPU and **not yet run**: no machine with both CUDA and `nsys` has executed this
# cell, so nothing here shows that it works. With both present, `nsys profile` is meant to run
# `perflab bench` with the NVTX capture range `timed` (so warm-up is not captured) and
# `nsys stats --report cuda_gpu_kern_sum` to read it back into the same columns.

# %%
if nsys_available():
    from_nsys = nsys_kernel_summary(step_config.command_line(), out / "nsys")
    display(from_nsys.table.head(top))
else:
    print("GPU-only and not yet run: CUDA and nsys are not both present here, so the nsys "
          "summary is skipped.")

# %% [markdown]
# ## 5. Hotspots of a real multi-GPU trace
#
# `kernel_hotspots` works on any Chrome/Kineto trace. Here: rank 0 of a 2-GPU data-parallel
# training run on an A100 (from HolisticTraceAnalysis' test data, MIT licence, in
# `data/traces/`). Every kernel gets a category by rules stated in
# `perflab.measure.hotspots`: communication, compute-bound, memory-bound or other.

# %%
real_path = REPO_ROOT / "data" / "traces" / "a100_ddp_rank0.pt.trace.json.gz"
real = kernel_hotspots(real_path)
fig = plot_hotspots(real, top, title="A100 DDP rank 0: top kernels")
nb.figure(fig, "a100_hotspots.png")
real.head(top).assign(name=real["name"].map(short_name)).drop(columns="source")

# %%
# NBVAL_CHECK_OUTPUT
print("\n".join(say.real_trace_lines(real, category_shares(real), busy_fraction(load_trace(real_path)))))

# %% [markdown]
# The all-reduce of gradients (NCCL) is the single largest kernel: data-parallel training pays
# for communication inside the step. Most of the rest is memory-bound (layout changes for cuDNN,
# batch norm, elementwise ops) rather than matmuls, and the GPU sits idle for much of the
# traced span: this run is far from compute-bound.
#
# ## 6. Before and after an optimisation
#
# The workbook's own pair: a training step with naive attention (three separate operations that
# write the full score matrix) and the same step with PyTorch's fused
# `scaled_dot_product_attention`. `compare_traces` lines up every kernel and the categories
# before and after. It is one trace of each, recorded one after the other, not interleaved
# rounds: there is no interval, so no change in the total is claimed from it; the shares and
# each kernel's delta describe the two traces (whether the step got faster is what an
# interleaved comparison, such as section 8's, would say).

# %%
pair = {
    name: record_step_trace(out / f"train_step_{name}.json.gz", step_config, attention=name)
    for name in ("naive", "sdpa")
}
comparison = compare_traces(pair["naive"], pair["sdpa"])
print(comparison.source)
comparison.kernels.head(top).assign(name=comparison.kernels["name"].map(short_name))

# %%
fig = plot_category_comparison(comparison.categories, title="naive attention -> fused SDPA")
nb.figure(fig, "naive_vs_sdpa.png")
comparison.categories

# %%
print("\n".join(say.trace_change_lines(comparison)))

# %% [markdown]
# The same analysis runs from the shell on any pair of traces:
# `perflab hotspots BASELINE --compare OPTIMIZED --top 10`.
#
# ## 7. A hotspot by hand: LayerNorm's statistics in one pass
#
# One of the workbook's sources (a note on FSDP hotspots) names LayerNorm written out in PyTorch
# operations among the hotspots (the A100 trace of section 5 is of a network with cuDNN's batch
# norm, not LayerNorm, so here it is measured on its own): its mean and variance are reductions,
# each a pass over the activations, and autograd differentiates through every operation. Two
# remedies, and PyTorch's own kernel as the yardstick (`perflab.implementations.layer_norm`; checked, profiled
# and timed by `perflab.lessons.nb02_profiling.layer_norm_study`): the statistics
# from **one** reduction (`torch.var_mean`, Welford's update) instead of `x.mean` then `x.var`;
# and a **hand-written backward** that reuses the normalised input x̂ and 1/σ saved by the
# forward,
# dx = (g·w - mean(g·w) - x̂ · mean(g·w·x̂)) / σ. Correctness first: every way against
# `F.layer_norm` in float64 on fresh random inputs of odd sizes (the tests add `gradcheck` of
# the backward), and each way in float32 at mean 1000 against float64, where the textbook one
# pass, E[x²] - mean², cancels:

# %%
# NBVAL_CHECK_OUTPUT
exact = check_layer_norms(37, 129, mean=3.0)
print(say.layer_norm_exact_line(exact, LAYER_NORMS))

# %%
cancelling = check_layer_norms(37, 129, dtype=torch.float32, mean=1000.0)
cancelling[["way", "output_error", "grad_x_error"]]

# %% [markdown]
# **What the profile counts.** One forward and backward of each way: its calls of reductions
# (the row statistics and the weight and bias gradients' sums over rows alike; a fused kernel's
# happen inside its own two calls) and all its operator calls:

# %%
# NBVAL_CHECK_OUTPUT
counts = reduction_counts()
counts

# %%
# NBVAL_CHECK_OUTPUT
print(say.reduction_line(counts))

# %% [markdown]
# **What it costs.** The statistics alone, each timed on its own, then forward + backward of
# each way against the one before it, taking turns:

# %%
stats = statistics_times(ln_tokens, ln_width, steps=ln_steps, device=dev)
nb.save(stats, "layer_norm_statistics.csv")
steps_ln = compare_layer_norms(ln_tokens, ln_width, rounds=ln_rounds, device=dev)
print("\n".join(conclude_all(out, [Finding(f"layer norm: {r.name_b} vs {r.name_a}", r.sentence(), r)
                                   for r in steps_ln])))
stats[["statistic", "median_s", "median_ci_low_s", "median_ci_high_s", "unstable"]]

# %%
print(say.statistics_line(stats, ln_tokens, ln_width, dev.type))

# %% [markdown]
# Reading the numbers: the profile counts what each remedy removes, the comparisons say whether
# that pays on this device. On a GPU each reduction is
# a memory-bound pass over x, so removing one saves about its share of the bytes read; that
# path (`perflab run 02 --full`) has not been run here.
#
# ## 8. Where the training step copies memory
#
# A copy rarely has its own line in the code: `.to()`, `.contiguous()`, `.reshape()` of a
# non-contiguous tensor and out-of-place ops such as `masked_fill` all end in `aten::copy_`.
# One profiled training step of the baseline (naive attention, eager, for-loop AdamW), each
# copy attributed to the operator that asked for it and to the phase of the step it ran in
# (`perflab.profiling.copies.copy_sites`), with its share of the step's operator time:

# %%
copies = step_copy_sites(config, batch_size, copy_seq_len, dev)
nb.save(copies, "copy_sites.csv")
copies.head(top)

# %% [markdown]
# The one copy whose removal the code controls directly: `attention_scores` masks with
# `masked_fill`, which writes the masked scores into a new (n x n) tensor per head. Writing
# them into the fresh scores instead (`masked_fill_`) computes the same numbers (checked bit
# for bit: the loss and every gradient) without that copy. The two steps, taking turns:

# %%
mask = compare_mask_copy(config, batch_size, copy_seq_len, dev, rounds=copy_rounds)
nb.save(mask, "mask_copy.csv")
print(say.mask_copy_sentence(copies, mask.details, mask.sentence()))

# %% [markdown]
# A saving below the noise band cannot be shown by timing the step, however many rounds run;
# the profile's share (one profiled step, no interval) is then the only figure of what a copy
# costs, an estimate rather than a verdict. On a GPU the (n x n) copy
# is a full pass over the scores in memory, a larger share of a memory-bound attention; that
# path (`perflab run 02 --full`) has not been run here.
#
# ## Where the results are

# %%
print(listing(out))

# %% [markdown]
# **Do these results contradict themselves?** `perflab check-results` (notebook 01 lists its
# rules; CI runs it over `data/results`):

# %%
nb.check()
