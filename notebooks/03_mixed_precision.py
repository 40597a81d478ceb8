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
# # 03 Mixed precision: what low precision costs, and what it buys
#
# You will see rounding error accumulate, watch autocast choose a dtype for every tensor of a
# training step, measure how LayerNorm breaks in low precision, and time float32 against
# bfloat16 autocast for each model size. Everything is measured on the device this notebook
# runs on; what would differ on the other device is said, and labelled where it is GPU-only.

# %% tags=["parameters"]
profile = "cpu"     # "cpu": small presets for a CPU; "full": full sizes, for a GPU
device = "auto"     # "cuda" when present, else "cpu"
resume = True       # skip benchmark configurations already in this device's results file

# %%
import matplotlib.pyplot as plt
import pandas as pd
import torch

from perflab.bench import BenchConfig
from perflab.bench.steps import benchmark_sweep
from perflab.bench.tables import dtype_speedup
from perflab.device import describe, resolve_device
from perflab.paths import display_path, results_dir
from perflab.precision import ToyModel, accumulation_experiment, dtype_audit, layernorm_sensitivity
from perflab.profiles import PRECISION, get_profile

pd.set_option("display.precision", 6)
run = get_profile(PRECISION, profile)
dev = resolve_device(device)
out = results_dir("03_mixed_precision", dev)
print(f"profile {profile!r} on {dev}")

# %% [markdown]
# ## 1. Adding 0.01 a thousand times
#
# The exact answer is 10. Four combinations of the accumulator's dtype and the increment's:

# %%
# NBVAL_CHECK_OUTPUT
accumulation = accumulation_experiment(steps=1000, value=0.01)
accumulation

# %% [markdown]
# - **float32 + float32**: 0.01 is not exactly representable, but float32's 24-bit mantissa
#   keeps the error tiny.
# - **float16 + float16**: the worst. Near 10 the gap between neighbouring float16 values is
#   2^-7 = 0.0078, so every addition of 0.01 rounds the running sum: the error grows with the
#   sum, not with the increment.
# - **float32 + float16**: the increment is stored as the float16 closest to 0.01
#   (`increment_as_stored`), and that representation error is added a thousand times; the
#   float32 sum itself rounds little.
# - **float16 + float32**: the float32 increment is cast down when added to a float16 sum,
#   so this is as bad as float16 throughout.
#
# Hence the mixed-precision rule: compute in low precision, **accumulate in float32**
# (matmul units accumulate in float32; optimizers keep float32 master weights).

# %%
errors = accumulation.set_index(["accumulator", "increment"])["error"]
print(f"float16 throughout is off by {abs(errors['float16', 'float16']):.3f}, "
      f"{abs(errors['float16', 'float16'] / errors['float32', 'float16']):.0f}x the error of "
      f"a float32 sum of float16 increments")

# %% [markdown]
# ## 2. Which dtype autocast gives each tensor
#
# A toy model (Linear -> ReLU -> LayerNorm -> Linear) runs one training step under
# `torch.autocast` on this device; forward hooks record each module's output dtype, and the
# parameters, logits, loss and gradients are read directly.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
toy, x, y = ToyModel(), torch.randn(8, 10), torch.randint(5, (8,))
audit = pd.concat(
    {name: dtype_audit(toy, x, y, name, dev).set_index("tensor")["dtype"]
     for name in ("float16", "bfloat16")}, axis=1
)
audit

# %% [markdown]
# What the table shows on every device: parameters stay float32 (autocast casts a copy for
# each matmul, the master weights are untouched), so gradients are float32 too; the loss is
# float32 because `cross_entropy` is on autocast's float32 list; linear layers produce the
# low-precision dtype.
#
# Where CPU and CUDA differ is the normalisation. **On CPU** (the table above when this
# notebook ran on a CPU) autocast keeps LayerNorm in the low precision: its output is
# float16/bfloat16. **On CUDA** `layer_norm` is on autocast's float32 list, so its output is
# float32 and the next linear layer casts it down again. (GPU-only fact, not measured here when
# the notebook runs on a CPU; run it on a GPU to see that column change.)

# %%
ln_output = audit.loc["output of ln"]
print(f"on {dev.type}, LayerNorm's output under float16 autocast is {ln_output['float16']}, "
      f"under bfloat16 autocast {ln_output['bfloat16']}")

# %% [markdown]
# ## 3. Why LayerNorm wants float32
#
# LayerNorm subtracts the mean from each value. When the mean is large and the spread small,
# the values differ only in their last bits, and low precision has few bits: the input's
# rounding error, about mean x 2^-(mantissa bits), is divided by the small standard deviation.
# Inputs of standard deviation 0.1 and growing mean, error against a float64 LayerNorm:

# %%
# NBVAL_CHECK_OUTPUT
sensitivity = layernorm_sensitivity(means=(0.0, 10.0, 100.0, 1000.0), std=0.1, device="cpu")
sensitivity.pivot_table(index="input_mean", columns="dtype", values="max_abs_error")

# %%
worst = sensitivity[sensitivity["input_mean"] == 100.0].set_index("dtype")["max_abs_error"]
print(f"at mean 100, std 0.1: float32 errs by {worst['float32']:.1e}, float16 by "
      f"{worst['float16']:.2f} and bfloat16 by {worst['bfloat16']:.2f} on outputs of size ~1")

# %% [markdown]
# bfloat16 has float32's range but only 8 significant bits: at mean 100 its neighbouring
# values are 0.5 apart, wider than the whole spread of the input, so the few values left
# give a wildly wrong variance; at mean 1000 (spacing 4 or 8) every input rounds to the same
# value and the output collapses to zero, which is why its error there is merely the size of
# the true output. That is why autocast on CUDA
# runs norms in float32, and why this model's `RMSNorm` upcasts to float32 inside.
#
# ## 4. float32 against bfloat16 autocast, per model size

# %%
configs = [
    BenchConfig(preset=p, context_length=run.context_length, mode="train-step",
                batch_size=run.batch_size, warmup=run.warmup, steps=run.steps, dtype=dtype,
                device=str(dev))
    for p in run.presets
    for dtype in ("float32", "bfloat16")
]
results = benchmark_sweep(configs, out / "precision.csv", resume=resume,
                          metadata={"profile": run.as_dict(), "machine": describe(dev)})
speedups = dtype_speedup(results)
speedups

# %%
fig, ax = plt.subplots(figsize=(5, 3.5))
speedups.plot.bar(x="preset", y="speedup_bfloat16", ax=ax, rot=0, legend=False)
ax.axhline(1.0, color="gray", linewidth=1)
ax.set_ylabel("float32 time / bfloat16 time")
ax.set_title(f"bfloat16 autocast speedup, training step ({dev.type})")
fig.tight_layout()
fig.savefig(out / "bf16_speedup.png", dpi=80)

# %%
for row in speedups.itertuples():
    ratio = row.speedup_bfloat16
    verdict = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.1f}x slower"
    print(f"{row.preset}: the bfloat16 autocast training step is {verdict} than float32")

# %% [markdown]
# On a GPU with tensor cores (A100, H100) bfloat16 matmuls run several times faster than
# float32 ones, and the speedup grows with model size, as matmuls take a larger share of the
# step and the casts and float32 ops that autocast adds matter less (GPU-only; run
# `perflab run 03 -p profile full` there). On a CPU without bfloat16 matrix units the matmuls
# gain little or nothing, and every cast is extra memory traffic: the numbers above show what
# this CPU does.
#
# ## Where the results are

# %%
for path in sorted(out.iterdir()):
    print(display_path(path))
