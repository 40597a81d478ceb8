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
# # 05 Attention and torch.compile: where naive attention runs out, and what compiling buys
#
# You will time naive attention (batch 8, no heads) over head dimensions and sequence lengths,
# forward and backward, record the memory it holds between the two, see where it runs out of
# memory (each out-of-memory is a row of the results and the sweep goes on), account for that
# memory with a formula, and then compare `torch.compile`d attention, and the whole model
# compiled against eager, with the compile time reported apart.
#
# The committed settings are small sizes for a CPU; `perflab run 05 --full` runs the full
# grid (d in 16..128, sequence 256..16384) on a GPU. Section 2 computes whether the largest of
# them fits a `gpu_memory_gib` GPU. A larger CPU grid, every head dimension of the handout's
# to n = 4096 (the scores of batch 8 then take 512 MiB, and attention does 64 times its work
# at the default's largest n, 512), stays out of the default run; to keep its results apart
# from the committed ones:
#
# ```
# PERFLAB_DATA_DIR=/tmp/larger perflab run 05 -p head_dims '[16, 32, 64, 128]' \
#     -p seq_lens '[256, 1024, 4096]'
# ```
#
# **Your own FlashAttention:** `perflab run 05 -p adapters my-repo/tests/adapters.py` (the
# course's adapters file, or a dotted module) checks it against float64 first, then times it
# over the same grid as `yours_pytorch` (and `yours_triton` on a GPU) and against naive and
# compiled attention at the largest size; those results land in a folder of their own
# (`data/results/05_attention_compile/yours-.../`).

# %% tags=["parameters"]
batch = 8                        # sequences per call (no heads)
head_dims = [16, 64]             # d of q, k, v
seq_lens = [128, 256, 512]       # sequence lengths
warmup = 1                       # untimed calls
steps = 6                        # timed calls (and rounds of each comparison: 6 is the fewest for a 95% verdict)
gpu_memory_gib = "auto"            # the GPU whose memory section 2 accounts for: "auto" is this GPU's, or on a CPU an H100 80GB's 79.2 GiB
model_preset = "cpu-tiny"        # the model compiled whole
model_context_length = 128       # tokens per sequence, whole-model comparison
model_batch_size = 4             # sequences per step, whole-model comparison
compile_modes = ["default", "max-autotune-no-cudagraphs"]  # torch.compile modes of the train step (the forward: default)
device = "auto"                  # "cuda" when present, else "cpu"
resume = True                    # skip configurations already in this device's results file
adapters = None                  # your course tests/adapters.py (or a module): checked and timed beside naive

# %%
import torch

from perflab.lessons.nb05_attention_compile import (
    Sweep,
    attention_configs,
    attention_of_yours,
    comparison_frame,
    compile_findings,
    compile_vs_eager,
    conclude_all,
    gpu_memory_gib_of,
    listing,
    measure_attention,
    naive_memory_check,
    open_notebook,
    plot_attention_sweep,
    plot_comparisons,
    say,
)

MiB = 2**20
nb = open_notebook("05_attention_compile", globals(), device=device, yours=adapters)
dev, out, provenance = nb.device, nb.out, nb.provenance
memory_gib = gpu_memory_gib_of(gpu_memory_gib, dev)
print(f"batch {batch}, d {head_dims}, sequence {seq_lens}, "
      f"{steps} timed calls after {warmup}, on {dev}")

# %% [markdown]
# **Yours** (with `-p adapters PATH`): `perflab check --adapters`'s attention checks (output,
# saved log-sum-exp and gradients against float64 on odd shapes, causal and not). Only what
# passes is timed below; a Triton one runs in the interpreter on a CPU, which measures nothing
# about speed, so it is timed on a GPU only.

# %%
yours, yours_lines = attention_of_yours(adapters, out, provenance, dev)  # name -> your Function
print("\n".join(yours_lines))

# %% [markdown]
# ## 1. Naive and compiled attention over the grid
#
# `naive` materialises the (seq x seq) scores; `naive_compiled` is the same function through
# `torch.compile` (dynamic shapes, compiled once; its compile time falls in the warm-up calls).
# Every row lands in `attention.csv` as soon as it is measured.

# %%
configs = attention_configs(implementations=["naive", "naive_compiled", *yours], batch=batch,
                            head_dims=head_dims, seq_lens=seq_lens, dtypes=["float32"],
                            warmup=warmup, steps=steps, device=dev)
sweep = Sweep(out / "attention.csv", key=list(configs[0]),
              metadata=provenance)
results = sweep.run(configs, measure_attention, resume=resume and not adapters)  # yours: always anew
table = results.assign(held_MiB=results["held_before_backward_bytes"] / MiB,
                       peak_MiB=results["peak_bytes"] / MiB)
table[["implementation", "head_dim", "seq_len", "status", "forward_s", "backward_s",
       "end_to_end_unstable", "held_MiB", "peak_MiB"]]

# %% [markdown]
# The backward time is measured inside each forward + backward call (the device synchronised
# between the two), so it is never the difference of two noisy timings.

# %%
fig = plot_attention_sweep(results, {"forward_s": "forward (s)", "backward_s": "backward (s)"},
                           hue="head_dim", style="implementation")
nb.figure(fig, "attention_times.png");

# %% [markdown]
# ## 2. Memory: measured against the accounting
#
# Naive attention keeps the (batch x seq x seq) probabilities for the backward pass, so the
# memory held between forward and backward grows with the square of the sequence length,
# whatever d is: that is what would run out first (the formula below says where).

# %%
device_memory = torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda" else None
print("\n".join(say.oom_lines(results, batch, memory_gib, device_memory)))

# %%
naive_memory_check(results)

# %% [markdown]
# The formula counts the probabilities and the output; the ratio shows how much the formula
# leaves out (small temporaries, allocator rounding) at each size.
#
# ## 3. Does compiling attention help?
#
# At every point of the grid the naive and the compiled forward + backward take turns
# (`perflab.bench.compare`, `steps` rounds), and the verdict comes from the interval of their
# time ratio (its confidence in `confidence`: 96.8% from 6 rounds); "inconclusive" when the
# interval neither leaves nor fits inside the ±3% noise band. The peak memory ratio comes from
# the sweep above.

# %%
grid_comparisons = say.compiled_against_naive(batch, head_dims, seq_lens, dev, rounds=steps,
                                              warmup=warmup)
grid = say.compiled_grid(grid_comparisons, results)
nb.save(grid, "compiled_vs_naive.csv")
fig = plot_comparisons(grid.assign(point=grid["head_dim"].astype(str) + "/" +
                                   grid["seq_len"].astype(str)),
                       x="point", title="compiled / naive attention, forward + backward (d/n)")
nb.figure(fig, "compiled_vs_naive.png")
grid[["head_dim", "seq_len", "ratio_b_over_a", "ci_low", "ci_high", "confidence", "verdict",
      "peak_memory_ratio"]]

# %%
tally, at_largest = say.grid_findings(grid, grid_comparisons)
print(tally)
print(conclude_all(out, [at_largest])[0])

# %%
# Yours (with -p adapters PATH), against naive and compiled attention at the largest size
largest = grid.iloc[-1]
nb.say(conclude_all(out, say.yours_against_naive(
        yours, int(largest.head_dim), int(largest.seq_len), batch, dev, rounds=steps,
        warmup=warmup)))

# %% [markdown]
# `torch.compile` is meant to fuse the scaling, masking and softmax into fewer kernels (the
# kernels are not counted here), which should read
# and write the score matrix fewer times (the memory traffic is not measured here: a GPU
# profile's bytes per kernel would show it) and may save some of the memory
# (`peak_memory_ratio` above, measured), but it still materialises the scores: compiling does
# not change the quadratic memory. That takes a different algorithm (notebook 06).
#
# ## 4. The whole model, compiled against eager
#
# The model's forward and its training step, each compiled by `torch.compile` (default mode)
# against the same step run eagerly, taking turns (`compile_vs_eager`); the first call of a
# compiled step holds its compilation, reported apart (`compile_s`).
# The train step is also compiled with each other mode of `compile_modes`:
# `max-autotune-no-cudagraphs` times the candidate kernels of every matmul (C++ templates
# against the library's on a CPU, Triton templates on a GPU) and keeps the fastest, without
# CUDA graphs. Each model compiles from cold (no on-disk caches, its kernels in a fresh
# directory), so the compile times are of like work; each is one compilation, timed once.

# %%
model_comparisons = (
    compile_vs_eager(model_preset, model_context_length, model_batch_size, dev,
                     modes=("forward",), steps=steps)
    + compile_vs_eager(model_preset, model_context_length, model_batch_size, dev,
                       modes=("train-step",), steps=steps, compile_modes=compile_modes)
)
model = comparison_frame(model_comparisons)
nb.save(model, "model_compile.csv")
print(say.matmul_shapes_line(model))
model.drop(columns=["sentence"])

# %%
nb.say(conclude_all(out, compile_findings(model_comparisons)))

# %% [markdown]
# Compilation is paid once per shape; a faster compiled step pays it back after
# compile_s / (eager step - compiled step) steps. Only this device was measured here;
# `perflab run 05 --full` measures a GPU.
#
# ## Where the results are

# %%
print(listing(out))

# %% [markdown]
# **Do these results contradict themselves?** `perflab check-results` (notebook 01 lists its
# rules; CI runs it over `data/results`):

# %%
nb.check()
