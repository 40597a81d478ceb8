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
# # 09 The fastest training step, one measured change at a time
#
# Everything so far measured one part of training. Here the whole step is taken apart: first
# see where the baseline step spends its time and its memory, then try one optimisation at a
# time on top of the best stack so far, each checked against the baseline (loss, gradients,
# the optimizer's update) and timed against that stack, interleaved, with a verdict; a change
# is kept only when its verdict says it pays off on this machine, and the whole kept stack is
# timed against the baseline with its interval. One change is about
# memory above all: for the 2026 leaderboard's model (vocabulary 151,936, 2 x 32,768 tokens)
# the logits alone take tens of gigabytes (computed below); a fused loss head that never builds
# them whole is one of the changes tried (whether the kept stack has it is printed below).
#
# On a CPU the ladder runs the `cpu-small` model (`batch_size` sequences of `seq_len` tokens a
# step); which changes pay off depends on the machine, and the verdicts say what this one
# measured. Then the data path on real text, and the batch: its size and gradient
# accumulation. The full profile (`perflab run 09 --full`) runs the `small` preset on a GPU,
# and the leaderboard's 8B model sharded over two GPUs (section 6).

# %% tags=["parameters"]
preset = "cpu-small"            # model of the ladder (d 256, 4 layers, vocabulary 10,000)
batch_size = 2                  # sequences per step (full: 4)
seq_len = 128                   # tokens per sequence
phase_steps = 6                 # timed steps of the baseline's phase breakdown
rungs = ["fused QKV", "SDPA", "FlashAttention", "fused loss head", "foreach AdamW", "fused AdamW", "bf16 autocast", "activation checkpointing", "torch.compile"]  # the ladder's candidates, in the order tried
rounds = 6                      # first look of the adaptive rounds of each candidate against the best stack
budget_s = 10                   # seconds each comparison may take: its looks are planned to fit
trace_steps = 2                 # profiled steps of the baseline and each rung tried, for the final table
gqa_kv_heads = 2                # key and value heads of the grouped-query model (the preset's heads: multi-head)
gqa_rounds = 8                  # interleaved rounds of its step against multi-head attention's
head_tokens = 1024              # the loss head's memory benchmark: tokens,
head_vocab = 8000               # vocabulary (full: 32,000)
head_d_model = 256              # and width (float32)
head_chunk_sizes = [32, 128, 512]  # chunk sizes of the fused head's time-against-memory sweep
data_rounds = 6                 # interleaved rounds of the data-path comparison (6: the fewest for a 95% verdict)
loss_batch = 32                 # the loss over a loop of examples against one call: sequences,
loss_seq_len = 64               # tokens each, over the byte vocabulary (256)
bucket_preset = "cpu-tiny"      # the model of the bucketing comparison (its vocabulary: the 256 byte ids)
bucket_sequences = 64           # speeches of the corpus, batched in a random order or by length
bucket_batch = 8                # sequences per batch
batch_seq_len = 128             # tokens per sequence in the batch-size and accumulation sweeps
batch_sizes = [1, 4]            # sequences per step in the batch-size sweep
global_batch = 4                # the accumulation sweep's batch, split into 1, 2, 4, ... micro-batches
sharded_preset = "cpu-tiny"     # section 6: the model of the sharded step (full: leaderboard-8B)
sharded_world_size = 2          # ranks (GPUs, or Gloo processes on a CPU)
sharded_batch_size = 2          # sequences per step, split over the ranks
sharded_seq_len = 64            # tokens per sequence (full: 32,768)
sharded_dtype = "float32"       # compute dtype (full: bfloat16)
sharded_state = "float32"       # master weights, gradients, AdamW state (full: bfloat16)
sharded_steps = 3               # timed steps (full: 5)
sharded_check = True            # also check it against one process (not at 8B)
device = "auto"                 # "cuda" when present, else "cpu"

# %%
import dataclasses
import json

import torch

from perflab.lessons.nb09_training_step import (
    B200,
    BASELINE,
    CPU_DATA_PATHS,
    DATA_PATHS,
    HANDOUT_B200,
    BenchConfig,
    ByteTokenizer,
    Efficiency,
    Recipe,
    StepPlan,
    TrainingStep,
    accumulation_table,
    batch_size_table,
    bound_sentence,
    build_model,
    check_bucketing,
    check_loss_batching,
    chunk_size_sweep,
    compare_bucketing,
    compare_loss_batching,
    compare_with_torch_head,
    conclude,
    conclude_all,
    data_path_steps,
    default_chunk_size,
    get_preset,
    greedy_bound_table,
    greedy_ladder,
    head_peak_memory,
    kv_heads_against_mha,
    listing,
    measure_peak_matmul,
    open_notebook,
    paired_table,
    parse_dtype,
    price_rungs_at,
    read_corpus,
    rung_findings,
    say,
    sharded_step_row,
    speeches,
    stack_against_baseline,
    step_memory,
    step_ops,
    step_phases,
    time_by_part,
)

MiB = 2**20
nb = open_notebook("09_training_step", globals(), device=device)
dev, out = nb.device, nb.out
config = get_preset(preset)
leaderboard = get_preset("leaderboard-8B")
nb.say(say.setup_lines(config, batch_size, seq_len, dev.type, leaderboard))

# %% [markdown]
# ## 1. The baseline step: where the time and the memory go
#
# The baseline is notebook 01's training step with one change: Q, K and V projected by three
# matmuls, as an unfused model would (`BASELINE`; the ladder's first candidate fuses them, as
# notebook 01's model does):
# naive attention, the full logits and `F.cross_entropy`, AdamW looping over the parameters,
# float32. The phases are measured inside each step with synchronised marks (`PhaseClock`), so
# they add up to the step.

# %%
baseline = TrainingStep(config, BASELINE, batch_size, seq_len, dev)
phases = step_phases(baseline, steps=phase_steps)
nb.save(phases, "baseline_phases.csv")
phases.round(3)

# %%
print(say.phase_sentence(phases))

# %% [markdown]
# Memory by category after a step, each measured (the tensors' bytes) next to its formula, and
# the most forward and backward allocate above the parameters and AdamW's state (the
# allocator's record: activations, logits, gradients), then what AdamW's step allocates for
# itself:

# %%
memory = step_memory(baseline)
nb.save(memory, "baseline_memory.csv")
memory.assign(measured_MiB=memory["measured_bytes"] / MiB,
              formula_MiB=memory["formula_bytes"] / MiB).drop(
    columns=["measured_bytes", "formula_bytes"]).round(2)

# %%
# NBVAL_CHECK_OUTPUT
print("every category with a formula matches it:", say.formulas_match(memory))

# %%
print(say.logits_sentence(memory, config))

# %% [markdown]
# ## 2. The loss head without the logits
#
# `fused_linear_cross_entropy(hidden, weight, targets, chunk_size=None)` runs the head in
# chunks of tokens: forward keeps only each token's log-sum-exp, backward recomputes a chunk's
# logits and turns them at once into that chunk's gradients, `(softmax - onehot) / n` times the
# weight and the hidden states (`perflab.implementations.fused_cross_entropy`). At most one chunk's
# logits exist at a time, for one more head matmul. The tests check it against logits +
# `F.cross_entropy` in float64 (every chunking, ignored targets; to 1e-12) and under bf16
# autocast. The memory of one forward + backward of each head, from the allocator's record
# (`full_logits_MiB` is the size of the whole logits, for scale: the fused head never holds
# them):

# %%
head = head_peak_memory(head_tokens, head_vocab, head_d_model, device=device)
nb.save(head, "head_memory.csv")
head.assign(peak_MiB=head["peak_bytes"] / MiB, full_logits_MiB=head["logits_bytes"] / MiB).drop(
    columns=["peak_bytes", "logits_bytes"]).round(3)

# %%
print(say.head_sentence(head, head_tokens, head_vocab, head_d_model))

# %% [markdown]
# **PyTorch's own fused head.** torch 2.13 ships `F.linear_cross_entropy` with a chunked path
# (`torch.nn.LinearCrossEntropyOptions`); its row above is its memory. The tests hold perflab's
# head to it in float64 (loss and both gradients to 1e-12, with and without ignored targets);
# here the two take turns in time, forward + backward at the same size:

# %%
against_torch = compare_with_torch_head(head_tokens, head_vocab, head_d_model, rounds=6,
                                        device=device)
print(conclude(out, "fused head vs torch's linear_cross_entropy", against_torch))

# %% [markdown]
# **Which chunk size?** The default (`DEFAULT_CHUNK_TOKENS`, 128 tokens) was chosen from one
# sweep at three head sizes on another 2-core CPU, not kept (`perflab.implementations.fused_cross_entropy`
# says how), against the formula used before (one chunk's logits the size of the hidden
# states: 32 tokens at 2048 x 32000 x 256). This device's numbers: the fused
# head's time and peak memory at each of `head_chunk_sizes` (larger chunks: fewer, larger
# matmuls; smaller: fewer logits at a time), measured again here:

# %%
chunks = chunk_size_sweep(head_tokens, head_vocab, head_d_model, head_chunk_sizes,
                          device=device)
nb.save(chunks, "head_chunk_sizes.csv")
chunks.assign(median_ms=chunks["median_s"] * 1e3, peak_MiB=chunks["peak_bytes"] / MiB)[
    ["chunk_size", "median_ms", "unstable", "peak_MiB", "peak_over_hidden", "default"]].round(3)

# %%
print(say.chunk_sentence(chunks, default_chunk_size(head_tokens, head_vocab, head_d_model)))

# %% [markdown]
# ## 3. The ladder: keep what helps on this machine
#
# Each change is tried on top of the best stack so far (`perflab.training.ladder.greedy_ladder`)
# and kept only when it makes the step faster, or keeps its time with a lower peak; otherwise
# it is reported and dropped, so a change that does not pay off here cannot slow every rung
# after it. The candidates, in the order tried (`rungs`): Q, K and V projected by one matmul
# instead of three, PyTorch's SDPA and the tiled FlashAttention in PyTorch (on a GPU: the Triton
# kernels) in place of naive attention, the fused loss head, AdamW's `foreach` and `fused`
# implementations (fewer kernels over many tensors), bf16 autocast, activation checkpointing of
# every block (less memory, one more forward), and `torch.compile` (inductor's C++ backend on a
# CPU; its compile time is the first step's, reported apart). Compile comes last on a CPU:
# every change tried on a compiled stack would compile it again, each time costing what the
# compiled rung's first step costs below (`first_step_ms`), many steps' worth. Which changes are kept is
# device-dependent, by what is known of the hardware (not tested here): bf16 is expected to pay
# off with bf16 matrix units (GPU tensor cores; on a CPU, AMX or AVX512-BF16), the Triton
# kernels only where they are compiled, and fewer kernel launches matter most on a GPU; the
# full profile (`--full`) runs the same procedure there.
#
# **Correctness first**: each candidate, on the stack it is tried on, against the baseline on
# the same weights and a fresh batch: the loss, every gradient, and the optimizer's update from
# the same gradients, as relative errors against a stated tolerance (`TOLERANCE`: 1e-4 in
# float32, 5e-2 with bf16, whose mantissa has 8 bits; `UPDATE_TOLERANCE` 1e-3 for the update,
# since float32 parameters near 1 are 1.2e-7 apart, about 1e-4 of an update of lr = 1e-3). In
# the tests every change alone but compile equals the baseline in float64 to 1e-10 (compile:
# float32, 1e-4). A candidate that fails is dropped untimed.
#
# **Then speed and memory**, against the best stack, taking turns (`perflab.bench.compare`:
# the ratio of the paired times, its interval with at least 95% confidence, and a verdict:
# faster, slower, the same within ±3%, or inconclusive), with adaptive rounds from `rounds`,
# doubling until the verdict is conclusive or `budget_s` is spent (the looks are planned from the
# warm-up's time, so that each pays for the looks that fit the budget, not for more: the
# `confidence` column is what the interval holds); `peak_MiB` is the peak of forward and
# backward above the parameters and AdamW's state.

# %%
greedy, stack = greedy_ladder(config, rungs, batch_size, seq_len, dev, rounds=rounds,
                              budget_s=budget_s, trace_dir=out / "traces", trace_steps=trace_steps)
nb.save(greedy.drop(columns=["trace", "trace_base"]), "ladder.csv")
greedy.assign(step_ms=greedy["step_s"] * 1e3, first_step_ms=greedy["first_step_s"] * 1e3,
              peak_MiB=greedy["peak_bytes"] / MiB)[
    ["rung", "tried_on", "matches_baseline", "verdict", "vs_best", "ci_low", "ci_high",
     "confidence", "rounds", "kept", "step_ms", "first_step_ms", "peak_MiB"]].round(3)

# %%
# NBVAL_CHECK_OUTPUT
checked = greedy[greedy["matches_baseline"].notna()]
print(checked[["rung", "matches_baseline"]].to_string(index=False))

# %%
nb.say(say.ladder_sentences(greedy, stack.name, memory, phases, batch_size, seq_len,
                                     phase_steps))

# %% [markdown]
# **The kept stack against the baseline**, taking turns in the same rounds: the ladder's verdict
# as a whole, with its interval. MFU is the model's training FLOPs per second (notebook 01's
# count, 3x the forward's matmuls) over this device's measured matmul peak (the best of several
# runs of the largest square matmul, `measure_peak_matmul`), for both steps.

# %%
whole = stack_against_baseline(config, stack, batch_size, seq_len, dev, rounds=rounds,
                               budget_s=budget_s)
peaks = {d: measure_peak_matmul(dev, parse_dtype(d)) for d in dict.fromkeys(["float32", stack.dtype])}
print(conclude(out, "kept stack vs baseline", whole))
print(say.stack_sentence(whole, config.train_step_flops(batch_size, seq_len),
                         peaks["float32"].flops_per_s, peaks[stack.dtype].flops_per_s, stack.dtype))

# %% [markdown]
# **The final table: which bound dominates each rung.** A profiler trace of `trace_steps` steps
# of the baseline and of every rung tried (`perflab.lessons.nb09_training_step.ladder_traces`), each compared with
# the trace of the stack it was tried on by notebook 02's `compare_traces`: the category holding
# most of the operator time (on a GPU, the kernel time; categories by
# `perflab.measure.hotspots.classify`), the hotspot whose time moved most, and what that
# change alone would do to the step by Amdahl's law: a part holding a share s of the time, made
# r times as long, makes the whole 1 - s + s r as long (`hotspot_alone`), next to all
# operators (`operators_ratio`) and the measured step (`vs_previous`, from the interleaved
# comparison above). The traces are recorded one after another, not interleaved, so an
# operator's time also carries the machine's drift between them: the verdict on the step is the
# interleaved one, and the traces say where the time went. The traces are in `traces/` (open
# them in Perfetto or `chrome://tracing`).

# %%
bounds = greedy_bound_table(greedy, steps=trace_steps)
final = greedy[["rung", "kept", "step_s", "peak_bytes"]].merge(bounds, on="rung")
nb.save(final.drop(columns="source"), "final_table.csv")
print(f"operator times from {bounds['source'].iloc[0]}")
final.assign(step_ms=final["step_s"] * 1e3, peak_MiB=final["peak_bytes"] / MiB)[
    ["rung", "kept", "step_ms", "peak_MiB", "dominant", "dominant_share", "hotspot",
     "hotspot_share_before", "hotspot_alone", "operators_ratio", "vs_previous", "verdict"]
].round(3)

# %%
for _, row in bounds.iterrows():
    print(bound_sentence(row))
print(say.kept_bound_sentence(bounds, greedy, stack.name))

# %% [markdown]
# The kept stack as `perflab bench` flags, saved as `fastest_step.json` beside the results, to
# time it on its own at any size:

# %%
command = BenchConfig.from_recipe(stack, preset, seq_len, "train-step", batch_size=batch_size)
(out / "fastest_step.json").write_text(json.dumps({"flags": command.command_line()}, indent=2))
print("perflab bench " + " ".join(command.command_line()))

# %% [markdown]
# ### Grouped-query attention: a change to the model, not a rung
#
# Every rung above computes the same function. Grouped-query attention (Ainslie et al. 2023)
# does not: `gqa_kv_heads` heads of keys and values, each shared by a group of query heads,
# make the K and V projections narrower (`ModelConfig.num_kv_heads`; the tests check that
# with as many key heads as query heads it is multi-head attention bit for bit, and that with
# fewer it equals multi-head attention whose key and value weights repeat each shared head).
# Its gain is at decoding (notebook 10, section 9: a smaller KV cache); in training it saves
# parameters and a little projection work, and a model trained with it is a different model.
# The baseline step of both, taking turns:

# %%
gqa = kv_heads_against_mha(config, gqa_kv_heads, BASELINE, batch_size, seq_len, dev,
                           rounds=gqa_rounds)
nb.save(gqa, "grouped_query.csv")
print(say.gqa_sentence(gqa, config.num_heads, gqa_kv_heads))

# %% [markdown]
# ## 4. The data path on real text
#
# The shipped corpus (`data/text/tinyshakespeare.txt`, public domain) through a byte
# tokenizer (each UTF-8 byte an id below 256, so the model's vocabulary covers it). A batch is
# `batch_size` windows at random offsets. Each way of producing batches feeds the same training
# step, all taking turns round by round against `synthetic` (the random batch the step already
# holds): re-tokenising the whole corpus every step, tokenising once (`pre-tokenised`), and a
# `DataLoader` with 1 or 2 worker processes preparing batches while the step runs
# (`perflab.lessons.nb09_training_step.data`; every path gives the same batches, which the tests check). The
# `synthetic` step is the baseline again, measured in these rounds, apart from section 3's.

# %%
text = read_corpus()
print(f"{len(text.encode('utf-8')):,} bytes of text")
modes = tuple(DATA_PATHS) if dev.type == "cuda" else CPU_DATA_PATHS
data_run = TrainingStep(config, BASELINE, batch_size, seq_len, dev)
data_times = data_path_steps(data_run, text, data_rounds, modes=modes)
data_table = paired_table(data_times, "synthetic", label="data_path")
nb.save(data_table, "data_path.csv")
data_table.round(3)

# %%
nb.say(say.data_path_sentences(data_table, modes, dev.type))

# %% [markdown]
# **The loss one example at a time.** A loop calling the loss on each sequence's logits and
# averaging, against one call on the whole batch (`perflab.lessons.nb09_training_step.batching`). With sequences
# of equal length and no ignored targets the mean of per-sequence means is the mean over all
# tokens, so the two agree; checked first in float64, then timed (the loss and its backward to
# the logits, `loss_batch` sequences of `loss_seq_len` tokens over the byte vocabulary):

# %%
# NBVAL_CHECK_OUTPUT
vocab = ByteTokenizer.vocab_size
loss_check = check_loss_batching(loss_batch, loss_seq_len, vocab)
print("the loop and the one call give the same loss and gradient in float64 (within 1e-12):",
      loss_check["matches"])

# %%
loss_batching = compare_loss_batching(loss_batch, loss_seq_len, vocab, rounds=data_rounds,
                                      device=dev)
nb.save(loss_batching.as_row(), "loss_batching.csv")
print(conclude(out, "loss in one call vs a loop over examples", loss_batching))

# %% [markdown]
# **Padding a batch of unequal sequences.** The corpus's speeches (blocks between blank lines,
# cut to `seq_len` tokens) differ in length, and a batch is padded to its longest. Batched in a
# random order, most batches hold one long speech and pad the rest; bucketed by length (sorted,
# cut into batches, the batches shuffled) each batch holds speeches of similar lengths. The
# padding is ignored by the loss and, at the end of each sequence with causal attention, never
# attended to: both orders give the real tokens the same summed loss as the speeches run one
# at a time, unpadded (checked in float64 on 16 of them). Then one forward and backward over all the batches of
# `bucket_sequences` speeches, in each order, taking turns; tokens/s counts real tokens only.
# What bucketing costs elsewhere: batches of similar lengths are not a uniform sample, which is
# why the batches themselves are shuffled.

# %%
all_speeches = speeches(text, seq_len)
chosen = torch.randperm(len(all_speeches), generator=torch.Generator().manual_seed(0))
picked = [all_speeches[i] for i in chosen[:bucket_sequences].tolist()]
byte_config = dataclasses.replace(get_preset(bucket_preset), vocab_size=vocab)
print(say.speeches_line(all_speeches, seq_len))

# %%
# NBVAL_CHECK_OUTPUT
bucket_check = check_bucketing(byte_config, picked[:16], bucket_batch)
print("random order, bucketed and one at a time give the same summed loss in float64 (within "
      "1e-12 relative):", bucket_check["matches"])

# %%
byte_model = build_model(byte_config, seed=0).to(dev)
bucket_rows, bucketing = compare_bucketing(byte_model, picked, bucket_batch, rounds=data_rounds)
nb.save(bucket_rows, "bucketing.csv")
print(conclude(out, "bucketed by length vs random order", bucketing))
print(say.bucketing_sentence(bucket_rows, bucket_sequences, bucket_batch))
bucket_rows.round(3)

# %% [markdown]
# ## 5. Batch size and gradient accumulation
#
# A larger batch gives each matmul more rows for the same weights; the activations, and with
# them the peak of forward and backward, grow with it. Gradient accumulation keeps the global
# batch and splits it into micro-batches: the same gradients (the tests check it in float64),
# one micro-batch's activations at a time, more, smaller matmuls. The gradients stay whole, and
# adding a micro-batch's gradient into `.grad` holds that gradient as a temporary first, so
# accumulation lowers the peak only where the activations outweigh the gradients. Each step
# time below is its own median, measured in this section, not a step of the ladder's (sections
# 3 and 4), which were measured apart, at other moments.

# %%
sizes = batch_size_table(config, batch_sizes, batch_seq_len, dev)
nb.save(sizes, "batch_sizes.csv")
sizes.assign(step_ms=sizes["step_s"] * 1e3, peak_MiB=sizes["peak_bytes"] / MiB).drop(
    columns=["step_s", "peak_bytes"]).round(2)

# %%
accumulated = accumulation_table(config, global_batch, say.micro_batch_sizes(global_batch),
                                 batch_seq_len, dev)
nb.save(accumulated, "accumulation.csv")
accumulated.assign(step_ms=accumulated["step_s"] * 1e3,
                   peak_MiB=accumulated["peak_bytes"] / MiB).drop(
    columns=["step_s", "peak_bytes"]).round(2)

# %%
print(say.batch_size_sentence(sizes, accumulated, global_batch))

# %% [markdown]
# ## 6. The leaderboard's step: one model over several devices
#
# The 2026 leaderboard times one AdamW step of the 8B model (d 4096, d_ff 11,008, 34 layers,
# vocabulary 151,936) on 2 x 32,768 tokens in bf16, on two B200s. What one step holds per
# device, counted from the shapes (`perflab.lessons.nb09_training_step.sharded_step.sharded_step_memory`): with
# notebook 08's FSDP every rank keeps 1/W of the parameters, gradients and AdamW's two moments;
# with checkpointing at every block it keeps each block's input (bf16) and, while a block is
# recomputed, that block's activations (its saved bytes per token counted on the `meta`
# device with FlashAttention, so no 32,768 x 32,768 matrix); the fused head holds one chunk of
# logits. The state in float32 (master weights, as notebook 08's FSDP keeps them) or, as the
# leaderboard's model is built, in bfloat16:

# %%
leaderboard_memory = say.leaderboard_memory(leaderboard)
nb.save(leaderboard_memory, "leaderboard_memory.csv")
leaderboard_memory.round(2)

# %%
nb.say(say.memory_sentences(leaderboard_memory, leaderboard,
                                     say.peaks_near_gradients(greedy, memory)))

# %% [markdown]
# How fast could that step be? This is a **model, not a measurement** (no B200 ran it):
# `perflab.lessons.nb09_training_step.step_model` runs the workbook's own block, attention, loss heads and AdamW
# on PyTorch's `meta` device (shapes only, so the 8B model at 32,768 tokens costs nothing),
# counts each operator's FLOPs and the bytes it reads and writes, and prices each operator at
# its roofline at stated efficiencies (`Efficiency`, printed below). The GPU is priced twice:
# as the HGX B200's datasheet rates it, and at the handout's B200 figure, which is the GB200's
# (`perflab.measure.hardware`, each figure with its source, printed below). FlashAttention and fused
# AdamW come from formulas (their eager code is not what a GPU runs); `torch.compile` is its
# best case, every memory-bound operator fused into the matmuls. Each rung goes on top of the
# ones before, in the ladder's order, with checkpointing last because memory, not time, asks
# for it. The handout quotes about 10 s for its naive baseline.

# %%
leaderboard_gpus, leaderboard_efficiency = [B200, HANDOUT_B200], Efficiency()
nb.say(say.gpu_lines(leaderboard_gpus))
print(leaderboard_efficiency)
leaderboard_estimate = price_rungs_at(leaderboard, 2, leaderboard.context_length, 2,
                                      leaderboard_gpus, leaderboard_efficiency)
nb.save(leaderboard_estimate, "leaderboard_estimate.csv")
leaderboard_estimate.round(3)

# %%
nb.say(conclude_all(out, rung_findings(leaderboard_estimate, leaderboard)))

# %% [markdown]
# Where the modelled best step spends its time, and what the fused head's chunk size (chosen
# on a 2-core CPU: 128 tokens) would do there. Each chunk reads the whole float32 weight gradient
# again, so on a GPU, where the memory allows it, larger chunks read it fewer times:

# %%
best_plan = StepPlan(attention="flash", head="fused", optimizer="fused", compiled=True,
                     checkpointing=True)
best_parts = time_by_part(step_ops(leaderboard, best_plan, 2, leaderboard.context_length, 2,
                                   B200, leaderboard_efficiency))
nb.save(best_parts, "leaderboard_estimate_parts.csv")
chunks = say.head_chunk_estimates(leaderboard, best_plan, B200, leaderboard_efficiency)
nb.save(chunks, "leaderboard_estimate_chunks.csv")
nb.say(say.best_step_sentences(best_parts, chunks, leaderboard_efficiency, B200))
best_parts.round(3)

# %% [markdown]
# The sharded step itself (`sharded_training_step`: fused head, FlashAttention, fused AdamW,
# checkpointing at every block, under notebook 08's FSDP, each rank on its part of the batch).
# On a CPU: `sharded_preset` on Gloo ranks, checked against the same step in one process (the
# loss, every gradient, and the first update from the same gradients; the tests do it in
# float64 to 1e-10). The full profile runs the leaderboard's model on `sharded_world_size`
# GPUs, timed only (no one process holds it to compare with). Under FSDP a bfloat16 recipe
# computes everything in bfloat16 (weights gathered in it), where the ladder's bf16 rung
# autocasts (norms and softmax in float32): the same name, different arithmetic.

# %%
sharded_recipe = Recipe("sharded", dtype=sharded_dtype, head="fused", attention="flash",
                        optimizer="fused", checkpoint_group=1)
sharded_row, why_not = sharded_step_row(sharded_preset, sharded_recipe, sharded_batch_size,
                                        sharded_seq_len, sharded_world_size, steps=sharded_steps,
                                        state=sharded_state, check=sharded_check)
if sharded_row is None:
    print(why_not)
else:
    nb.save(sharded_row, "sharded_step.csv")
    print(say.sharded_sentence(sharded_row))

# %%
# NBVAL_CHECK_OUTPUT
if sharded_check and sharded_row is not None:
    print("the sharded step matches one process:", bool(sharded_row["matches_single_process"]))

# %% [markdown]
# ## Where the results are

# %%
print(listing(out))

# %%
nb.check()
