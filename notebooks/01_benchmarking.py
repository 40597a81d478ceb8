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
# # 01 Benchmarking: how long does a training step take, and how good is that?
#
# You will time the three parts of training a Transformer language model (the forward pass,
# the backward pass and the AdamW update) for several model sizes, turn the times into
# tokens per second and **model FLOPs utilisation** (MFU: the share of the device's measured
# matmul rate that the model's own arithmetic reaches), see what warm-up steps do to the
# numbers, and check the workbook's timer against PyTorch's.
#
# Every number below comes from `perflab`; the notebook only calls it and reads the results.
# The default `profile = "cpu"` runs small presets in about a minute on a 2-core CPU; on a GPU
# box run `perflab run 01 -p profile full` for the full sizes.

# %% tags=["parameters"]
profile = "cpu"     # "cpu": small presets for a CPU; "full": full sizes, for a GPU
presets = None      # list of preset names, e.g. ["small", "medium"]; None: the profile's
device = "auto"     # "cuda" when present, else "cpu"
dtype = "float32"   # "float32", or "bfloat16" / "float16" autocast
resume = True       # skip configurations already in this device's results file

# %%
import matplotlib.pyplot as plt
import pandas as pd

from perflab.bench import MODES, BenchConfig
from perflab.bench.crosscheck import compare_timers, matmul_size_for
from perflab.bench.plots import plot_phases, plot_warmup
from perflab.bench.steps import benchmark_sweep
from perflab.bench.tables import phase_breakdown, throughput
from perflab.bench.warmup import (
    measure_in_fresh_process,
    warmup_configs,
    warmup_effect,
    warmup_samples,
)
from perflab.bench.peak import measure_peak_matmul
from perflab.device import describe, resolve_device
from perflab.model import presets_table
from perflab.paths import display_path, results_dir
from perflab.profiles import BENCHMARKING, get_profile

pd.set_option("display.precision", 4)
run = get_profile(BENCHMARKING, profile)
chosen = tuple(presets) if presets else run.presets
dev = resolve_device(device)
out = results_dir("01_benchmarking", dev)
machine = describe(dev)
pd.Series(machine, name="this run")

# %% [markdown]
# ## The models and what they cost
#
# The workbook's presets (plus CPU-sized ones of the same family), with the parameter
# count and the matmul FLOPs of one step at batch 4 and context 512, from
# `ModelConfig.forward_flops`: each multiply-add is 2 FLOPs, the backward pass costs two
# forwards, so a training step is 3x a forward.

# %%
# NBVAL_CHECK_OUTPUT
presets_table(batch_size=4, seq_len=512)

# %% [markdown]
# ## The yardstick: the device's measured matmul rate
#
# MFU needs a peak. A datasheet peak is not reachable by PyTorch matmuls, and a CPU has none,
# so we measure the fastest large square matmul in the same precision on this device.

# %%
peak = measure_peak_matmul(dev, dtype)
print(f"{peak.device_name}: {peak.flops_per_s / 1e12:.3f} TFLOP/s "
      f"({peak.dtype}, {peak.size}x{peak.size} matmul, median of the timer's samples)")

# %% [markdown]
# ## Forward, backward, optimizer
#
# Three modes per preset, each with `run.warmup` untimed steps and `run.steps` timed ones,
# the device synchronised around every step. *forward* computes logits and loss with autograd
# recording (as in training), *forward-backward* adds `loss.backward()`, *train-step* adds
# `AdamW.step()`. Every row is appended to `timings.csv` as soon as it is measured.

# %%
print(f"profile {profile!r}: presets {chosen}, batch {run.batch_size}, "
      f"context {run.context_length}, warm-up {run.warmup}, timed steps {run.steps}, {dtype}")
configs = [
    BenchConfig(preset=p, context_length=run.context_length, mode=mode, batch_size=run.batch_size,
                warmup=run.warmup, steps=run.steps, dtype=dtype, device=str(dev))
    for p in chosen
    for mode in MODES
]
results = benchmark_sweep(configs, out / "timings.csv", resume=resume,
                          metadata={"profile": run.as_dict(), "machine": machine})
results[["preset", "mode", "status", "mean_s", "std_s", "median_s", "p20_s", "p80_s"]]

# %% [markdown]
# Each phase alone: backward = forward-backward minus forward, optimizer = train-step minus
# forward-backward (differences of means of separate runs).

# %%
breakdown = phase_breakdown(results)
fig = plot_phases(breakdown)
fig.savefig(out / "phases.png", dpi=80)
breakdown

# %%
for row in breakdown.itertuples():
    print(f"{row.preset}: backward takes {row.backward_s / row.forward_s:.2f}x the forward "
          f"(the FLOP model says 2.00x); the optimizer takes {row.optimizer_s / row.step_s:.1%} "
          f"of the step")

# %% [markdown]
# The backward pass does two matmuls for every one of the forward (gradients with respect to
# the activations and to the weights), so about 2x the forward's time is what the FLOP model
# predicts; where the ratio departs from 2, the non-matmul work (softmax, norms, elementwise
# ops, memory traffic) or launch overhead weighs differently in the two passes. AdamW touches
# every parameter a few times but does no matmuls: its share is largest where the batch has the
# fewest tokens per parameter.
#
# ## Tokens per second and model FLOPs utilisation
#
# MFU = (model FLOPs of the step / median step time) / measured peak matmul rate
# (PaLM, Chowdhery et al. 2022, appendix B).

# %%
rates = throughput(results, peak.flops_per_s)
rates

# %%
best = rates.loc[rates["mfu"].idxmax()]
print(f"best MFU: {best.mfu:.1%} ({best.preset}, {best['mode']}); "
      f"worst: {rates['mfu'].min():.1%}")
by_preset = rates[rates["mode"] == "train-step"].set_index("preset")["mfu"]
print("training-step MFU by preset:", ", ".join(f"{p} {m:.1%}" for p, m in by_preset.items()))

# %% [markdown]
# Larger models usually spend a larger share of their time in large matmuls, which run closest
# to the device's peak, so their MFU tends to be higher; small models lose more to the work that
# is not a matmul (and, on a GPU, to kernel launch overhead).
#
# ## What warm-up steps do
#
# The same training step, timed for `run.warmup_study_steps` steps after 0, 1, 2 and 5
# untimed warm-up steps, **each in a fresh Python process** (`python -m perflab bench`), since
# warm-up effects happen once per process and would be invisible after the runs above.

# %%
base = BenchConfig(preset=run.warmup_study_preset, context_length=run.context_length,
                   mode="train-step", batch_size=run.batch_size, warmup=0,
                   steps=run.warmup_study_steps, dtype=dtype, device=str(dev))
study = benchmark_sweep(warmup_configs(base, run.warmup_study_warmups), out / "warmup.csv",
                        measure=measure_in_fresh_process, resume=resume, desc="warm-up study")
samples = warmup_samples(study)
fig = plot_warmup(samples)
fig.savefig(out / "warmup.png", dpi=80)
study[["warmup", "steps", "mean_s", "std_s", "median_s", "min_s", "max_s"]]

# %%
reading = warmup_effect(study)
reading

# %%
cold, warm = reading.iloc[0], reading.iloc[-1]
print(f"without warm-up the first timed step takes {cold.first_over_warm_median:.1f}x the median "
      f"after {warm.warmup:.0f} warm-up steps; the mean is {cold.mean_over_warm:.2f}x, "
      f"the std {cold.std_over_warm:.1f}x and the median {cold.median_over_warm:.2f}x theirs")

# %% [markdown]
# The first step in a process pays one-off costs: memory touched for the first time, the
# allocator filling its caches, kernel libraries choosing algorithms (oneDNN primitives on a
# CPU; the CUDA context, cuBLAS handles and autotuning on a GPU, where the effect is far
# larger) and AdamW allocating its state on its first step. Without warm-up this single slow
# step inflates the mean and, even more, the standard deviation; the median resists it best.
# The table shows, for this device, how many warm-up steps it takes until the numbers settle
# (ratios near 1): that is why every measurement here warms up first and reports the median
# with its spread.
#
# ## Is the workbook's timer right?
#
# A matmul sized to take about 10 ms on this device, timed by the workbook's timer and by
# `torch.utils.benchmark` (with as many threads as ours uses: it defaults to one), and on CUDA
# by `triton.testing.do_bench` (GPU-only).

# %%
n = matmul_size_for(0.01, peak.flops_per_s)
timers = compare_timers(n, dev)
timers

# %%
other = timers.iloc[1]
print(f"{n}x{n} matmul: perflab median / torch.utils.benchmark median = "
      f"{1 / other.ratio_to_perflab:.3f}")

# %% [markdown]
# A ratio near 1 says the per-step synchronised timer adds nothing measurable at this size.
# `torch.utils.benchmark` times blocks of many calls and divides, so it hides per-call
# overhead that ours includes: the smaller the operation, the more the two can differ.
#
# ## Where the results are

# %%
for path in sorted(out.iterdir()):
    print(display_path(path))
