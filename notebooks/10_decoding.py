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
# # 10 Decoding fast: KV cache, paged KV cache, static shapes, sampling on the device
#
# Training processes a whole sequence at once; generating text does not. After the prompt
# (the **prefill**, one pass over all its tokens), a model produces one token per sequence
# and step (the **decode**), and each step must read every weight of the model for that one
# token. This notebook measures what that costs and what a production inference stack does
# about it:
#
# 1. prefill against decode: time, FLOPs and bytes per token;
# 2. decode tokens/s against batch size, next to the memory-bandwidth roofline, eager and
#    compiled: how close to the roofline a decoder gets;
# 3. the key/value cache: none, contiguous, **paged** (block tables, as in vLLM), every mode
#    checked to decode exactly like recomputing the whole sequence;
# 4. the KV memory a batch of very unequal requests needs, paged against contiguous, and the
#    block size's trade-off;
# 5. static shapes and graph capture: the decode step under `torch.compile` (on CUDA,
#    `mode="reduce-overhead"` replays it as a CUDA graph), what a step with growing shapes
#    costs the compiler, and where the compiled step's time goes (a profile);
# 6. rotary tables computed once against every step; sampling on the device (how many bytes
#    cross to the host per token).
#
# The library is `perflab.decode`: `generate(model, prompts, max_new_tokens, cache=...)`, the
# caches, the fixed-shape `StaticDecoder`, the cost formulas (`costs`) and the measurements
# (`bench`, `roofline`). One configuration against its roofline from the command line:
# `perflab bench --mode decode --preset cpu-small --batch-size 1 --context-length 128 --compile`.
# On a CPU it runs a small model within the workbook's budget; the full profile
# (`perflab run 10 --full`) decodes the leaderboard's 8B-class model in bfloat16 on a GPU.

# %% tags=["parameters"]
preset = "cpu-small"                          # the model decoded (full: leaderboard-8B)
dtype = "float32"                             # its parameters' dtype (full: bfloat16)
prompt_len = 128                              # section 1: the prompt prefilled, and the decode step's context
context = 128                                 # tokens of context of every timed decode step
batch_sizes = [1, 2, 4, 8, 16]                # section 2: sequences decoded together
steps = 20                                    # timed steps per measurement (6 at least, for a 95% interval; a decode step takes milliseconds)
rounds = 6                                    # interleaved rounds of every comparison (6: the fewest that reach 95%)
cache_prompt_lens = [5, 40, 12, 90]           # section 3: prompts of unequal lengths
cache_new_tokens = 6                          # new tokens per prompt
cache_rounds = 6                              # interleaved rounds of the cache comparison (fewer cannot reach a verdict)
kv_preset = "cpu-tiny"                        # section 4: the model whose KV memory is measured
kv_prompt_lens = [12, 400, 30, 150, 6, 250, 60, 20]  # a batch of very unequal requests: prompt lengths
kv_new_tokens = [40, 8, 64, 16, 48, 4, 24, 32]       # and new tokens of each
block_sizes = [1, 4, 16, 64]                  # tokens per block of the paged cache
compile_preset = "cpu-small"                  # section 5: the model compiled
compile_batch = 1                             # sequences of the fixed-shape step
compile_mode = "auto"                         # "reduce-overhead" (CUDA graphs) on CUDA, the default elsewhere
compile_calls = 6                             # decode steps traced to count compilations
device = "auto"                               # "cuda" when present, else "cpu"

# %%
import pandas as pd
import torch

from perflab.bench.checks import check_results
from perflab.bench.peak import measure_copy_bandwidth, measure_peak_matmul
from perflab.bench.stats import level_text
from perflab.decode import CACHES, generate
from perflab.decode.bench import (
    PARTS,
    compare_caches,
    compare_rotary_tables,
    compare_sampling_place,
    compile_static_step,
    count_compilations,
    kv_memory,
    prefill_vs_decode,
    profile_step,
    throughput_by_batch,
)
from perflab.decode.costs import kv_bytes_per_token, matmul_weights
from perflab.decode.inputs import build_model, random_prompts
from perflab.decode.plots import plot_decode_roofline, plot_kv_memory
from perflab.decode.roofline import decode_step
from perflab.device import parse_dtype, resolve_device
from perflab.model import get_preset
from perflab.paths import display_path, results_dir, save_figure, save_table
from perflab.settings import record_settings

MiB = 2**20
dev = resolve_device(device)
param_dtype = parse_dtype(dtype)
config = get_preset(preset)
settings = record_settings("10_decoding", globals())
out = results_dir("10_decoding", dev)
provenance = {"settings": settings}
model = build_model(config, dev, param_dtype)
element = torch.finfo(param_dtype).bits // 8
mode = ("reduce-overhead" if dev.type == "cuda" else None) if compile_mode == "auto" else compile_mode
print(f"{config.name}: {config.num_parameters() / 1e6:.1f} M parameters, "
      f"{matmul_weights(config) * element / MiB:.1f} MiB of matmul weights in {dtype}, "
      f"{kv_bytes_per_token(config, element) / 1024:.1f} KiB of keys and values per token; "
      f"on {dev.type}")

# %% [markdown]
# The two yardsticks of a roofline, measured on this device (not taken from a datasheet): the
# bandwidth of a large copy (bytes read + written per second; the buffers are far larger than
# the caches) and the fastest square matmul. Each is a peak, so each is the best of several runs,
# saved with the median run beside it (`copy_*` and `peak_*` columns).

# %%
bandwidth = measure_copy_bandwidth(dev)
peak = measure_peak_matmul(dev, param_dtype, sizes=(512, 1024) if dev.type == "cpu" else None)
yardsticks = ({f"copy_{key}": value for key, value in bandwidth.as_dict().items()}
              | {f"peak_{key}": value for key, value in peak.as_dict().items()})
save_table(pd.DataFrame([yardsticks]), out / "yardsticks.csv", provenance)
print(f"copy bandwidth {bandwidth.bytes_per_s / 1e9:.1f} GB/s (the best of {bandwidth.steps} "
      f"copies; median {bandwidth.median_bytes_per_s / 1e9:.1f} GB/s), matmul peak "
      f"{peak.flops_per_s / 1e9:.0f} GFLOP/s in {dtype} (the best of {peak.steps} runs at n = "
      f"{peak.size}; median {peak.median_flops_per_s / 1e9:.0f} GFLOP/s): a kernel needs "
      f"{peak.flops_per_s / bandwidth.bytes_per_s:.1f} FLOPs per byte to be compute-bound")

# %% [markdown]
# ## 1. Prefill against decode
#
# One sequence: its prompt of `prompt_len` tokens prefilled in one pass, against one decode
# step at the same context. The FLOPs and bytes are counted from the shapes
# (`perflab.decode.costs`: 2 FLOPs per matmul weight and token, plus attention over the
# context, with the LM head only where logits are needed: once per prompt, once per decoded
# token; bytes = the weights, read once per pass, plus the keys and values).

# %%
phases = prefill_vs_decode(model, prompt_len, steps=steps)
save_table(phases, out / "prefill_vs_decode.csv", provenance)
phases.round(4)

# %%
by_phase = phases.set_index("phase")
ridge = peak.flops_per_s / bandwidth.bytes_per_s  # FLOPs per byte where the two bounds meet


def bound_of(phase: str) -> str:
    return "compute" if by_phase.loc[phase, "flops_per_byte"] > ridge else "memory"


per_token = by_phase.loc["decode", "s_per_token"] / by_phase.loc["prefill", "s_per_token"]
print(f"a decoded token takes {per_token:.0f}x the time of a prefilled one (medians of {steps}): "
      f"prefill does {by_phase.loc['prefill', 'flops_per_byte']:.0f} FLOPs per byte of weights "
      f"and KV, decode {by_phase.loc['decode', 'flops_per_byte']:.2f}, "
      + ("below" if by_phase.loc["decode", "flops_per_byte"] < ridge else "above")
      + f" the {ridge:.1f} this device needs to be compute-bound: by the roofline, decode at "
      "batch 1 is bound by " + bound_of("decode") + ", prefill by " + bound_of("prefill")
      + " (the time ratio is of two medians, not an interleaved comparison)")

# %% [markdown]
# ## 2. Decode tokens/s against batch size, and the roofline
#
# A decode step reads every matmul weight once, whatever the batch: more sequences per step
# share that read. The roofline bounds tokens/s by the lower of
# `batch × bandwidth / bytes per step` (weights + each sequence's keys and values) and
# `peak / FLOPs per token`. Each point is `batch / median step time` at a context of
# `context` tokens, with the median's interval at the level its `steps` samples give (printed
# below the table). An unstable point (`unstable`: IQR above 25%
# of the median) is drawn hollow.
#
# The step is the fixed-shape one (`StaticDecoder`, section 5): run eagerly, and compiled by
# `torch.compile` (the default mode on a CPU; on CUDA `mode="reduce-overhead"`, a CUDA graph).
# The bandwidth is a copy of buffers far larger than the caches; a model whose weights fit in
# the last-level cache can read them faster than that, so a share of the roofline above 100%
# would mean the weights came from the cache, not an error.

# %%
throughput = throughput_by_batch(model, batch_sizes, context, bandwidth.bytes_per_s,
                                 peak.flops_per_s, compiled=(False, True), mode=mode, steps=steps)
save_table(throughput, out / "decode_throughput.csv", provenance)
fig = plot_decode_roofline(throughput, dev.type)
save_figure(fig, out / "decode_roofline.png")
print(f"error bars: the median's {', '.join(sorted({level_text(v) for v in throughput['median_ci_level']}))} "
      f"interval ({steps} steps); unstable points: {int(throughput['unstable'].sum())} of {len(throughput)}")
throughput[["batch", "step", "median_s", "unstable", "tokens_per_s", "memory_bound_tokens_per_s",
            "compute_bound_tokens_per_s", "fraction_of_roofline"]].round(3)

# %%
share = throughput.pivot(index="batch", columns="step", values="fraction_of_roofline")
gain = share["compiled"] / share["eager"]  # the same roofline: the ratio of tokens/s
fastest = throughput.loc[throughput.groupby("batch")["tokens_per_s"].idxmax()].set_index("batch")
first_batch, last_batch = fastest.index[0], fastest.index[-1]
best, last = fastest.loc[first_batch], fastest.loc[last_batch]
print("share of the roofline per batch, eager -> compiled: "
      + "; ".join(f"{b}: {r['eager']:.0%} -> {r['compiled']:.0%}" for b, r in share.iterrows()))
print(f"batch {first_batch}: the fastest step is the {best['step']} one, {best['tokens_per_s']:.0f} "
      f"tokens/s, {best['fraction_of_roofline']:.0%} of its {best['bound']}-bound roofline "
      f"({best['roofline_tokens_per_s']:.0f} tokens/s); batch {last_batch}: {last['tokens_per_s']:.0f} "
      f"tokens/s ({last['tokens_per_s'] / best['tokens_per_s']:.1f}x), "
      f"{last['fraction_of_roofline']:.0%} of a roofline that is {last['bound']}-bound there. "
      + (f"At batch {first_batch} the {best['step']} step reaches half its roofline or more."
         if best["fraction_of_roofline"] >= 0.5 else
         f"At batch {first_batch} even the fastest step stays below half its roofline.")
      + (f" Compiling gains most at batch {gain.idxmax()} ({gain.max():.2f}x the eager "
         f"tokens/s, {gain.min():.2f}x at batch {gain.idxmin()}): the eager step pays a fixed "
         "cost per operator call whatever the batch (section 5's profile counts the calls), "
         "which weighs most where the step is smallest."
         if gain.idxmax() == first_batch else
         f" Compiling gains {gain.loc[first_batch]:.2f}x the eager tokens/s at batch "
         f"{first_batch} and most at batch {gain.idxmax()} ({gain.max():.2f}x)."))

# %% [markdown]
# The batch-1 eager decode step is timed twice in this notebook: in section 1 (at `prompt_len`
# tokens of context) and here (at `context`). The two are separate medians taken at different
# moments, not interleaved, so how far apart they lie shows how much two such medians of the
# same work can differ on this machine:

# %%
if 1 in batch_sizes and prompt_len == context:
    in_1 = by_phase.loc["decode"]
    in_2 = throughput[throughput["step"] == "eager"].set_index("batch").loc[1]
    apart = in_2["median_s"] / in_1["median_s"]

    def shown(row):
        return (f"{row['median_s'] * 1e3:.2f} ms ({level_text(row['median_ci_level'])} CI "
                f"{row['median_ci_low_s'] * 1e3:.2f}–{row['median_ci_high_s'] * 1e3:.2f} ms"
                + (", unstable)" if row["unstable"] else ")"))

    overlap = (in_1["median_ci_low_s"] <= in_2["median_ci_high_s"]
               and in_2["median_ci_low_s"] <= in_1["median_ci_high_s"])
    print(f"the batch-1 decode step at {context} tokens: {shown(in_1)} in section 1, "
          f"{shown(in_2)} here; the second is {apart:.2f}x the first ({apart - 1:+.0%}), and "
          + ("their intervals overlap" if overlap else "their intervals do not overlap")
          + ". Separate, non-interleaved measurements of the same work: a gap of this size "
          "is how far apart two such medians lie here, and medians from different cells should "
          "not be compared more finely than that.")
else:
    print(f"not compared: section 1 decodes at {prompt_len} tokens of context and section 2 at "
          f"{context}" + ("" if 1 in batch_sizes else ", without batch 1"))

# %% [markdown]
# ## 3. The KV cache: none, contiguous, paged
#
# Without a cache, every step runs the whole sequence again. A **contiguous** cache keeps each
# layer's keys and values, preallocated for every sequence to the longest length the batch
# can reach. A **paged** cache (`PagedKVCache`) keeps them in fixed-size blocks from a shared
# pool, each sequence's blocks listed in its block table, taken as it grows and returned
# when it finishes. First the check that matters most: every mode decodes exactly the tokens
# of full recomputation (a random float64 model, prompts of unequal lengths, greedy and
# sampled with a seeded generator; `tests/test_decode.py` checks more).

# %%
# NBVAL_CHECK_OUTPUT
check_model = build_model(get_preset("cpu-tiny"), dev, torch.float64, seed=1)
check_prompts = random_prompts(check_model.config.vocab_size, [3, 17, 1, 9], seed=1)
for sampling in ({}, {"temperature": 1.0, "top_k": 20}):
    decoded = {cache: generate(check_model, check_prompts, [6, 2, 5, 4], cache,
                               generator=torch.Generator(device=dev).manual_seed(0), **sampling)
               for cache in CACHES}
    print(f"{'sampled' if sampling else 'greedy'}: every cache decodes like full recomputation:",
          all(tokens == decoded["none"] for tokens in decoded.values()))

# %%
prompts = random_prompts(config.vocab_size, cache_prompt_lens)
caches = compare_caches(model, prompts, cache_new_tokens, rounds=cache_rounds)
save_table(caches, out / "cache_modes.csv", provenance)
caches[["a", "b", "tokens_per_s_a", "tokens_per_s_b", "ratio_b_over_a", "ci_low", "ci_high",
        "verdict"]].round(3)

# %%
for row in caches.itertuples():
    print(row.sentence)
print("tokens/s per mode, the median of its rounds in each comparison: "
      + "; ".join(f"{row.a} {row.tokens_per_s_a:.0f} and {row.b} {row.tokens_per_s_b:.0f}"
                  for row in caches.itertuples()))

# %% [markdown]
# The paged cache gathers each sequence's blocks through its block table, per sequence and
# layer, in Python here; on a GPU, PagedAttention reads the blocks inside the attention kernel.
# What paging is for is memory, next.
#
# ## 4. KV memory for a batch of very unequal requests
#
# The batch below mixes short and long prompts and short and long answers. The contiguous
# cache must reserve the longest sequence for every row; the paged cache holds only the
# blocks in use, and a sequence that finishes gives its blocks back. Measured from the caches
# while `generate` runs (`kv_memory`): the contiguous cache's allocation, the paged cache's
# most blocks in use, and the most bytes that held tokens at once.

# %%
kv_model = model if kv_preset == preset else build_model(get_preset(kv_preset), dev, param_dtype)
kv = kv_memory(kv_model, kv_prompt_lens, kv_new_tokens, block_sizes)
save_table(kv, out / "kv_memory.csv", provenance)
fig = plot_kv_memory(kv)
save_figure(fig, out / "kv_memory.png")
kv.assign(kv_MiB=kv["kv_bytes"] / MiB)[["cache", "block_size", "kv_MiB", "table_entries",
                                        "waste", "vs_contiguous"]].round(3)

# %%
# NBVAL_CHECK_OUTPUT
requests = list(zip(kv_prompt_lens, kv_new_tokens, strict=True))
print(f"{len(requests)} requests (prompt, new tokens): {requests}")
contiguous_row, paged = kv.iloc[0], kv.iloc[1:].set_index("block_size")
best_block = int(paged["kv_bytes"].idxmin())
print(f"contiguous: {contiguous_row['kv_bytes'] / MiB:.2f} MiB; paged: "
      + ", ".join(f"{r.kv_bytes / MiB:.2f} MiB with blocks of {int(b)}"
                  for b, r in paged.iterrows())
      + f"; the tokens themselves at the peak: {contiguous_row['peak_token_bytes'] / MiB:.2f} MiB")

# %%
worst_block = int(paged["vs_contiguous"].idxmax())
print(f"the paged cache needs {paged['vs_contiguous'].min():.0%} of the contiguous cache's "
      f"memory with block size {best_block} ({paged.loc[best_block, 'waste']:.0%} of it "
      f"wasted) and {paged['vs_contiguous'].max():.0%} with block size {worst_block} "
      f"({paged.loc[worst_block, 'waste']:.0%} wasted); the contiguous cache wastes "
      f"{contiguous_row['waste']:.0%}. The pool given to the paged cache here held "
      f"{paged['pool_bytes'].max() / MiB:.2f} MiB at most (room for every sequence at its "
      "longest); a server sizes one pool to its memory and shares it, so what this batch "
      "costs it is the peak in use.")

# %% [markdown]
# ## 5. Static shapes and graph capture
#
# `cached_logits` has shapes that grow: the keys read grow by one token per step, and the
# cache's lengths are Python numbers. A compiler specialises a graph to what it saw, so such
# a step is compiled again, or compiled with symbolic shapes. `StaticDecoder` (PyTorch's
# gpt-fast design) fixes every shape: it writes the new key and value at each sequence's
# position in a cache preallocated to the maximum length and attends over all of it, masking
# what lies beyond the position. That is what `torch.compile` needs to compile once, and what
# CUDA graphs need to replay the whole step with one launch (`mode="reduce-overhead"`;
# **GPU-only**: on a CPU the default mode runs).
#
# First how many graphs each kind of step costs over `compile_calls` calls; a counting backend
# stands in for the compiler, so the seconds are dynamo's tracing alone:

# %%
compile_model = (model if compile_preset == preset
                 else build_model(get_preset(compile_preset), dev, param_dtype))
compilations = count_compilations(compile_model, compile_batch, context, compile_calls)
save_table(compilations, out / "compilations.csv", provenance)
compilations.pivot(index="call", columns="shapes", values=["graphs", "seconds"]).round(3)

# %%
# NBVAL_CHECK_OUTPUT
graphs = compilations.groupby("shapes")["graphs"].max()
print(f"over {compile_calls} decode steps: the growing-shape step was traced into "
      f"{graphs['growing']} graphs, the fixed-shape step into {graphs['fixed']}")

# %%
traced = compilations.groupby("shapes")["seconds"].agg(["sum", "median"])
print(f"tracing the growing step took {traced.loc['growing', 'sum']:.1f} s over {compile_calls} "
      f"calls, the fixed one {traced.loc['fixed', 'sum']:.1f} s; a steady call takes about "
      f"{traced.loc['fixed', 'median'] * 1e3:.0f} ms"
      + ("; dynamo reached its recompile limit and runs the step eagerly from there: "
         + compilations.attrs["dynamo_warnings"][0].splitlines()[0]
         if compilations.attrs["dynamo_warnings"] else
         "; after its first recompilation dynamo made the lengths symbolic (automatic dynamic "
         "shapes) and reused that graph, and the cache's lengths, Python values that change at "
         "every step, are guards dynamo checks at every call (on a GPU with "
         "mode=\"reduce-overhead\", every new length would also need a new CUDA graph "
         "recorded: a GPU claim, not measured here, where the counting backend counts dynamo's "
         "graphs only)" if 1 < graphs["growing"] < compile_calls else
         "; the growing step was traced anew at every call" if graphs["growing"] >= compile_calls
         else ""))

# %% [markdown]
# Then the fixed-shape step compiled for real (inductor), against the same step run eagerly:
# the first call includes the compilation.

# %%
compiled = compile_static_step(compile_model, compile_batch, context, rounds=rounds, mode=mode)
save_table(pd.DataFrame([compiled]), out / "compiled_step.csv", provenance)
print(f"mode {compiled['mode']}: first call {compiled['compile_s']:.1f} s (compilation, or "
      "less where inductor finds the kernels in its on-disk cache from an earlier run), then "
      f"{compiled['median_b_s'] * 1e3:.2f} ms a step against {compiled['median_a_s'] * 1e3:.2f} ms "
      f"eager: {compiled['tokens_per_s_compiled']:.0f} against "
      f"{compiled['tokens_per_s_eager']:.0f} tokens/s; {compiled['sentence']}")

# %%
# NBVAL_CHECK_OUTPUT
print("the compiled step picks the same next tokens as the eager one:",
      compiled["same_next_tokens"])

# %% [markdown]
# On a CPU, what compilation can gain comes from inductor's fused C++ kernels: fewer operator
# calls and fewer passes over memory. On a GPU with `mode="reduce-overhead"` the step is also
# one CUDA graph, replayed with one launch instead of one per kernel; what that gains for
# decoding at small batches is what the comparison above measures when it runs on a GPU (not
# run here; on a CPU there are no kernel launches to save).
#
# ### Where the batch-1 step's time goes
#
# A profile of the step of `preset` at `context` tokens (`profile_step`: the self time of every
# CPU operator under `torch.profiler`, per step): at batch 1 eager and compiled, and compiled at
# the largest batch of section 2. Five parts: the
# matmuls (they read the weights, most of the bytes the roofline counts), inductor's fused
# kernels, dynamo's guard checks and wrappers, the other operators, and the Python between
# operators. The profiler adds its own cost, so a profiled step is slower than a timed one. On a
# GPU this is the host's side only (launches, not kernels; notebook 02 profiles the device).

# %%
largest = max(batch_sizes)
profiled = {"eager": (1, False), "compiled": (1, True), f"compiled, batch {largest}": (largest, True)}
profiles = []
for name, (batch, flag) in profiled.items():
    step = decode_step(model, "contiguous", batch, context, compiled=flag, mode=mode)
    profiles.append(profile_step(step, dev).assign(step=name, batch=batch))
    torch._dynamo.reset()  # each compiled step its own graph, as in section 2
profiles = pd.concat(profiles)
save_table(profiles, out / "decode_profile.csv", provenance)
parts = profiles.pivot(index="part", columns="step", values="ms_per_step").loc[list(PARTS), list(profiled)]
calls = profiles.pivot(index="part", columns="step", values="calls_per_step").loc[list(PARTS)]
parts.round(3)

# %%
weights = matmul_weights(config) * element  # bytes every step reads, whatever the batch
at_copy_ms = weights / bandwidth.bytes_per_s * 1e3
matmul_ms, rest = parts.loc["matmuls", "compiled"], parts["compiled"].drop("matmuls")
matmul_rate = weights / (matmul_ms / 1e3)
if dev.type == "cpu":
    print(f"batch 1 compiled, profiled: {parts['compiled'].sum():.2f} ms a step (eager "
          f"{parts['eager'].sum():.2f} ms). The matmuls take {matmul_ms:.2f} ms, reading "
          f"{weights / 1e6:.1f} MB of weights at {matmul_rate / 1e9:.1f} GB/s, "
          f"{matmul_rate / bandwidth.bytes_per_s:.0%} of the copy bandwidth (which would move "
          f"them in {at_copy_ms:.2f} ms); the other {rest.sum():.2f} ms "
          f"({rest.sum() / parts['compiled'].sum():.0%} of the step) are "
          + ", ".join(f"{name} {ms:.2f} ms" for name, ms in rest.items() if ms > 0)
          + f". Eager, the same step made {calls.loc['other operators', 'eager']:.0f} calls to "
          f"other operators per token, {parts.loc['other operators', 'eager']:.2f} ms, and spent "
          f"{parts.loc['Python between operators', 'eager']:.2f} ms in Python between them; "
          f"compiled, those are one call to inductor's fused kernels "
          f"({parts.loc['compiled kernels', 'compiled']:.2f} ms) and "
          f"{calls.loc['other operators', 'compiled']:.0f} small operator calls. What is left "
          "between the compiled step and its roofline is "
          + ("mostly outside the matmuls: the fused kernels, the guards and the Python"
             if rest.sum() > max(matmul_ms - at_copy_ms, 0) else
             "mostly the matmuls reading the weights slower than a copy")
          + ".")
    big = parts[f"compiled, batch {largest}"]
    big_rate = largest * 2 * matmul_weights(config) / (big["matmuls"] / 1e3)
    print(f"at batch {largest}, compiled: the matmuls take {big['matmuls']:.2f} ms of "
          f"{big.sum():.2f}, {big['matmuls'] / matmul_ms:.1f}x their time at batch 1 for "
          f"{largest}x the FLOPs, at {big_rate / 1e9:.0f} GFLOP/s against the {peak.flops_per_s / 1e9:.0f} "
          f"GFLOP/s of the square matmul peak ({big_rate / peak.flops_per_s:.0%}): "
          + (f"with {largest} rows these products are bound neither by reading the weights "
             f"(a copy would take {at_copy_ms:.2f} ms) nor by the peak; the BLAS's kernels for "
             "such thin matrices hold the larger batches below the roofline."
             if big_rate < 0.5 * peak.flops_per_s and big["matmuls"] > 2 * at_copy_ms else
             "close to what reading the weights or the peak allows."))
else:
    print("on a GPU the profile above is the host's side (launches, guards, Python); the "
          "device kernels are in notebook 02's profiles")
timed_ms = throughput[throughput["batch"] == 1].set_index("step")["median_s"] * 1e3
for name in timed_ms.index:
    slower = parts[name].sum() / timed_ms[name]
    print(f"the profiled {name} batch-1 step took {parts[name].sum():.2f} ms, {slower:.1f}x its "
          f"timed median in section 2 ({timed_ms[name]:.2f} ms)"
          + (": more than the profiler's own cost, so the machine was slower while it ran; read "
             "its parts as shares, not as times" if slower > 2 else ""))

# %% [markdown]
# ## 6. Rotary tables, and choosing the next token on the device
#
# The rotary embedding's cos and sin tables are computed once for every position
# (`RotaryEmbedding.precomputed`); computed again at every step they cost a few small kernels.
# And the next token can be chosen where the logits are (`pick`: argmax, or top-k sampling with
# a seeded generator), so that only the ids cross to the host, not the logits.

# %%
rotary = compare_rotary_tables(model, batch_sizes[-1], context, rounds=rounds)
sampling = compare_sampling_place(model, batch_sizes[-1], context, rounds=rounds)
save_table(pd.DataFrame([rotary, sampling]), out / "rotary_and_sampling.csv", provenance)
print(rotary["sentence"])
print(sampling["sentence"])

# %%
# NBVAL_CHECK_OUTPUT
print(f"the same logits with tables computed every step (largest difference below 1e-5): "
      f"{rotary['max_abs_diff'] < 1e-5}")
print(f"the same ids picked on the device and on the host: {sampling['same_ids']}")
print(f"bytes to the host per token: {sampling['device_bytes_per_token']:.0f} (one int64 id) "
      f"against {sampling['host_bytes_per_token']:,.0f} (the logits: {config.vocab_size:,} x "
      f"{element} bytes), {sampling['bytes_ratio']:,.0f}x fewer")

# %% [markdown]
# On a CPU the "host copy" is a memory copy in the same memory; on a GPU it is a transfer over
# PCIe. Both ways wait for the device at every token (the ids must reach the host to decide
# what comes next); what differs is how many bytes cross. Only greedy picking is timed here;
# sampling on the device (`pick` with a temperature and top-k) moves the same one id.
#
# ## What ran here, and what is GPU-only
#
# Everything above ran on this device. Not run on a CPU, written for a GPU: CUDA graphs
# (`mode="reduce-overhead"`, chosen automatically on CUDA), bfloat16 weights, and the
# leaderboard's 8B-class model, which `perflab run 10 --full` decodes:

# %%
# NBVAL_CHECK_OUTPUT
eight_b = get_preset("leaderboard-8B")
print(f"{eight_b.name} in bfloat16: {matmul_weights(eight_b) * 2 / 1e9:.1f} GB of matmul weights "
      f"read per decode step, {kv_bytes_per_token(eight_b, 2) / 1e6:.2f} MB of keys and values "
      f"per token of context ({kv_bytes_per_token(eight_b, 2) * 32768 / 1e9:.1f} GB for one "
      "sequence at its full 32,768-token context)")

# %% [markdown]
#
# ## Where the results are

# %%
for path in sorted(out.iterdir()):
    print(display_path(path))

# %%
findings = check_results(out)
print(f"{len(findings)} contradictions in {display_path(out)}")
findings
