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
# # 06 FlashAttention-2: attention without the quadratic memory
#
# You will write Triton kernels, starting with a weighted sum, then build FlashAttention-2:
# tiled with an online softmax in plain PyTorch (`FlashAttentionTorch`), then as Triton kernels
# (`FlashAttentionTriton`: one program per batch element and query tile, causal tiles in the
# future skipped, the logsumexp saved, a backward in two kernels without atomics). Both are
# checked against a float64 reference, then measured against naive attention and PyTorch's
# `scaled_dot_product_attention`.
#
# On a CPU the Triton kernels run in the **Triton interpreter**, which executes every program in
# NumPy: its timings say nothing about speed and are labelled so (`speed_measurement` False).
# Section 3 compiles the same kernels for A100 and H100 binaries on this machine, without a GPU.
# Compiled kernels, bfloat16 and autotuned tiles are GPU-only: `perflab run 06 -p profile full`.

# %% tags=["parameters"]
profile = "cpu"     # "cpu": small grid (Triton interpreted); "full": the full grid, for a GPU
device = "auto"     # "cuda" when present, else "cpu"
resume = True       # skip configurations already in this device's results file
kernel_targets = ["sm_80", "sm_90"]  # GPU architectures to compile the Triton kernels for
kernel_dtypes = ["fp16"]             # their input dtypes: fp16, bf16, fp32

# %%
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import torch

from perflab.attention.aot import (
    compile_table,
    jobs,
    over_shared_limit,
    plot_shared_memory,
    summary,
)
from perflab.bench.attention import (
    attention_peak_memory,
    flash_benchmark_configs,
    measure_attention,
)
from perflab.attention.check import TOLERANCE, correctness_table
from perflab.attention.flash_torch import FlashAttentionTorch
from perflab.attention.flash_triton import AUTOTUNE_CONFIGS, INTERPRETED, FlashAttentionTriton
from perflab.attention.triton_compile import TARGETS
from perflab.attention.weighted_sum import WeightedSumTriton
from perflab.bench import Sweep
from perflab.device import describe, resolve_device
from perflab.paths import display_path, results_dir
from perflab.profiles import FLASH, get_profile

MiB = 2**20
run = get_profile(FLASH, profile)
dev = resolve_device(device)
out = results_dir("06_flash_attention", dev)
print(f"profile {profile!r} on {dev}; Triton {'interpreted (not a speed measurement)' if INTERPRETED else 'compiled'}")

# %% [markdown]
# ## 1. A first Triton kernel: the weighted sum
#
# `y = x @ w` for x (rows, D) and w (D,): each program sums ROWS rows, walking D in chunks with
# masks. The backward writes dx = dy w^T and one partial dw per program, summed afterwards (no
# atomics). Checked against PyTorch in float64:

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
x = torch.randn(100, 70, dtype=torch.float32, device=dev, requires_grad=True)
w = torch.randn(70, dtype=torch.float32, device=dev, requires_grad=True)
y = WeightedSumTriton.apply(x, w)
y.backward(torch.ones_like(y))
x64, w64 = x.detach().double(), w.detach().double()
print(f"forward within 1e-4: {(y.double() - x64 @ w64).abs().max().item() < 1e-4}, "
      f"dx within 1e-6: {(x.grad.double() - w64.expand(100, 70)).abs().max().item() < 1e-6}, "
      f"dw within 1e-4: {(w.grad.double() - x64.sum(0)).abs().max().item() < 1e-4}")

# %% [markdown]
# ## 2. Correctness of both FlashAttention implementations
#
# Fresh random inputs, lengths that are not multiples of the tiles, different query and key
# lengths, causal and not; errors are the largest difference from the float64 reference
# divided by max(1, largest reference value), against the tolerance of the input dtype
# (float32: 2e-5 for outputs and logsumexp, 5x for gradients; float16: 2e-3).

# %%
cases = [(1, 17, 40, 16, True), (3, 129, 100, 64, False), (2, 100, 129, 64, True),
         (1, 1, 33, 32, False)]
dtypes = [torch.float32, torch.float16] + ([torch.bfloat16] if dev.type == "cuda" else [])
checks = pd.concat(
    [correctness_table(function, cases, dtype, dev).assign(implementation=name)
     for name, function in (("flash_torch", FlashAttentionTorch),
                            ("flash_triton", FlashAttentionTriton))
     for dtype in dtypes],
    ignore_index=True,
)
checks

# %%
# NBVAL_CHECK_OUTPUT
print(f"{checks['within_tolerance'].sum()} of {len(checks)} checks within tolerance; "
      f"tolerances {({str(k).removeprefix('torch.'): v for k, v in TOLERANCE.items()})}")

# %% [markdown]
# ## 3. The kernels compiled for real GPUs, on this machine
#
# The interpreter runs the kernels but does not type-check them as the compiler does: a
# variable whose shape changes inside an `if` (the causal mask once did) runs fine here and
# fails on the first GPU launch. Triton's CUDA backend, with the `ptxas` shipped in its wheel,
# compiles every kernel to a GPU binary for a named architecture without any GPU, so here
# every kernel is compiled for each target and autotune configuration (head dimension 128, the
# largest), causal and not. From each binary: registers per thread, spill stores (local-memory
# instructions in the machine code), shared memory per block against the target's limit, and
# which strides are widened to 64 bits. (`perflab kernels --target sm_90` prints the same; the
# test suite compiles bfloat16 and sm_100 too.)

# %%
compiled = compile_table(jobs(targets=kernel_targets, dtypes=kernel_dtypes, head_dims=(128,)))
compiled.to_csv(out / "compiled_kernels.csv", index=False)
summary(compiled)

# %%
# NBVAL_CHECK_OUTPUT
print(f"{len(compiled)} compiles of {compiled['kernel'].nunique()} kernels for "
      f"{', '.join(kernel_targets)}; failed: {int((compiled['status'] != 'ok').sum())}")

# %%
flash_rows = compiled[compiled["causal"].astype(bool) & (compiled["target"] == kernel_targets[-1])]
flash_rows[["kernel", "block_q", "block_k", "num_warps", "num_stages", "registers",
            "spill_stores", "shared_bytes", "max_shared_bytes", "int64_strides"]]

# %%
fig = plot_shared_memory(compiled)
fig.savefig(out / "compiled_shared_memory.png", dpi=80)

# %%
over = over_shared_limit(compiled).drop_duplicates(
    ["kernel", "target", "dtype", "block_q", "block_k", "num_warps", "num_stages"])
for target in kernel_targets:
    print(f"{target} ({TARGETS[target].example}): {TARGETS[target].max_shared_bytes // 1024} KiB "
          "of shared memory per block")
for (kernel, target, dtype), rows in over.groupby(["kernel", "target", "dtype"], sort=False):
    configs = ", ".join(f"{r.block_q:.0f}x{r.block_k:.0f}/{r.num_warps}w/{r.num_stages}s"
                        for r in rows.itertuples())
    print(f"{kernel} {dtype} on {target}: {len(rows)} of {len(AUTOTUNE_CONFIGS)} configurations "
          f"do not fit, pruned before autotuning: {configs}")
if over.empty:
    print("every configuration fits every target's shared memory")
attention_rows = compiled[compiled["block_q"].notna() & (compiled["status"] == "ok")]
spilling = attention_rows.assign(spills=attention_rows["spill_stores"] > 0).groupby(
    "num_warps")["spills"].agg(["sum", "size"])
for warps, row in spilling.iterrows():
    print(f"{warps} warps: {row['sum']} of {row['size']} compiled configurations spill registers")

# %% [markdown]
# Shared memory grows with the tiles and with the pipeline stages (each stage keeps its own
# copy of the K and V tiles), and the targets differ (printed above). A configuration that does
# not fit would fail to launch on that GPU, so the autotuner drops it before benchmarking
# (`flash_triton.configs_that_fit`, the same compile on the device). Configurations that spill
# registers stay candidates: the autotuner measures them and keeps one only if it is fastest.
# None of this ran on a GPU here: it is what the compiler produces for one.
#
# ## 4. Speed and memory against naive attention and SDPA
#
# Causal attention, forward, backward and end to end, with TFLOP/s from the FLOP model
# (forward 4·b·n²·d, halved for causal; backward 2.5x). Every row lands in `flash.csv` as soon as
# it is measured; out-of-memory rows are kept.

# %%
configs = flash_benchmark_configs(run, dev)
sweep = Sweep(out / "flash.csv", key=list(configs[0]),
              metadata={"profile": run.as_dict(), "machine": describe(dev)})
bench = sweep.run(configs, measure_attention, resume=resume)
bench.assign(peak_MiB=bench["peak_bytes"] / MiB)[
    ["implementation", "dtype", "head_dim", "seq_len", "status", "forward_s", "backward_s",
     "end_to_end_s", "end_to_end_tflops", "peak_MiB", "speed_measurement"]]

# %%
timed = bench[(bench["status"] == "ok") & bench["speed_measurement"].astype(bool)]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for ax, column, label in ((axes[0], "end_to_end_s", "forward + backward (s)"),
                          (axes[1], "peak_bytes", "peak memory (bytes)")):
    sns.lineplot(data=timed[timed["head_dim"] == max(run.head_dims)], x="seq_len", y=column,
                 hue="implementation", style="dtype", marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(f"{label}, d={max(run.head_dims)}")
fig.tight_layout()
fig.savefig(out / "flash_benchmark.png", dpi=80)

# %%
largest = timed[timed["seq_len"] == timed["seq_len"].max()]
ratios = largest.pivot_table(index=["dtype", "head_dim"], columns="implementation",
                             values="end_to_end_s")
for column in [c for c in ratios.columns if c != "sdpa"]:
    ratios[f"{column}_over_sdpa"] = ratios[column] / ratios["sdpa"]
ratios

# %% [markdown]
# On a CPU the tiled PyTorch version pays Python overhead for every tile and is slower than both
# naive attention and SDPA; its point there is memory. On a GPU the compiled Triton kernel is
# the one that should approach or beat SDPA (GPU-only; the full profile measures it).
#
# ## 5. Memory at a long context
#
# Batch `memory_batch`, sequence `memory_seq_len`, d `memory_head_dim`, float32, forward +
# backward. (The Triton interpreter is left out on a CPU: at this size it runs for many minutes.)

# %%
implementations = ["naive", "sdpa", "flash_torch"] + ([] if INTERPRETED else ["flash_triton"])
memory = pd.DataFrame([
    attention_peak_memory(name, run.memory_batch, run.memory_seq_len, run.memory_head_dim, dev)
    for name in implementations
])
memory["peak_MiB"] = memory["peak_bytes"] / MiB
memory["held_MiB"] = memory["held_before_backward_bytes"] / MiB
memory.to_csv(out / "long_context_memory.csv", index=False)
memory

# %%
peaks = memory.set_index("implementation")["peak_bytes"]
print(f"b={run.memory_batch}, n={run.memory_seq_len}, d={run.memory_head_dim}: "
      f"FlashAttentionTorch peak / naive peak = {peaks['flash_torch'] / peaks['naive']:.3f}; "
      f"the (b x n x n) float32 scores alone take "
      f"{run.memory_batch * run.memory_seq_len**2 * 4 / MiB:.0f} MiB")

# %% [markdown]
# Naive attention holds the whole score matrix; the tiled version holds one tile of scores at a
# time plus the output and one logsumexp per query, so its memory grows linearly with the
# sequence length instead of quadratically.
#
# ## Where the results are

# %%
for path in sorted(out.iterdir()):
    print(display_path(path))
