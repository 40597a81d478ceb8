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
# Section 3 compiles the same kernels to GPU binaries on this machine, without a GPU: for the
# targets in `kernel_targets` (sm_90, the H100, by default; sm_80, sm_100 and bfloat16 in the
# tests and the full profile).
# Compiled kernels, bfloat16 and autotuned tiles are GPU-only: `perflab run 06 --full`.
#
# **Your own FlashAttention:** `perflab run 06 -p adapters my-repo/tests/adapters.py` (the
# course's adapters file, or a dotted module) checks yours in section 2 and times it as
# `yours_pytorch` / `yours_triton` beside perflab's and SDPA's in sections 4 and 5; those
# results land in a folder of their own (`data/results/06_flash_attention/yours-.../`).

# %% tags=["parameters"]
batch = 4                             # sequences per call
head_dims = [64]                      # d of q, k, v
seq_lens = [128, 256, 512]            # sequence lengths
dtypes = ["float32"]                  # input dtypes (bfloat16: GPU only)
warmup = 1                            # untimed calls
steps = 6                             # timed calls (and rounds of each comparison: 6 is the fewest for a 95% verdict)
max_seq_len = {"flash_triton": 128, "flash_torch": 256}  # implementations run only up to this length
memory_batch = 4                      # the long-context memory comparison: batch,
memory_seq_len = 1024                 # sequence length
memory_head_dim = 64                  # and head dimension
kernel_targets = ["sm_90"]            # GPU architectures to compile the Triton kernels for
kernel_dtypes = ["fp16"]              # their input dtypes: fp16, bf16, fp32
kernel_causal = [True]                # causal flags compiled (the full profile adds False)
device = "auto"                       # "cuda" when present, else "cpu"
resume = True                         # skip configurations already in this device's results file
adapters = None                       # your course tests/adapters.py (or a module): checked and timed beside perflab's

# %%
import pandas as pd
import torch
import triton

from perflab.bench.checks import check_results
from perflab.attention.aot import (
    compile_table,
    jobs,
    plot_shared_memory,
    pruned_configs,
    spill_counts,
    summary,
)
from perflab.adapters import (
    attention_functions,
    check_adapters,
    format_table,
    passing_adapters,
    results_name,
)
from perflab.bench.attention import (
    add_implementation,
    attention_peak_memory,
    attention_configs,
    compare_attention,
    measure_attention,
    ratios_to,
)
from perflab.bench.comparison import describe_ratio
from perflab.bench.conclusions import conclude
from perflab.attention.check import TOLERANCE, correctness_table
from perflab.attention.flash_torch import FlashAttentionTorch
from perflab.attention.flash_triton import (
    AUTOTUNE_CONFIGS, CHECK_CONFIG, INTERPRETED, FlashAttentionTriton, pinned_config,
)
from perflab.attention.triton_compile import TARGETS
from perflab.attention.weighted_sum import WeightedSumTriton
from perflab.attention.weighted_sum import _weighted_sum_forward_kernel
from perflab.attention.flash_triton import _flash_forward_kernel
from perflab.attention.triton_compile import kernel_source
from IPython.display import Markdown
from perflab.bench import Sweep
from perflab.bench.plots import plot_attention_sweep
from perflab.device import describe, resolve_device
from perflab.paths import (
    display_path, results_dir, results_elsewhere, save_figure, save_table,
)
from perflab.settings import record_settings

MiB = 2**20
settings = record_settings("06_flash_attention", globals())
dev = resolve_device(device)
yours = attention_functions(adapters) if adapters else {}  # name -> your autograd.Function
for name, function in yours.items():
    add_implementation(name, function, triton=name == "yours_triton")
out = results_dir("06_flash_attention" + (f"/{results_name(adapters)}" if adapters else ""), dev)
provenance = {"settings": settings, "machine": describe(dev)}
print(f"on {dev}; Triton {'interpreted (not a speed measurement)' if INTERPRETED else 'compiled'}")

# %% [markdown]
# ## 1. A first Triton kernel: the weighted sum
#
# `y = x @ w` for x (rows, D) and w (D,): each program sums ROWS rows, walking D in chunks with
# masks. The backward writes dx = dy w^T and one partial dw per program, summed afterwards (no
# atomics). The forward kernel, as the library defines it:

# %%
Markdown(f"```python\n{kernel_source(_weighted_sum_forward_kernel)}```")

# %% [markdown]
# Checked against PyTorch in float64:

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
# The Triton forward kernel: each program owns one tile of queries and walks the key tiles,
# keeping the running maximum `row_max`, the running sum `row_sum` and the unnormalised output
# `acc` in registers (the online softmax: each new tile rescales them by `correction`), and
# writes the output and the logsumexp `row_max + log row_sum` once at the end. With the causal
# mask, key tiles wholly after the query tile are not visited, and only the tiles on the
# diagonal are masked element by element.

# %%
Markdown(f"```python\n{kernel_source(_flash_forward_kernel)}```")

# %% [markdown]
#
# Fresh random inputs, lengths that are not multiples of the tiles, different query and key
# lengths, causal and not; errors are the largest difference from the float64 reference
# divided by max(1, largest reference value), against the tolerance of the input dtype
# (float32: 2e-5 for outputs and logsumexp, 5x for gradients; float16: 2e-3).
# On a GPU the Triton kernels run with one pinned configuration (`CHECK_CONFIG`: tiles, warps,
# stages) instead of being autotuned: tuning compiles every configuration of all three kernels
# for each new shape (about a second each), which is right for the benchmark below and far too
# slow for a dozen odd shapes. The test suite checks every autotune configuration this way.

# %%
cases = [(1, 17, 40, 16, True), (2, 129, 100, 32, False), (1, 100, 129, 64, True),
         (1, 1, 33, 32, False)]
check_dtypes = [torch.float32, torch.float16] + ([torch.bfloat16] if dev.type == "cuda" else [])
with pinned_config(CHECK_CONFIG):
    checks = pd.concat(
        [correctness_table(function, cases, dtype, dev).assign(implementation=name)
         for name, function in (("flash_torch", FlashAttentionTorch),
                                ("flash_triton", FlashAttentionTriton))
         for dtype in check_dtypes],
        ignore_index=True,
    )
checks

# %%
# NBVAL_CHECK_OUTPUT
print(f"{checks['within_tolerance'].sum()} of {len(checks)} checks within tolerance; "
      f"tolerances {({str(k).removeprefix('torch.'): v for k, v in TOLERANCE.items()})}")

# %% [markdown]
# **Yours** (with `-p adapters PATH`): `perflab check --adapters`'s attention checks on your
# implementation (output, saved log-sum-exp and gradients against float64 on odd shapes; the
# Triton kernels it launches compiled for sm_80 and sm_90). Only an implementation whose
# attention checks all pass is timed in sections 4 and 5 (a kernel that fails to compile for a
# GPU still runs in the interpreter; its row says so).

# %%
if adapters:
    yours_check = check_adapters(adapters, parts=("attention", "kernels"))
    print(format_table(yours_check))
    yours = attention_functions(adapters, passing_adapters(yours_check))  # only these are timed
    print("timed below:", ", ".join(yours) or "none")
else:
    print("no adapters given: perflab run 06 -p adapters PATH checks and times yours here")

# %% [markdown]
# ## 3. The kernels compiled for real GPUs, on this machine
#
# The interpreter runs the kernels but does not type-check them as the compiler does: a variable
# whose shape changes inside an `if` (the causal mask once did) runs fine here but fails to
# compile for a GPU, which is what the compiles below check. Triton's CUDA backend, with the
# `ptxas` shipped in its wheel, compiles every kernel to a GPU binary for a named architecture
# without any GPU, so here every kernel is compiled for each target and autotune configuration
# (head dimension 128, the largest; causal by default, non-causal too in the full profile and
# the tests). From each binary: registers per thread,
# spill stores (local-memory instructions in the machine code), shared memory per block against
# the target's limit, and which strides are widened to 64 bits. (`perflab kernels --target
# sm_90` prints the same; the test suite compiles sm_80, sm_100 and bfloat16 too, and so does
# the full profile here.)

# %%
compiled = compile_table(jobs(targets=kernel_targets, dtypes=kernel_dtypes, head_dims=(128,),
                              causal=kernel_causal))
save_table(compiled, out / "compiled_kernels.csv", provenance)
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
save_figure(fig, out / "compiled_shared_memory.png");

# %%
for target in kernel_targets:
    print(f"{target} ({TARGETS[target].example}): {TARGETS[target].max_shared_bytes // 1024} KiB "
          "of shared memory per block")
pruned = pruned_configs(compiled)
for row in pruned.itertuples():
    print(f"{row.kernel} {row.dtype} on {row.target}: {row.pruned} of {len(AUTOTUNE_CONFIGS)} "
          f"configurations do not fit, pruned before autotuning: {row.configs}")
if pruned.empty:
    print("every configuration fits every target's shared memory")
spill_counts(compiled)

# %% [markdown]
# **Triton versions differ here.** The H100 run logged in `data/GPU_CHECKS.md` used Triton 3.6,
# whose dK/dV kernel (`flash_backward_kv`) needed more shared memory at d = 128 in two
# configurations than the H100 has per block (recorded there, in bytes, for (block_q, block_k,
# warps, stages)), so its pruner dropped them. This machine's Triton compiles the same
# configurations to:

# %%
h100_triton36 = {(128, 128, 8, 3): 296_960, (128, 64, 8, 3): 247_808}  # from data/GPU_CHECKS.md
kv = compiled[(compiled["kernel"] == "flash_backward_kv") & (compiled["target"] == "sm_90")]
for (bq, bk, warps, stages), then in h100_triton36.items():
    now = kv[(kv["block_q"] == bq) & (kv["block_k"] == bk) & (kv["num_warps"] == warps)
             & (kv["num_stages"] == stages)]
    if now.empty:
        print(f"({bq}, {bk}, {warps}, {stages}): not compiled here for sm_90")
        continue
    now = now.iloc[0]
    print(f"({bq}, {bk}, {warps}, {stages}): Triton {triton.__version__} {now.shared_bytes:,.0f} "
          f"bytes ({'fits' if now.shared_bytes <= now.max_shared_bytes else 'does not fit'} "
          f"{now.max_shared_bytes:,.0f}) against Triton 3.6's {then:,} on the H100")

# %% [markdown]
# Shared memory grows with the tiles that the inner loop streams, one copy per pipeline stage:
# K and V in the forward and dQ kernels (it grows with `block_k`), Q and dO in the dK/dV kernel
# (it grows with `block_q`). In these configurations warps and stages always come in the same
# pairs (the table above), so it cannot tell the two apart. The targets' limits differ (printed
# above, for the targets compiled here), and so do their binaries for the same configuration. A configuration over the limit
# cannot launch on that GPU; Triton's autotuner would score it as failed at its first try,
# `flash_triton.configs_that_fit` (the autotuner's prune step, which compiles each
# configuration for the GPU at hand) drops it before any benchmarking and gives one clear error
# if nothing fits. Configurations that spill registers stay candidates: the autotuner measures
# them and keeps one only if it is fastest; read registers together with spills, since ptxas
# may give a kernel few registers and a large stack (`max_stack_bytes` in the summary; the last
# column of the spill counts). None of this ran on a GPU
# here: it is what the compiler produces for one.
#
# ## 4. Speed and memory against naive attention and SDPA
#
# Causal attention, forward, backward and end to end, with TFLOP/s from the FLOP model
# (forward 4·b·n²·d, halved for causal; backward 2.5x). Every row lands in `flash.csv` as soon as
# it is measured; out-of-memory rows are kept.

# %%
configs = attention_configs(implementations=["naive", "sdpa", "flash_torch", "flash_triton",
                                             *yours],
                            batch=batch, head_dims=head_dims, seq_lens=seq_lens, dtypes=dtypes,
                            warmup=warmup, steps=steps, device=dev, causal=True,
                            max_seq_len={**max_seq_len, "yours_pytorch": max_seq_len["flash_torch"],
                                         "yours_triton": max_seq_len["flash_triton"]})
sweep = Sweep(out / "flash.csv", key=list(configs[0]),
              metadata=provenance)
bench = sweep.run(configs, measure_attention, resume=resume and not adapters)  # yours: always anew
bench.assign(peak_MiB=bench["peak_bytes"] / MiB)[
    ["implementation", "dtype", "head_dim", "seq_len", "status", "forward_s", "forward_unstable",
     "backward_s", "end_to_end_s", "end_to_end_unstable", "end_to_end_tflops", "peak_MiB",
     "speed_measurement"]]

# %%
timed = bench[(bench["status"] == "ok") & bench["speed_measurement"].astype(bool)]
fig = plot_attention_sweep(timed[timed["head_dim"] == max(head_dims)],
                           {"end_to_end_s": f"forward + backward (s), d={max(head_dims)}",
                            "peak_bytes": f"peak memory (bytes), d={max(head_dims)}"},
                           hue="implementation", style="dtype")
save_figure(fig, out / "flash_benchmark.png");

# %%
largest = timed[timed["seq_len"] == timed["seq_len"].max()]
ratios_to(largest, "sdpa", "end_to_end_s", index=("dtype", "head_dim", "seq_len"))

# %% [markdown]
# The sweep measured each implementation on its own; to conclude, each implementation takes
# turns against naive attention at the largest length both of them ran
# (`perflab.bench.compare`, `max(steps, 6)` rounds of causal forward + backward, float32, 6
# being the fewest that can give a 95% verdict; the Triton kernel only where it is compiled,
# not interpreted). The sweep's separate medians above carry `unstable` flags; where the two
# disagree, the interleaved verdict is the one to trust, and `perflab check-results` flags a
# shown sweep row that contradicts it.

# %%
longest = timed.groupby("implementation")["seq_len"].max()
contenders = ["sdpa", "flash_torch"] + ([] if INTERPRETED else ["flash_triton"])
contenders += [name for name in yours if name == "yours_pytorch" or not INTERPRETED]
pair_len = {name: int(min(longest["naive"], longest[name])) for name in contenders}
speed = pd.DataFrame([
    compare_attention("naive", name, batch=batch, seq_len=pair_len[name],
                      head_dim=max(head_dims), device=dev, causal=True, rounds=max(steps, 6),
                      warmup=warmup).as_row() | {"seq_len": pair_len[name]}
    for name in contenders
])
save_table(speed, out / "against_naive.csv", provenance)
for row in speed.itertuples():
    print(conclude(out, f"{row.b} vs naive", describe_ratio(
        "naive", row.b, row.ratio_b_over_a, (row.ci_low, row.ci_high),
        confidence=row.confidence), verdict=row.verdict)
        + f" (b={batch}, n={row.seq_len}, d={max(head_dims)}, causal)")

# %% [markdown]
# The verdicts above are this device's. On a CPU the tiled PyTorch version pays Python overhead
# for every tile; its point there is memory (section 5). Where the compiled Triton kernel
# stands against SDPA on a GPU is what `perflab run 06 --full` on a GPU measures.
#
# **The same sweep on other devices.** Results this notebook measured elsewhere and committed
# under `data/results/06_flash_attention/` (on a CPU run: an H100's rows, from a short lease:
# bfloat16, d = 64, causal; see `data/GPU_CHECKS.md`). These are separate medians, not an
# interleaved comparison, so they carry no verdict: read them as the ratios they are.

# %%
for slug, rows in results_elsewhere("06_flash_attention", "flash.csv", dev).items():
    there = rows[rows["status"] == "ok"]
    print(f"{slug}: {there.attrs['source']}")
    display(ratios_to(there, "sdpa", "end_to_end_s", index=("dtype", "head_dim", "seq_len")))
    shaky = there[there["forward_unstable"].astype(bool) | there["end_to_end_unstable"].astype(bool)]
    print("unstable there (IQR above 25% of the median; read their ratios with care): "
          + (", ".join(f"{r.implementation} n={r.seq_len}" for r in shaky.itertuples()) or "none"))
    top = there[there["seq_len"] == there["seq_len"].max()].set_index("implementation")
    print("at n =", int(top["seq_len"].iloc[0]), "forward + backward:",
          ", ".join(f"{name} {r.end_to_end_s * 1e3:.2f} ms ({r.end_to_end_tflops:.0f} TFLOP/s)"
                    for name, r in top.iterrows()))
    by_length = there.pivot_table(index="seq_len", columns="implementation", values="end_to_end_s")
    if {"sdpa", "flash_triton"} <= set(by_length.columns):
        pairs = by_length[["sdpa", "flash_triton"]].dropna()
        speed = pairs["sdpa"] / pairs["flash_triton"]
        print(f"flash_triton's speed as a share of SDPA's there: "
              + ", ".join(f"n={n}: {s:.2f}x" for n, s in speed.items())
              + (f"; SDPA was faster at every one of the {len(speed)} lengths"
                 if (speed < 1).all() else "")
              + " (separate medians, not interleaved: no verdict)")

# %% [markdown]
# ## 5. Memory at a long context
#
# Batch `memory_batch`, sequence `memory_seq_len`, d `memory_head_dim`, float32, forward +
# backward. (The Triton interpreter is left out on a CPU: its times at 128 tokens in section 4
# show why.)

# %%
implementations = ["naive", "sdpa", "flash_torch"] + ([] if INTERPRETED else ["flash_triton"])
implementations += [name for name in yours if name == "yours_pytorch" or not INTERPRETED]
memory = pd.DataFrame([
    attention_peak_memory(name, memory_batch, memory_seq_len, memory_head_dim, dev)
    for name in implementations
])
memory["peak_MiB"] = memory["peak_bytes"] / MiB
memory["held_MiB"] = memory["held_before_backward_bytes"] / MiB
save_table(memory, out / "long_context_memory.csv", provenance)
memory

# %%
peaks = memory.set_index("implementation")["peak_bytes"]
print(f"b={memory_batch}, n={memory_seq_len}, d={memory_head_dim}: "
      f"FlashAttentionTorch peak / naive peak = {peaks['flash_torch'] / peaks['naive']:.3f}; "
      f"the (b x n x n) float32 scores alone take "
      f"{memory_batch * memory_seq_len**2 * 4 / MiB:.0f} MiB")

# %% [markdown]
# Naive attention holds the whole score matrix; the tiled version holds one tile of scores at a
# time plus the output and one logsumexp per query, so its memory grows linearly with the
# sequence length instead of quadratically.
#
# ## Where the results are

# %%
for path in sorted(out.iterdir()):
    print(display_path(path))

# %% [markdown]
# **Do these results contradict themselves?** `perflab check-results` (notebook 01 lists its
# rules; CI runs it over `data/results`):

# %%
findings = check_results(out)
print(f"{len(findings)} contradictions in {display_path(out)}")
findings
