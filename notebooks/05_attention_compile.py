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
# The default CPU profile uses small sizes; `perflab run 05 -p profile full` runs the full
# grid (d in 16..128, sequence 256..16384) on a GPU, where the largest sizes run out of memory.

# %% tags=["parameters"]
profile = "cpu"     # "cpu": small grid for a CPU; "full": the full grid, for a GPU
device = "auto"     # "cuda" when present, else "cpu"
resume = True       # skip configurations already in this device's results file

# %%
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from perflab.bench.attention import measure_attention, naive_memory_bytes
from perflab.bench import Sweep
from perflab.bench.compiled import compile_vs_eager
from perflab.device import describe, resolve_device
from perflab.paths import display_path, results_dir
from perflab.profiles import ATTENTION, get_profile

MiB = 2**20
run = get_profile(ATTENTION, profile)
dev = resolve_device(device)
out = results_dir("05_attention_compile", dev)
print(f"profile {profile!r}: batch {run.batch}, d {run.head_dims}, sequence {run.seq_lens}, "
      f"{run.steps} timed calls after {run.warmup}, on {dev}")

# %% [markdown]
# ## 1. Naive and compiled attention over the grid
#
# `naive` materialises the (seq x seq) scores; `naive_compiled` is the same function through
# `torch.compile` (dynamic shapes, compiled once; its compile time falls in the warm-up calls).
# Every row lands in `attention.csv` as soon as it is measured.

# %%
configs = [
    {"implementation": impl, "batch": run.batch, "seq_len": n, "head_dim": d,
     "dtype": "float32", "causal": False, "device": str(dev), "warmup": run.warmup,
     "steps": run.steps}
    for impl in ("naive", "naive_compiled")
    for d in run.head_dims
    for n in run.seq_lens
]
sweep = Sweep(out / "attention.csv", key=list(configs[0]),
              metadata={"profile": run.as_dict(), "machine": describe(dev)})
results = sweep.run(configs, measure_attention, resume=resume)
table = results.assign(held_MiB=results["held_before_backward_bytes"] / MiB,
                       peak_MiB=results["peak_bytes"] / MiB)
table[["implementation", "head_dim", "seq_len", "status", "forward_s", "backward_s",
       "held_MiB", "peak_MiB"]]

# %%
ok = results[results["status"] == "ok"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for ax, column in zip(axes, ("forward_s", "backward_s")):
    sns.lineplot(data=ok, x="seq_len", y=column, hue="head_dim", style="implementation",
                 marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(column.removesuffix("_s") + " (s)")
fig.tight_layout()
fig.savefig(out / "attention_times.png", dpi=80)

# %% [markdown]
# ## 2. Memory: measured against the accounting
#
# Naive attention keeps the (batch x seq x seq) probabilities for the backward pass, so the
# memory held between forward and backward grows with the square of the sequence length,
# whatever d is: that is what runs out first.

# %%
failed = results[results["status"] == "oom"]
if len(failed):
    smallest = failed.sort_values(["seq_len", "head_dim"]).iloc[0]
    accounting = naive_memory_bytes(run.batch, int(smallest.seq_len), int(smallest.head_dim),
                                    torch.float32)
    total = torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda" else None
    print(f"smallest failing size: seq {smallest.seq_len}, d {smallest.head_dim} "
          f"({smallest.implementation}): forward peak by the formula "
          f"{accounting['forward_peak'] / 2**30:.1f} GiB, held for backward "
          f"{accounting['held_for_backward'] / 2**30:.1f} GiB"
          + (f", against {total / 2**30:.1f} GiB on the device" if total else ""))
else:
    print("no configuration ran out of memory on this device at these sizes "
          "(the full profile on a GPU reaches them)")

# %%
naive_rows = ok[ok["implementation"] == "naive"].copy()
formula = [naive_memory_bytes(run.batch, int(r.seq_len), int(r.head_dim), torch.float32)
           for r in naive_rows.itertuples()]
naive_rows["formula_held_MiB"] = [f["held_for_backward"] / MiB for f in formula]
naive_rows["measured_held_MiB"] = naive_rows["held_before_backward_bytes"] / MiB
naive_rows["measured_over_formula"] = naive_rows["measured_held_MiB"] / naive_rows["formula_held_MiB"]
naive_rows[["head_dim", "seq_len", "formula_held_MiB", "measured_held_MiB", "measured_over_formula"]]

# %% [markdown]
# The formula counts the probabilities and the output; the ratio shows how much the formula
# leaves out (small temporaries, allocator rounding) at each size.
#
# ## 3. Does compiling attention help?

# %%
pivot = ok.pivot_table(index=["head_dim", "seq_len"], columns="implementation",
                       values=["forward_s", "backward_s", "peak_bytes"])
speedup = pd.DataFrame({
    "forward_speedup": pivot["forward_s"]["naive"] / pivot["forward_s"]["naive_compiled"],
    "backward_speedup": pivot["backward_s"]["naive"] / pivot["backward_s"]["naive_compiled"],
    "peak_memory_ratio": pivot["peak_bytes"]["naive_compiled"] / pivot["peak_bytes"]["naive"],
})
speedup

# %%
print(f"compiled attention: forward {speedup['forward_speedup'].median():.2f}x, backward "
      f"{speedup['backward_speedup'].median():.2f}x (medians over the grid); peak memory "
      f"{speedup['peak_memory_ratio'].median():.2f}x of naive")

# %% [markdown]
# `torch.compile` fuses the scaling, masking and softmax into fewer kernels, so it saves memory
# traffic over the score matrix and often some of the memory, but it still materialises the
# scores: compiling does not change the quadratic memory. That takes a different algorithm
# (notebook 06).
#
# ## 4. The whole model, compiled against eager

# %%
model = compile_vs_eager(run.model_preset, run.model_context_length, run.model_batch_size,
                         dev, steps=run.steps)
model.to_csv(out / "model_compile.csv", index=False)
model

# %%
for row in model[model["compiled"]].itertuples():
    print(f"{row.mode}: compiled {row.speedup_vs_eager:.2f}x eager's speed, after "
          f"{row.compile_s:.1f} s of compilation on the first call")

# %% [markdown]
# Compilation is paid once per shape; the speedup is paid back after compile_s / (eager
# step - compiled step) steps. On a GPU the fused kernels save more launch overhead and memory
# traffic than on a CPU.
#
# ## Where the results are

# %%
for path in sorted(out.iterdir()):
    print(display_path(path))
