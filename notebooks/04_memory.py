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
# # 04 Memory: what a training step keeps, and how to keep less
#
# You will record memory over time for a forward pass and a training step, measure peak memory
# against context length and precision, derive the size of the residual stream, count exactly
# what autograd saves for the backward pass, and trade recomputation for memory with
# activation checkpointing: single-level with every group size, and nested, whose peak is
# fitted against the logarithm of the depth.
#
# Every number is measured on this device. On CUDA the timelines come from a CUDA memory
# snapshot (saved as a pickle for https://pytorch.org/memory_viz); on CPU, which keeps no such
# record, from the CPU allocator events of `torch.profiler`. Both count only what is allocated
# while recording, on top of what already existed (the model's weights).

# %% tags=["parameters"]
preset = "cpu-tiny"                # model of the timelines and the peak-memory table
context_lengths = [64, 256]        # tokens, of the peak-memory table (timelines at the last)
batch_size = 4                     # sequences per step
checkpoint_preset = "cpu-tiny"     # block shape of the checkpointing study
checkpoint_seq_len = 128           # tokens per sequence in the checkpointing study
group_sweep_layers = 8             # depth of the single-level group-size sweep
checkpoint_layers = [4, 8, 16]     # depths of the nested-checkpointing fit
cost_rounds = 6                    # rounds of each recomputation-cost comparison (6: the fewest for a 95% verdict)
gpu_memory_gib = "auto"              # the GPU the handout's xl step is held against: "auto" is this GPU's memory, or on a CPU an H100 80GB's 79.2 GiB
device = "auto"                    # "cuda" when present, else "cpu"
resume = True                      # skip peak-memory configurations already in the results file

# %%
import inspect
from dataclasses import replace

from perflab.lessons.nb04_memory import (
    BenchConfig,
    best_group_size,
    block_saved_tensors,
    checkpointing_costs,
    compile_backend,
    conclude,
    depth_sweep,
    full_step_peak,
    get_preset,
    gpu_memory_gib_of,
    gradient_memory,
    group_size_sweep,
    handout_example,
    handout_sizes,
    listing,
    measured_residual_bytes,
    model_saved_tensors,
    modelled_step_peaks,
    open_notebook,
    peak_configs,
    plot_depth,
    plot_group_sweep,
    plot_timelines,
    residual_stream_bytes,
    rmsnorm_saved_tensors,
    run_nested,
    saved_by_module,
    saved_by_producer,
    saved_bytes,
    say,
    step_peak_memory,
    step_timelines,
    whole_step_table,
)

MiB = 2**20
nb = open_notebook("04_memory", globals(), device=device)
dev, out, provenance = nb.device, nb.out, nb.provenance
memory_gib = gpu_memory_gib_of(gpu_memory_gib, dev)
config = get_preset(preset)
context = context_lengths[-1]
print(f"{preset}, batch {batch_size}, on {dev}")

# %% [markdown]
# ## 1. Memory over time
#
# One forward pass, and one full training step (forward, backward, AdamW; after a warm-up step,
# so gradients and optimizer state already exist), at context length `context`.

# %%
timelines = step_timelines(preset, context, batch_size, dev, out)
fig = plot_timelines(timelines)
nb.figure(fig, "timelines.png")
print(timelines["forward"].source)

# %% [markdown]
# What one would expect: the forward pass climbs as each layer's activations are kept for
# backward, peaks near the logits and the loss (the largest tensors of a small model with a
# 10,000-word vocabulary), and falls back at the end, when nothing holds on to them without a
# backward. The training step climbs the same way, then backward frees each layer's
# activations as it consumes them. Where each one actually peaks, read from the record (the
# operator, and the innermost Python frames that ran it, from the profiler's `with_stack`):

# %%
print("\n".join(say.peak_lines(timelines)))

# %% [markdown]
# **The largest allocations of the training step**, the operator that made each and the
# Python code that ran it (innermost frame first; backward's come from autograd's engine, so
# their Python stack ends where `backward()` was called):

# %%
largest = timelines["train-step"].largest_allocations(top=8)
largest.assign(MiB=largest["delta_bytes"] / MiB)

# %%
print(say.logits_line(config, batch_size, context, largest))

# %% [markdown]
# With a 10,000-word vocabulary and a small model, the logits and their gradient (and their
# float32 log-softmax) are the candidates for the largest tensors: compare the largest
# allocation above with the logits' size.
#
# ## 2. Peak memory against context length and precision

# %%
sweep = BenchConfig.sweep(out / "peak_memory.csv", metadata=provenance)
peaks = sweep.run(peak_configs(preset, context_lengths, batch_size, dev), step_peak_memory,
                  resume=resume)
table = say.peak_table(peaks)
table.round(2)

# %%
print("\n".join(say.growth_lines(table)))

# %% [markdown]
# Activations grow linearly with the context length, the attention scores
# (batch x heads x context^2) quadratically, and fixed costs (under bfloat16 autocast, the
# bfloat16 copies of the weights made for the step) not at all; the ratios above show which
# dominates at these sizes. Under bfloat16 the matmul outputs are half the size, but the
# float32 work (norms, the loss and its log-softmax over the vocabulary) stays float32, and
# the weight copies are added: at these small sizes the change can go either way, as the last
# line shows. Which of these sets the measured change is not told apart here (the weight
# copies are not measured on their own).
#
# ## 3. The residual stream, derived and measured
#
# Between two blocks the model carries one tensor of batch x context x d_model elements.

# %%
# NBVAL_CHECK_OUTPUT
derived = residual_stream_bytes(config, batch_size, context)
measured = measured_residual_bytes(config, batch_size, context, dev)
print(f"derived: {batch_size} x {context} x {config.d_model} x 4 bytes = {derived} bytes; "
      f"measured input of block 2: {measured} bytes; equal: {derived == measured}")

# %% [markdown]
# ## 4. What autograd saves for backward
#
# `saved_tensors_hooks` see every tensor an operation keeps for the backward pass. First
# RMSNorm, eager against compiled: the eager version keeps its input, the reciprocal RMS and
# the normalised output; the compiled one (AOTAutograd's min-cut partitioner) keeps only what
# is cheapest to store and recomputes the rest in the backward pass. On CPU the compiled
# version uses the backend `aot_eager_decomp_partition` (same decompositions and partitioner
# as inductor, without generating C++), on CUDA `inductor` itself.

# %%
print(f"compile backend here: {compile_backend(dev)}")

# %%
# NBVAL_CHECK_OUTPUT
rms = {name: rmsnorm_saved_tensors(config.d_model, batch_size, context, compiled, dev)
       for name, compiled in (("eager", False), ("compiled", True))}
print("\n".join(say.rmsnorm_lines(rms)))

# %% [markdown]
# One TransformerBlock of `checkpoint_preset`'s shape: which operations produce what it keeps.

# %%
block = block_saved_tensors(checkpoint_preset, batch_size, checkpoint_seq_len, dev)
block_bytes = saved_bytes(block)
residual = residual_stream_bytes(get_preset(checkpoint_preset), batch_size,
                                 checkpoint_seq_len)
print(f"one block keeps {block_bytes / MiB:.2f} MiB = {block_bytes / residual:.1f}x its "
      "input (the residual stream)")
saved_by_producer(block, top=5)

# %% [markdown]
# The operation that made a tensor says little about where in the model it was saved. A
# `torch.utils.module_tracker.ModuleTracker` around the same hooks names the innermost module
# running at each save: here for the whole `preset` model and its loss at context `context`,
# summed over blocks (`blocks.*.attn` is what every attention saves outside its projections:
# the scores, the softmax's output, the rotated queries and keys).

# %%
# NBVAL_CHECK_OUTPUT
whole = model_saved_tensors(config, batch_size, context, dev)
by_module = saved_by_module(whole)
print(say.module_line(whole, by_module, preset, context))
by_module[["module", "tensors", "bytes", "share", "producers"]].round(3)

# %% [markdown]
# The gradients, read from the allocator in the same way (`gradient_memory`): one forward and
# backward of the `preset` model recorded, each parameter's `.grad` found among the allocations
# by its storage's address. Autograd allocates a block's gradients while backward passes
# through it, so they appear block by block from the last; each block's are held against the
# formula, 4 bytes (float32's element size) x its parameters.

# %%
gradients, backward_ms = gradient_memory(preset, batch_size, context, dev)
nb.save(gradients, "gradient_memory.csv")
gradients.round(2)

# %%
# NBVAL_CHECK_OUTPUT
print(say.gradient_line(gradients, backward_ms))

# %% [markdown]
# ### At the handout's sizes, counted without memory
#
# The sizes the handout asks about do not fit this machine, but what they save can still be
# counted exactly: on PyTorch's `meta` device a tensor has a shape and no storage, so a forward
# pass runs every operation's shape logic and autograd records what it saves, while nothing is
# computed (`perflab.lessons.nb04_memory.at_scale`). Per preset (2026's xl, which is 2025's 2.7B, and 2025's
# xl) and context, batch 4, float32: the residual stream between two blocks, what one block
# saves for backward (eager) and one block's gradients.

# %%
# NBVAL_CHECK_OUTPUT
sizes = handout_sizes(["xl", "xl-2025"], [128, 512, 2048], batch_size=4)
sizes.round(2)

# %%
xl_config = get_preset("xl")
print(say.xl_sizes_sentence(sizes, xl_config))

# %% [markdown]
# The handout's own worked figures (2026, section 3: xl blocks with 16 heads, batch 4, context
# 2048, compiled whole; the checkpointed pairs eager), counted the same way on this workbook's
# model:

# %%
# NBVAL_CHECK_OUTPUT
example = handout_example()
example.round(2)

# %%
print(say.handout_example_sentence(example, sizes))

# %% [markdown]
# ### The whole step's peak, counted on meta and held against the measured one
#
# What a training step holds at its peak follows from sizes alone
# (`perflab.lessons.nb04_memory.at_scale.whole_step_memory`, a model): parameters and AdamW's two moments
# (12 bytes per parameter) are held throughout; the step frees the gradients
# (`zero_grad(set_to_none=True)`), saves activations in the forward, adds two logits-sized
# tensors as the loss's backward starts (the gradients of the log-probabilities and of the
# logits), and by the optimizer step holds every gradient and AdamW's temporaries (sqrt of the
# second moment and its quotient: two of the largest parameter's size where AdamW loops over
# the tensors, as the step measured here does on any device; one of every parameter's with
# foreach, CUDA's default). First the
# model against the peaks measured in section 2 (float32). Those are the rise above what the
# step starts with (the parameters and optimizer state made by a warm-up step), so the model's
# figure held against them is its rise too: the activation peak.

# %%
held = say.model_against_measured(peaks, modelled_step_peaks(config, batch_size, context_lengths,
                                                             dev))
print(say.model_line(held))
held.assign(measured_MiB=held["peak_bytes"] / MiB, model_MiB=held["model_bytes"] / MiB)[
    ["context_length", "mode", "measured_MiB", "model_MiB", "model_over_measured"]].round(3)

# %% [markdown]
# Then the handout's model, xl with batch 4 (2026: contexts 128 and 2048; 2025's 2.7B is the
# same shape: 128, 256 and 512), with PyTorch's default AdamW on CUDA (foreach), counted on meta. A
# model of a step nobody ran here: it leaves out other temporaries and the allocator's
# rounding, which at the small sizes above came to the difference shown.

# %%
# NBVAL_CHECK_OUTPUT
xl_steps = whole_step_table(["xl"], [128, 256, 512, 2048], batch_size=4, foreach=True)
xl_steps.set_index("seq_len").drop(columns=["preset", "batch_size"]).T.round(2)

# %%
print(say.xl_step_sentence(xl_steps, memory_gib))

# %% [markdown]
# ## 5. Activation checkpointing
#
# Forward and backward through a stack of L blocks, keeping only each group's input and
# recomputing the group during backward (`torch.utils.checkpoint`, non-reentrant). Gradients
# exist before the measurement, so the peak counts activations and temporaries only.
#
# **Single level, every group size that divides L.** A simple cost model: the peak holds L/g
# group inputs of size b (the residual stream) plus one group's activations, g blocks of A
# each, so peak(g) ~ (L/g)·b + g·A, smallest at g* = sqrt(L·b/A). The textbook sqrt(L) (Chen et
# al. 2016) is the case A = b, where each layer keeps only its output.

# %%
layers = group_sweep_layers
groups = group_size_sweep(checkpoint_preset, layers, batch_size, checkpoint_seq_len, dev)
nb.save(groups, "group_sweep.csv")
optimum = best_group_size(groups, residual, block_bytes)
fig = plot_group_sweep(groups, optimum["sqrt_layers"], optimum["model_optimum"])
nb.figure(fig, "group_sweep.png")
groups.assign(peak_MiB=groups["peak_bytes"] / MiB)

# %%
best = optimum["best"]
print(say.group_line(optimum, layers))

# %% [markdown]
# A Transformer block keeps many times its input (the table in section 4: attention scores,
# SwiGLU intermediates), so A >> b and the cost model puts the optimum group below sqrt(L);
# the line above says which of the two the measured best is nearer. The rule of thumb holds
# only where a layer keeps about as much as it passes on.
#
# **At the handout's size** (xl, 32 layers, batch 4, context 2048: too large to measure here),
# the same cost model with b and A counted on the meta device in section 4 (A: one block's
# eager saved tensors), for every group size:

# %%
print(say.xl_group_line(sizes, xl_config))

# %% [markdown]
# Measuring those peaks needs a GPU with room for xl (`perflab run 04 --full -p
# checkpoint_preset xl -p checkpoint_seq_len 2048 -p group_sweep_layers 32`, not run here).
#
# **Which arrangement keeps the least in memory? (gradient_checkpointing (a))** Ignoring
# compute, nest the checkpoints: split the stack into halves, checkpoint each, and do the same
# inside each half down to single blocks (`perflab.implementations.checkpointing.run_nested`, below). A
# checkpointed segment keeps only its input until backward reaches it; recomputing it keeps
# the inputs of its own two halves, and so on, so while backward runs through any block the
# memory holds the segment inputs along one path of the recursion (one or two per level: the
# second half's input is freed once its backward is done, log2 L levels) plus that one block's
# activations: peak ~ c + k·b·log2(L) with 1 <= k <= 2, O(log L), where b is the residual
# stream. Each level of nesting runs every block's forward once more: 1 + log2 L
# forwards per block, O(L log L) compute (counted below). Splitting into k parts instead of 2
# keeps k inputs per level over log_k L levels, k/ln k · ln L in all: still O(log L), the
# constant nearly the same for k = 2, 3 or 4 (printed below); a flat single level
# (k = L) is O(L).

# %%
# NBVAL_CHECK_OUTPUT
print(inspect.getsource(run_nested))
print(say.k_way_line())

# %% [markdown]
# **Nested checkpointing against depth**, measured: peak against log2(L).

# %%
depth = depth_sweep(checkpoint_preset, checkpoint_layers, batch_size, checkpoint_seq_len, dev)
nb.save(depth, "depth_sweep.csv")
fig = plot_depth(depth)
nb.figure(fig, "depth.png")
depth.assign(peak_MiB=depth["peak_bytes"] / MiB)

# %%
print("\n".join(say.depth_lines(depth, residual)))

# %% [markdown]
# And what nesting costs in compute: how many times each block's forward runs in one forward +
# backward pass (`forward_counts`, counted on stand-in blocks, since the count depends only on
# the arrangement; PyTorch's early stop, which can skip the tail of a recomputation, is off):

# %%
# NBVAL_CHECK_OUTPUT
print(say.recompute_table(checkpoint_layers))
print(say.nested_forwards_line(checkpoint_layers))

# %% [markdown]
# **What recomputation costs**: forward + backward through the same blocks with and without
# checkpointing, taking turns (`perflab.bench.compare`, `cost_rounds` rounds): single level with
# the best group size at L = `group_sweep_layers`, and nested at the deepest stack. Single-level
# checkpointing runs each group's forward once more; nested recomputes about log2(L) times.

# %%
costs = checkpointing_costs(checkpoint_preset, layers, best, max(checkpoint_layers), batch_size,
                            checkpoint_seq_len, dev, rounds=cost_rounds)
nb.save(costs, "checkpointing_cost.csv")
nb.say(conclude(out, f"checkpointing cost {cost.labels['case']}", cost) for cost in costs)
print(say.nested_keep_line(depth))

# %% [markdown]
# ## 6. A whole training step with and without the best checkpointing

# %%
deep = replace(get_preset(checkpoint_preset), num_layers=layers)
step_plain = full_step_peak(deep, batch_size, checkpoint_seq_len, "none", device=dev)
step_best = full_step_peak(deep, batch_size, checkpoint_seq_len, "single", best, dev)
print("\n".join(say.full_step_lines(step_plain, step_best, groups, depth, layers,
                                    checkpoint_preset, best)))

# %% [markdown]
# Where the whole step's ratio is nearer 1 than the stack's, what checkpointing leaves alone (the
# logits, their gradient, the optimizer's temporaries) is a likely part of the rest of the
# step's peak, not measured here on its own (the two ratios are of different totals, so their
# gap is not a size in bytes).
#
# ## Where the results are

# %%
print(listing(out))

# %% [markdown]
# **Do these results contradict themselves?** `perflab check-results` (notebook 01 lists its
# rules; CI runs it over `data/results`):

# %%
nb.check()
