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
# The committed settings (the parameters cell) are small presets sized for a 2-core CPU; on a
# GPU box `perflab run 01 --full` runs the full sizes.
#
# **Your own model:** `perflab run 01 -p model cs336_basics.model:BasicsTransformerLM` (any
# `package.module:Class` with the course's constructor arguments, importable where you run it)
# times your class in each preset's shape instead of perflab's `TransformerLM`, and against it,
# interleaved; those results land in a folder of their own
# (`data/results/01_benchmarking/yours-.../`). FLOPs, and so MFU, are counted for the course's
# architecture; the parameter count is your model's own.

# %% tags=["parameters"]
presets = ["cpu-tiny", "cpu-small"]  # model sizes from perflab.implementations.model.PRESETS
context_length = 128                 # tokens per sequence
batch_size = 4                       # sequences per step
warmup = 3                           # untimed steps before each measurement
steps = 6                            # timed steps
warmup_study_preset = "cpu-tiny"     # the model of the warm-up study
warmup_study_steps = 24              # timed steps after each warm-up setting (at least 20 to tell a slow first step at 95%)
warmup_study_warmups = [0, 1, 2]     # warm-up steps compared, each in a fresh process
device = "auto"                      # "cuda" when present, else "cpu"
dtype = "float32"                    # "float32", or "bfloat16" / "float16" autocast
resume = True                        # skip configurations already in this device's results file
model = None                         # your model class, package.module:Class (the course's BasicsTransformerLM arguments)

# %%
import pandas as pd

from perflab.lessons.nb01_benchmarking import (
    MODES,
    BenchConfig,
    MeasureNow,
    benchmark_sweep,
    compare_configs,
    compare_timers,
    comparison_frame,
    conclude,
    conclude_all,
    listing,
    matmul_size_for,
    measure_in_fresh_process,
    measure_peak_matmul,
    mfu_lines,
    open_notebook,
    parse_dtype,
    phase_breakdown,
    phase_findings,
    plot_phases,
    plot_warmup,
    presets_table,
    results_elsewhere,
    results_explorer,
    throughput,
    timing_table,
    warmup_configs,
    warmup_effect,
    warmup_finding,
    warmup_samples,
)

pd.set_option("display.precision", 4)
nb = open_notebook("01_benchmarking", globals(), device=device, yours=model)
dev, out, provenance, machine = nb.device, nb.out, nb.provenance, nb.provenance["machine"]
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
# MFU needs a peak. A CPU has no datasheet peak to quote, and a datasheet peak says nothing of
# what PyTorch's matmuls reach here, so we measure the fastest large square matmul in the same
# precision on this device.

# %%
peak = measure_peak_matmul(dev, parse_dtype(dtype))
print(f"{peak.device_name}: {peak.flops_per_s / 1e12:.3f} TFLOP/s "
      f"({peak.dtype}, {peak.size}x{peak.size} matmul, the fastest of {peak.steps} runs; the "
      f"median run: {peak.median_flops_per_s / 1e12:.3f})")

# %% [markdown]
# ## Forward, backward, optimizer
#
# Three modes per preset, each with `warmup` untimed steps and `steps` timed ones,
# the device synchronised around every step. *forward* computes logits and loss with autograd
# recording (as in training), *forward-backward* adds `loss.backward()`, *train-step* adds
# `AdamW.step()`. Every row is appended to `timings.csv` as soon as it is measured.

# %%
print(f"presets {presets}, batch {batch_size}, "
      f"context {context_length}, warm-up {warmup}, timed steps {steps}, {dtype}")
configs = [
    BenchConfig(preset=p, context_length=context_length, mode=mode, batch_size=batch_size,
                warmup=warmup, steps=steps, dtype=dtype, device=str(dev), model=model or "")
    for p in presets
    for mode in MODES
]
results = benchmark_sweep(out / "timings.csv", configs, resume=resume,
                          metadata=provenance)
print(f"model timed: {model or 'perflab.implementations.model.TransformerLM'}")
timing_table(results)

# %% [markdown]
# Each row's median comes with its distribution-free interval and the confidence that interval
# really has (`ci_ms`: 6 timed steps give 96.8%, fewer steps less; `perflab.measure.stats`), and a
# row whose samples spread too much (IQR above 25% of the median) is flagged `unstable`: no
# conclusion is drawn from it.
#
# **Where the step's time goes.** Inside every timed training step the device is synchronised
# at the end of the forward pass (with the loss), of the backward pass and of the optimizer
# step, so each step's three phases are measured directly: none can be negative and they add up
# to the step. (Subtracting separately timed modes, the last two columns, gives the same
# phases only when the noise allows; it can even go negative.)

# %%
breakdown = phase_breakdown(results)
nb.save(breakdown, "phases.csv")
fig = plot_phases(breakdown)
nb.figure(fig, "phases.png")
breakdown

# %%
nb.say(conclude_all(out, phase_findings(breakdown)))

# %% [markdown]
# The backward pass does two matmuls for every one of the forward (gradients with respect to
# the activations and to the weights), so 2x the forward's time is what the FLOP model
# predicts; where the interval excludes 2, something beyond the matmuls' FLOPs sets the
# ratio: the work that is not a matmul (softmax, norms, elementwise ops, memory traffic)
# weighing differently in the two passes is one possible reason, not measured here. AdamW touches every
# parameter a few times but does no matmuls, and its cost does not grow with the batch: its
# share should fall at larger batches (not varied here).
#
# ## Tokens per second and model FLOPs utilisation
#
# MFU = (model FLOPs of the step / median step time) / measured peak matmul rate
# (PaLM, Chowdhery et al. 2022, appendix B).

# %%
rates = throughput(results, peak.flops_per_s)
rates

# %%
print("\n".join(mfu_lines(rates, presets)))

# %% [markdown]
# If a larger model spends more of its time in large matmuls, which run closest to the device's
# peak, its MFU should be higher. The figures above are separate medians without an interval:
# they can agree with that or not, but do not test it.
#
# **The same sweep on other devices.** Results this notebook measured elsewhere and committed
# under `data/results/01_benchmarking/` (on a CPU run: an H100's and an H200's, perflab's
# `TransformerLM` at the handout's presets that each lease ran, context 512, float32, whatever
# model this run timed; see `data/GPU_CHECKS.md`), with the rows that ran out of memory:

# %%
for slug, rows in results_elsewhere("01_benchmarking", "timings.csv", dev).items():
    print(f"{slug}: {rows.attrs['source']}")
    there = timing_table(rows)
    there["tokens_per_s"] = rows["tokens_per_s"].round()
    there["achieved_tflops"] = (rows["achieved_flops_per_s"] / 1e12).round(1)
    display(there)

# %% [markdown]
# **Yours against perflab's** (with `-p model package.module:Class`): the training step of
# each preset with your class and with perflab's `TransformerLM`, built side by side and
# timed in turns (`compare_configs`, `steps` rounds).

# %%
if model:
    from dataclasses import replace

    for config in [c for c in configs if c.mode == "train-step"]:
        versus = compare_configs(replace(config, model=""), config, dev, rounds=steps,
                                 warmup=warmup, names=("perflab's TransformerLM", model))
        print(conclude(out, f"yours vs perflab's train-step ({config.preset})", versus))
else:
    print("no model given: perflab run 01 -p model package.module:Class times yours here")

# %% [markdown]
# ## What warm-up steps do
#
# The same training step, timed for `warmup_study_steps` steps after each number of untimed
# warm-up steps in `warmup_study_warmups` (0, 1 and 2 on a CPU; 0, 1, 2 and 5 in the full
# profile), **each in a fresh Python process** (`python -m perflab bench`), since warm-up
# effects happen once per process and would be invisible after the runs above. Whether a
# setting's first timed step is slower than the steps after it is an exact test: with no
# one-off cost, the first of n steps is the slowest with probability 1/n, so 20 steps are the
# fewest that can show it at 95%. Settings are tested in order of warm-up, each only after the
# ones before it were found slower, which keeps the chance of any false claim at 5%
# (`docs/statistics.md` gives the rate simulated). Medians of different settings ran in
# different processes and are not compared.

# %%
base = BenchConfig(preset=warmup_study_preset, context_length=context_length,
                   mode="train-step", batch_size=batch_size, warmup=0,
                   steps=warmup_study_steps, dtype=dtype, device=str(dev), model=model or "")
study = benchmark_sweep(out / "warmup.csv", warmup_configs(base, warmup_study_warmups),
                        measure=measure_in_fresh_process, resume=resume, desc="warm-up study",
                        metadata=provenance)
samples = warmup_samples(study)
fig = plot_warmup(samples)
nb.figure(fig, "warmup.png")
reading = warmup_effect(study)
reading

# %%
print(conclude_all(out, [warmup_finding(reading)])[0])

# %% [markdown]
# A first step found slower pays a one-off cost of its process; which one, the study does not
# measure. The usual ones: memory touched for the first time, the allocator filling its caches,
# kernel libraries choosing algorithms (oneDNN primitives on a CPU; more on a GPU) and AdamW
# allocating its state on its first step. However slow it is, one such step moves a median
# by at most one place among the sorted steps, while it can move a mean and a standard
# deviation by any amount (the study prints how far each moved when it finds one; with a
# first step only a little slower, the median may move as far as the mean, or further). That
# is why every measurement here warms up first and reports the median with its interval.
#
# ## Is the workbook's timer right?
#
# A matmul sized to take about 10 ms on this device, timed by the workbook's timer and by
# `torch.utils.benchmark` (with as many threads as ours uses: it defaults to one), and on CUDA
# by `triton.testing.do_bench` (GPU-only).

# %%
n = matmul_size_for(0.01, peak.flops_per_s)
timers = compare_timers(n, dev, rounds=6)
comparison_frame(timers)[["b", "median_a_s", "median_b_s", "ratio_b_over_a", "ci_low", "ci_high",
                          "confidence", "verdict"]]

# %%
nb.say(f"{n}x{n} matmul, {timer.rounds} rounds: {timer.sentence()}" for timer in timers)

# %% [markdown]
# `torch.utils.benchmark` times blocks of many calls and divides, so it hides per-call
# overhead that ours includes (a synchronisation and a clock read per call): the smaller the
# operation, the more the two can differ.

# %% [markdown]
# ## Explore the saved rows, or measure one more
#
# **Explore.** `timings.csv` keeps every configuration measured on this device,
# in this run or an earlier one (other presets, contexts, dtypes, step counts). Choose a
# preset, mode, context and dtype and the widget's table (and a figure of the median against
# the model's size) follows, without measuring anything again. Without a front end (papermill,
# nbval) the widget draws nothing; the table under the cell is its starting state.

# %%
saved = pd.read_csv(out / "timings.csv")
explorer = results_explorer(
    saved[saved["status"] == "ok"], ["preset", "mode", "context_length", "dtype"],
    ["batch_size", "steps", "num_parameters", "median_s", "median_ci_low_s", "median_ci_high_s",
     "tokens_per_s"],
    defaults={"mode": "train-step"}, plot=("num_parameters", "median_s"))
display(explorer)
explorer.result

# %% [markdown]
# **Measure one configuration now.** Choose a preset, mode, context, batch, dtype and number of
# timed steps, and press *measure now*: that configuration is timed in this kernel (with the
# sweep's warm-up), its row is appended to `measure_now.csv` beside `timings.csv` (which it
# never changes) and shown under the button. Nothing runs until the button is pressed; without
# a front end the table under it is the configuration it starts at and the median last saved
# for it (in either file).

# %%
measure = MeasureNow(out / "measure_now.csv", configs[0], presets, metadata=provenance,
                     sweep=out / "timings.csv")
display(measure)
measure.planned()

# %% [markdown]
# ## Where the results are

# %%
print(listing(out))

# %% [markdown]
# **Do the results contradict themselves?** `perflab check-results` (also run in CI over
# `data/results`) looks for negative phases, a larger preset faster than a smaller one beyond
# their intervals, ratios outside their physical bounds and conclusions drawn from unstable
# rows.

# %%
nb.check()
