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
presets = ["cpu-tiny", "cpu-small"]  # model sizes of the float32 vs bfloat16 benchmark
context_length = 64                  # tokens per sequence
batch_size = 2                       # sequences per step
warmup = 2                           # untimed steps of each dtype before the comparison (the fastest plans the adaptive looks)
rounds = 8                           # first look of the comparison's adaptive rounds (each times both dtypes twice)
budget_s = 30                        # seconds each comparison may take adding rounds until it concludes
fp16_preset = "cpu-tiny"             # section 5: the model of the loss-scale study, with the 256 byte ids as vocabulary
fp16_batch_sizes = [2, 32]           # sequences per step: the mean loss divides each gradient by the tokens
fp16_seq_len = 64                    # tokens per sequence
fp16_scales = [1.0, 65536.0, 16777216.0]  # loss scales tried: none, GradScaler's default 2^16, and 2^24
scaler_steps = 8                     # AdamW steps with GradScaler beside float32
scaler_init_scale = 16777216.0       # GradScaler's first scale (2^24: large enough to overflow)
device = "auto"                      # "cuda" when present, else "cpu"

# %%
import pandas as pd
import torch

from perflab.lessons.nb03_mixed_precision import (
    Finding,
    ToyModel,
    accumulation_experiment,
    accumulation_sentence,
    audit_lines,
    bf16_against_fp32,
    byte_vocabulary,
    comparison_frame,
    conclude_all,
    dtype_audit,
    get_preset,
    layernorm_sensitivity,
    listing,
    open_notebook,
    plot_comparisons,
    scaler_lines,
    sensitivity_line,
    train_with_scaler,
    underflow_lines,
    underflow_table,
)

pd.set_option("display.precision", 6)
nb = open_notebook("03_mixed_precision", globals(), device=device)
dev, out = nb.device, nb.out
print(f"on {dev}")

# %% [markdown]
# ## 1. Adding 0.01 a thousand times
#
# The exact answer is 10. The handout's four loops (the first four rows: float32 throughout,
# float16 throughout, a float32 sum of float16 increments, and the same with each increment
# converted explicitly by `.type(torch.float32)` before the addition), and a fifth, a float16
# sum of float32 increments:

# %%
# NBVAL_CHECK_OUTPUT
accumulation = accumulation_experiment(steps=1000, value=0.01)
# 4 significant digits: what the prose reads, and what every IEEE machine agrees on
accumulation.apply(lambda c: c.map(lambda v: float(f"{v:.4g}")) if c.dtype.kind == "f" else c)

# %% [markdown]
# - **float32 + float32**: 0.01 is not exactly representable, but float32's 24-bit mantissa
#   keeps the error tiny.
# - **float16 + float16**: the worst. Near 10 the gap between neighbouring float16 values is
#   2^-7 = 0.0078, so every addition of 0.01 rounds the running sum: the error grows with the
#   sum, not with the increment.
# - **float32 + float16**: the increment is stored as the float16 closest to 0.01
#   (`increment_as_stored`), and that representation error is added a thousand times; the
#   float32 sum itself rounds little.
# - **float32 + float16, upcast explicitly**: `+=` already promotes the float16 operand to
#   float32, so this is the same float32 addition of the same value: the same result (checked
#   below). Converting after the rounding cannot undo it.
# - **float16 + float32**: the float32 increment is cast down when added to a float16 sum,
#   so this is as bad as float16 throughout.
#
# Hence the mixed-precision rule: compute in low precision, **accumulate in float32**
# (matmul units accumulate in float32; optimizers keep float32 master weights).

# %%
print(accumulation_sentence(accumulation))

# %% [markdown]
# ## 2. Which dtype autocast gives each tensor
#
# A toy model (Linear -> ReLU -> LayerNorm -> Linear) runs one training step under
# `torch.autocast` on this device; forward hooks record each module's output dtype, and the
# parameters, logits, loss and gradients are read directly.

# %%
torch.manual_seed(0)
toy, x, y = ToyModel(), torch.randn(8, 10), torch.randint(5, (8,))
audit = pd.concat(
    {name: dtype_audit(toy, x, y, name, dev).set_index("tensor")["dtype"]
     for name in ("float16", "bfloat16")}, axis=1
)
audit

# %%
# NBVAL_CHECK_OUTPUT
# What holds on every device (the table above also shows what differs: the normalisation).
print("\n".join(audit_lines(audit)))

# %% [markdown]
# What the table shows here (and PyTorch's autocast op lists give for CUDA too): parameters
# stay float32 (autocast casts a copy for each matmul, the master weights are untouched), so
# gradients are float32 too; the loss is
# float32 because `cross_entropy` is on autocast's float32 list; linear layers produce the
# low-precision dtype.
#
# Where CPU and CUDA differ is the normalisation. **On CPU** (the table above when this
# notebook ran on a CPU) autocast keeps LayerNorm in the low precision: its output is
# float16/bfloat16. **On CUDA** `layer_norm` is on autocast's float32 list, so its output is
# float32 and the next linear layer casts it down again (PyTorch's AMP documentation, "CUDA Ops
# that can autocast to float32", lists `layer_norm`; not measured here when the notebook runs
# on a CPU: run it on a GPU to see that column change).

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
print(sensitivity_line(sensitivity))

# %% [markdown]
# bfloat16 has float32's range but only 8 significant bits: at mean 100 its neighbouring
# values are 0.5 apart, wider than the whole spread of the input, so the few values left
# give a wildly wrong variance; at mean 1000 (spacing 4 or 8) every input rounds to the same
# value and the output collapses to zero, which is why its error there is merely the size of
# the true output. That is why autocast on CUDA runs norms in float32 (the documentation cited
# in section 2), and why this model's `RMSNorm` upcasts to float32 inside.
#
# ## 4. float32 against bfloat16 autocast, per model size

# %% [markdown]
# For each preset the float32 and the bfloat16-autocast training steps are built side by side
# and take turns (`perflab.bench.compare`, after `warmup` steps of each), so that a slow moment
# of the machine falls on both. The rounds are adaptive: looked at after `rounds`, then twice as
# many, until the verdict is conclusive or `budget_s` is spent, each look's interval widened so
# that the reported one holds with at least 95% confidence (over the looks planned to fit the
# budget from the warm-up's time). The verdict is "faster" or "slower"
# when the whole interval of the time ratio leaves the ±3% noise band, "same" when it lies
# inside it, and "inconclusive" otherwise. The handout's table asks for the forward and the
# backward pass apart: each step also records its phases (forward, backward, optimizer), and
# the second table compares each phase over the same rounds (`phase_comparisons`: each round's
# faster call, paired; the number of rounds was chosen for the whole step's verdict).

# %%
compared = bf16_against_fp32(presets, context_length, batch_size, dev, rounds=rounds,
                             warmup=warmup, budget_s=budget_s)
comparisons = [c for c in compared if c.labels["phase"] == "step"]
phases = [c for c in compared if c.labels["phase"] != "step"]
too_large = [p for p in presets if p not in {c.labels["preset"] for c in comparisons}]
if too_large:
    print("not compared (both training steps do not fit in memory together):", too_large)
table = comparison_frame(comparisons)
nb.save(table, "bf16_vs_fp32.csv")
fig = plot_comparisons(table, x="preset", title=f"bfloat16 autocast against float32 ({dev.type})")
nb.figure(fig, "bf16_vs_fp32.png")
table

# %%
phase_table = comparison_frame(phases)
nb.save(phase_table, "bf16_vs_fp32_phases.csv")
phase_table[["preset", "phase", "median_a_s", "median_b_s", "ratio_b_over_a", "ci_low", "ci_high",
             "verdict"]]

# %%
precision_findings = [Finding(f"bf16 vs fp32 {c.labels['preset']}",
                              f"{c.labels['preset']}: {c.sentence()}", c) for c in comparisons]
precision_findings += [Finding(f"{c.labels['phase']}: bf16 vs fp32 {c.labels['preset']}",
                               f"{c.labels['preset']}, {c.labels['phase']}: {c.sentence()}", c)
                       for c in phases]
print("\n".join(conclude_all(out, precision_findings)))

# %% [markdown]
# This device's answer is printed above; whether it has bfloat16 matrix units is one likely
# cause (not tested here). On GPUs with tensor cores the matmul rates differ by far more (NVIDIA
# A100 datasheet: 312 TFLOP/s bfloat16 dense against 19.5 TFLOP/s float32; cited, not measured
# here); what a whole training step gains on a GPU is not measured here: `perflab run 03
# --full` on a GPU measures it.
#
# ## 5. float16 and loss scaling, beside bfloat16
#
# float16 has 11 significant bits but only 5 exponent bits: its smallest normal number is
# 6.1e-5, its smallest subnormal 6.0e-8 and its largest 65,504. A mean loss over N tokens divides
# the gradient of each token's logits by N, and every activation gradient below them inherits
# the factor; under float16 autocast those are float16: values below about 3e-8 round to zero,
# small ones keep fewer bits. **Loss scaling** (Micikevicius et al. 2018) multiplies the loss by
# S before backward and divides the float32 parameter gradients by S after it; too large an S
# overflows to inf. bfloat16 has float32's 8 exponent bits but 8 significant bits. One
# backward of the same weights and batch per dtype and loss scale, against float32
# (`perflab.lessons.nb03_mixed_precision.loss_scaling.gradient_underflow`; `flushed`: gradient elements that are zero where
# float32's are not; the error: the largest relative error of a parameter's gradient). The model
# has the 256 byte ids as vocabulary: float16 matmuls are slow on a CPU without float16
# arithmetic, and the LM head is most of a small model's work.

# %%
fp16_config = byte_vocabulary(get_preset(fp16_preset))
underflow = underflow_table(fp16_config, fp16_batch_sizes, fp16_seq_len, fp16_scales, dev)
nb.save(underflow, "loss_scale_underflow.csv")
underflow

# %%
# NBVAL_CHECK_OUTPUT
bf16_flushes, scales_help, scale_errors = underflow_lines(underflow, fp16_scales)
print(bf16_flushes)
print(scales_help)

# %%
print(scale_errors)

# %% [markdown]
# **What GradScaler does with an overflow.** A scale too large makes some scaled gradient inf;
# `torch.amp.GradScaler` finds it before the step, skips that step (the weights and AdamW's
# state stay as they were) and halves the scale, and it grows the scale again after 2,000 clean
# steps. The same weights and batches trained in float32 beside it
# (`perflab.lessons.nb03_mixed_precision.loss_scaling.train_with_scaler`):

# %%
scaler = train_with_scaler(fp16_config, fp16_batch_sizes[0], fp16_seq_len, scaler_steps,
                           init_scale=scaler_init_scale, device=dev)
nb.save(scaler, "grad_scaler_steps.csv")
scaler

# %%
# NBVAL_CHECK_OUTPUT
scaler_checks, scaler_sentence = scaler_lines(scaler, scaler_init_scale)
print(scaler_checks)

# %%
print(scaler_sentence)

# %% [markdown]
# On a GPU the formats are the same, so the same gradients flush or overflow; what differs is the
# speed (the A100 datasheet gives its tensor cores 312 TFLOP/s dense in float16 and in bfloat16
# alike: cited, not measured here), which is why bfloat16, needing no scaler, is the usual
# choice where it exists, though scaled float16 keeps more bits, as measured above.
#
# ## Where the results are

# %%
print(listing(out))

# %% [markdown]
# **Do these results contradict themselves?** `perflab check-results` (notebook 01 lists its
# rules; CI runs it over `data/results`):

# %%
nb.check()
