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
# (`FlashAttentionTriton`: one program per batch element and query tile, the key tiles in an
# unmasked stage and a masked one, base-2 exponentials, the logsumexp saved, a backward in three
# launches without atomics). Both are checked against a float64 reference; section 3 shows what
# the kernels' structure costs in machine instructions and host work, then both are measured
# against naive attention and PyTorch's `scaled_dot_product_attention`.
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
speed_heads = [1, 16]                 # section 4, compiled Triton only: heads (the batch of one sequence),
speed_seq_lens = [1024, 4096, 16384]  # and lengths against SDPA (16 heads at 16,384: the 2025 leaderboard's case)
memory_batch = 4                      # the long-context memory comparison: batch,
memory_seq_len = 1024                 # sequence length (causal),
memory_head_dim = 64                  # head dimension
memory_dtype = "float32"              # and dtype
memory_implementations = ["naive", "sdpa", "flash_torch", "flash_triton"]  # compared there (Triton where compiled)
kernel_targets = ["sm_90"]            # GPU architectures to compile the Triton kernels for
kernel_dtypes = ["fp16"]              # their input dtypes: fp16, bf16, fp32
kernel_causal = [True]                # causal flags compiled (the full profile adds False)
structure_targets = ["sm_90"]         # targets of the plain-against-lean forward comparison
device = "auto"                       # "cuda" when present, else "cpu"
resume = True                         # skip configurations already in this device's results file
adapters = None                       # your course tests/adapters.py (or a module): checked and timed beside perflab's

# %%
import pandas as pd
import torch
from IPython.display import Markdown

from perflab.lessons.nb06_flash_attention import (
    CHECK_CONFIG,
    INTERPRETED,
    SOURCES,
    WEIGHTED_SUM_SOURCES,
    FlashAttentionTorch,
    FlashAttentionTriton,
    Sweep,
    WeightedSumTriton,
    attention_configs,
    attention_of_yours,
    attention_peak_memory,
    checks_line,
    comparison_frame,
    compile_line,
    compile_table,
    conclude_all,
    flash_speed,
    host_call_table,
    implementation_checks,
    jobs,
    kept_table,
    kernel_source,
    listing,
    measure_attention,
    open_notebook,
    parse_dtype,
    pinned_config,
    plot_attention_sweep,
    ratios_to,
    results_elsewhere,
    say,
    structure_cost,
    structure_findings,
    summary,
    weighted_sum_line,
)

MiB = 2**20
nb = open_notebook("06_flash_attention", globals(), device=device, yours=adapters)
dev, out, provenance = nb.device, nb.out, nb.provenance
print(f"on {dev}; Triton {'interpreted (not a speed measurement)' if INTERPRETED else 'compiled'}")

# %% [markdown]
# ## 1. A first Triton kernel: the weighted sum
#
# `y = x @ w` for x (rows, D) and w (D,): each program sums ROWS rows, walking D in chunks with
# masks. The backward writes dx = dy w^T and one partial dw per program, summed afterwards (no
# atomics). The forward kernel, as the library defines it:

# %%
Markdown(f"```python\n{kernel_source(WEIGHTED_SUM_SOURCES['forward'])}```")

# %% [markdown]
# Checked against PyTorch in float64:

# %%
# NBVAL_CHECK_OUTPUT
print(weighted_sum_line(WeightedSumTriton, dev))

# %% [markdown]
# ## 2. Correctness of both FlashAttention implementations
#
# The Triton forward kernel: each program owns one tile of queries and streams the key tiles
# past it, keeping the running maximum `row_max`, the running sum `row_sum` and the
# unnormalised output `acc` in registers (the online softmax: each new tile rescales them by
# `correction`), and writes the output and the logsumexp once at the end. The key tiles come in
# two stages: those every query of the tile sees in full, with no mask at all, then the few that
# need one (the causal diagonal, the ragged last tile). Whether a length is a multiple of the
# tile is a compile-time flag (`EVEN_Q`, `EVEN_K`), so aligned lengths compile no bounds checks;
# exponentials are base 2 with the softmax scale folded into one multiply-add. The kernel, and
# the loop it runs twice:

# %%
Markdown(f"```python\n{kernel_source(SOURCES['forward'])}\n{kernel_source(SOURCES['forward stage'])}```")

# %% [markdown]
#
# Fresh random inputs, lengths that are not multiples of the tiles, different query and key
# lengths, causal and not; errors are the largest difference from the float64 reference
# divided by max(1, largest reference value), against the tolerance of the input dtype
# (float32: 2e-5 for outputs and logsumexp, 5x for gradients; float16: 2e-3).
# On a GPU each Triton kernel runs with one pinned configuration (`CHECK_CONFIG`: the first
# one `flash_configs` keeps for the head dimension and dtype) instead of being autotuned: tuning
# compiles every kept configuration of the kernels for each new shape class (section 3's
# `compile_s` says how long a compile takes), which is right for the benchmark below and far
# too slow for a dozen odd shapes. The test suite checks every autotune configuration this way.

# %%
cases = [(1, 17, 40, 16, True), (2, 129, 100, 32, False), (1, 100, 129, 64, True), (1, 1, 33, 32, False)]
check_dtypes = [torch.float32, torch.float16] + ([torch.bfloat16] if dev.type == "cuda" else [])
with pinned_config(CHECK_CONFIG):
    checks = implementation_checks({"flash_torch": FlashAttentionTorch,
                                    "flash_triton": FlashAttentionTriton}, cases, check_dtypes, dev)
checks

# %%
# NBVAL_CHECK_OUTPUT
print(checks_line(checks))

# %% [markdown]
# **Yours** (with `-p adapters PATH`): `perflab check --adapters`'s attention checks on your
# implementation (output, saved log-sum-exp and gradients against float64 on odd shapes; the
# Triton kernels it launches compiled for sm_80 and sm_90). Only an implementation whose
# attention checks all pass is timed in sections 4 and 5 (a kernel that fails to compile for a
# GPU still runs in the interpreter; its row says so).

# %%
yours, yours_lines = attention_of_yours(adapters, out, provenance, dev,
                                        parts=("attention", "kernels"), interpreted_too=True)
print("\n".join(yours_lines))

# %% [markdown]
# ## 3. The kernels compiled for real GPUs, on this machine
#
# The interpreter runs the kernels but does not type-check them as the compiler does: a variable
# whose shape changes inside an `if` (the causal mask once did) runs fine here but fails to
# compile for a GPU, which is what the compiles below check. Triton's CUDA backend, with the
# `ptxas` shipped in its wheel, compiles every kernel to a GPU binary for a named architecture
# without any GPU, so here every kernel is compiled for each target and each configuration the
# autotuner may pick (head dimension 128, the largest; causal by default, non-causal too in the
# full profile and the tests). From each binary: registers per thread, spill stores
# (local-memory instructions in the machine code), shared memory per block against the target's
# limit, the strides widened to 64 bits, and the machine (SASS) instructions of each loop:
# `main_loop_instructions` is one trip of the unmasked stage, the cost of one tile.
# (`perflab kernels --target sm_80 sm_90 sm_100 --summary` prints the same.)

# %%
compiled = compile_table(jobs(targets=kernel_targets, dtypes=kernel_dtypes, head_dims=(128,),
                              causal=kernel_causal))
nb.save(compiled, "compiled_kernels.csv")
summary(compiled)

# %%
# NBVAL_CHECK_OUTPUT
print(compile_line(compiled))

# %% [markdown]
# Which configurations the autotuner may pick is decided once, on a CPU, by compiling every
# candidate (tiles of 32 to 128, 4 or 8 warps, 2 to 4 pipeline stages) for sm_80, sm_90 and
# sm_100 and keeping, per kernel and head dimension, only those that spill nothing and fit
# every target's shared memory (`perflab.implementations.attention.flash_configs`, which explains the rule and
# how to run the search again; the tests compile every kept one). A configuration that spills
# trades registers for local-memory traffic in the hot loop; one over the limit cannot launch.
# At head dimension 128:

# %%
kept = kept_table(128)
kept.assign(config=kept["num_warps"].astype(str) + "w " + kept["num_stages"].astype(str) + "s"
            ).pivot(index=["block_q", "block_k"], columns="kernel", values="config")

# %% [markdown]
# ### What the structure costs
#
# The same algorithm written as one first writes it (`flash_triton_plain`: one loop, every mask
# on every tile, a run-time branch for the diagonal, `exp` with the scale apart) against the lean
# forward, compiled alike (one 64 x 64 configuration, 4 warps, 3 stages, causal, ragged lengths),
# one row per kernel and target: each loop's instructions (the plain kernel has one loop; the
# lean one an unmasked stage, then a masked one), registers and spills.

# %%
structure = structure_cost(structure_targets)
nb.save(structure, "structure_cost.csv")
structure

# %%
print("\n".join(structure_findings(structure)))

# %% [markdown]
# And on the host: what one forward and one backward of each implementation launch and call,
# counted after a first call (which autotunes on a GPU). The Triton forward launches one kernel,
# the backward three (D = rowsum(dO * O), then dK and dV, then dQ), and PyTorch does nothing but
# allocate their outputs; the tiled PyTorch version calls operators for every tile.

# %%
# NBVAL_CHECK_OUTPUT
host_call_table({"flash_triton": FlashAttentionTriton, "flash_torch": FlashAttentionTorch},
                *(torch.randn(2, 64, 64, device=dev) for _ in range(3)))

# %% [markdown]
# ## 4. Speed and memory against naive attention and SDPA
#
# Causal attention, forward, backward and end to end, with TFLOP/s from the FLOP model
# (forward 4·b·n²·d, halved for causal; backward 2.5x). Every row lands in `flash.csv` as soon as
# it is measured; out-of-memory rows are kept.

# %%
configs = attention_configs(
    implementations=["naive", "sdpa", "flash_torch", "flash_triton", *yours], batch=batch,
    head_dims=head_dims, seq_lens=seq_lens, dtypes=dtypes, warmup=warmup, steps=steps, device=dev,
    causal=True, max_seq_len=max_seq_len)  # yours: the limit of perflab's of its kind
sweep = Sweep(out / "flash.csv", key=list(configs[0]), metadata=provenance)
bench = sweep.run(configs, measure_attention, resume=resume and not adapters)  # yours: always anew
bench.assign(peak_MiB=bench["peak_bytes"] / MiB)[
    ["implementation", "dtype", "head_dim", "seq_len", "status", "forward_s", "forward_unstable",
     "backward_s", "end_to_end_s", "end_to_end_unstable", "end_to_end_tflops", "peak_MiB",
     "speed_measurement"]]

# %%
timed = bench[(bench["status"] == "ok") & bench["speed_measurement"].astype(bool)]
d = max(head_dims)
fig = plot_attention_sweep(timed[timed["head_dim"] == d],
                           {"end_to_end_s": f"forward + backward (s), d={d}",
                            "peak_bytes": f"peak memory (bytes), d={d}"},
                           hue="implementation", style="dtype")
nb.figure(fig, "flash_benchmark.png");

# %%
largest = timed[timed["seq_len"] == timed["seq_len"].max()]
ratios_to(largest, "sdpa", "end_to_end_s", index=("dtype", "head_dim", "seq_len"))

# %% [markdown]
# The sweep measured each implementation on its own; to conclude, each implementation takes
# turns against naive attention at the largest length both of them ran
# (`perflab.bench.compare`, `max(steps, 6)` rounds of causal forward + backward in the last of
# `dtypes`, 6 being the fewest that can give a 95% verdict; the Triton kernel only where it is
# compiled, not interpreted). The sweep's separate medians above carry `unstable` flags; where the two
# disagree, the interleaved verdict is the one to trust, and `perflab check-results` flags a
# shown sweep row that contradicts it.

# %%
contenders = ["sdpa", "flash_torch"] + ([] if INTERPRETED else ["flash_triton"])
contenders += [name for name in yours if name == "yours_pytorch" or not INTERPRETED]
speed, speed_findings = say.against_naive(
    contenders, timed.groupby("implementation")["seq_len"].max(), batch, max(head_dims), dev,
    dtypes[-1], rounds=max(steps, 6), warmup=warmup)  # dtypes[-1]: the GPU's bfloat16 in the full profile
nb.save(speed, "against_naive.csv")
print("\n".join(conclude_all(out, speed_findings)))

# %% [markdown]
# The verdicts above are this device's. On a CPU the tiled PyTorch version issues many small
# operators per tile (counted above, not timed one by one): a likely part of its time, not
# measured here; its point there is memory (section 5).
#
# **The compiled Triton kernels against SDPA** (a GPU only: the interpreter measures nothing
# about speed): forward + backward at each of `speed_heads` heads of one sequence and
# `speed_seq_lens`, causal, bfloat16, d = 64 (16 heads at 16,384 tokens is the 2025 FA2
# leaderboard's case, timed there on an H100): the device time per call
# (`triton.testing.do_bench`), the host time per call (calls issued without waiting: what the
# Python path costs), TFLOP/s, and each against SDPA interleaved, with verdicts.

# %%
if INTERPRETED or not speed_seq_lens:
    print("the Triton kernels are interpreted here: no speed to measure (a GPU runs this)")
else:
    speed_rows, against_sdpa = flash_speed(
        ["sdpa", "flash_triton", "flash_torch"], heads=speed_heads, seq_lens=speed_seq_lens,
        head_dim=64, dtype="bfloat16", device=dev, rounds=max(steps, 6),
        max_seq_len={"flash_torch": max_seq_len.get("flash_torch")})  # None: no limit
    nb.save(speed_rows, "flash_speed.csv")
    nb.save(comparison_frame(against_sdpa), "flash_vs_sdpa.csv")
    print("\n".join(conclude_all(out, say.against_sdpa_findings(against_sdpa))))
    display(speed_rows)

# %% [markdown]
# **The same on other devices.** Results this notebook measured elsewhere and committed under
# `data/results/06_flash_attention/<gpu>/` (see `data/GPU_CHECKS.md`), shown on any machine:
# the tables are separate medians, not an interleaved comparison, so they carry no verdict; the
# last lines are the GPU smoke command's comparison (`.ci/gpu-check smoke`), interleaved there,
# each with its verdict. Each source line says whether the library that measured the rows is
# the one running here: the H100 rows timed the kernels before their rewrite (commit
# fd8348d), so they describe older code than this notebook's.

# %%
for slug, rows in results_elsewhere("06_flash_attention", "flash.csv", dev).items():
    there = rows[rows["status"] == "ok"]
    print(f"{slug}: {there.attrs['source']}")
    display(ratios_to(there, "sdpa", "end_to_end_s", index=("dtype", "head_dim", "seq_len")))
for slug, rows in results_elsewhere("06_flash_attention", "flash_speed.csv", dev).items():
    print(f"{slug}: {rows.attrs['source']}")
    display(rows)
print("\n".join(say.smoke_comparisons_elsewhere(dev)))

# %% [markdown]
# ## 5. Memory at a long context
#
# Batch `memory_batch`, sequence `memory_seq_len`, d `memory_head_dim`, in `memory_dtype`,
# causal, forward + backward, for `memory_implementations` (the full profile leaves out the
# tiled PyTorch version, a Python loop over tiles whose work grows as the square of the
# sequence: `perflab.settings` names the results folder with its time at 1024 on an H100); the
# Triton interpreter is left out on a CPU (its times at 128 tokens in section 4 show why).

# %%
implementations = [name for name in [*memory_implementations, *yours]
                   if not (INTERPRETED and name in ("flash_triton", "yours_triton"))]
memory = pd.DataFrame([attention_peak_memory(name, memory_batch, memory_seq_len, memory_head_dim,
                                             dev, causal=True, dtype=parse_dtype(memory_dtype))
                       for name in implementations])
nb.save(memory, "long_context_memory.csv")
memory.assign(peak_MiB=memory["peak_bytes"] / MiB,
              held_MiB=memory["held_before_backward_bytes"] / MiB)

# %%
print(say.memory_line(memory, memory_batch, memory_seq_len, memory_head_dim, memory_dtype))

# %% [markdown]
# Naive attention holds the whole score matrix; the tiled version holds one tile of scores at a
# time plus the output and one logsumexp per query, so its memory grows linearly with the
# sequence length instead of quadratically.
#
# ## Where the results are

# %%
print(listing(out))

# %% [markdown]
# **Do these results contradict themselves?** `perflab check-results` (notebook 01 lists its
# rules; CI runs it over `data/results`):

# %%
nb.check()
