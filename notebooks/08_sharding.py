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
# # 08 Sharding: ZeRO-1, fully sharded data parallel, and how far each strategy scales
#
# Data parallelism keeps a full copy of the parameters, gradients and optimizer state on every
# rank. You will shard the optimizer state (ZeRO stage 1) around any `torch.optim.Optimizer`,
# then the weights themselves (fully sharded data parallel, FSDP), check both against training
# on one process and against PyTorch's own FSDP, measure what each rank holds and compare it
# with the formulas, see whether FSDP's weight gathers arrive before the forward needs them, and
# finally compute, for data-parallel, fully-sharded, tensor-parallel and 2D training, how many
# devices a step can use before communication outlasts compute (the 2026 handout's FFN
# problems and the 2025 handout's XXL accounting).
#
# **Your own FSDP and sharded optimizer:** `perflab run 08 -p adapters my-repo/tests/adapters.py`
# (the course's adapters file, or a dotted module) checks them at the end of section 2 and
# times those that pass beside perflab's; those results land in a folder of their own
# (`data/results/08_sharding/yours-.../`).
#
# Ranks run on Gloo on a CPU (NCCL on GPUs) through `perflab.distributed.launch`. Memory here is
# counted in bytes of the tensors each rank holds, which is what sharding changes, and read
# from the allocator's record at the points of a step; the bandwidths in the calculators are
# datasheet numbers, not measurements.

# %% tags=["parameters"]
world_size = 2                              # ranks
memory_model = "lm:128:8"                   # whose optimizer-state and parameter memory is measured
fp16_parity_model = "lm:64:2"               # FSDP with fp16 compute against fp32 on one process
calculator_presets = ["small", "xl", "10B"] # model presets of the calculators
calculator_seq_len = 1024                   # tokens per sequence in the calculators
calculator_batch_sizes = [2**i for i in range(15)]  # sequences per step, 1 to 16384
zero_time_model = "lm:128:8"                # trained with AdamW and sharded AdamW in turns
zero_batch_per_rank = 4                     # its sequences per rank and step
zero_seq_len = 64                           # its tokens per sequence
zero_warmup = 1                             # untimed rounds
zero_rounds = 6                             # timed rounds (one step of each per round; 6 for a 96.8% interval)
prefetch_depths = [0, 1, 2]                 # FSDP's gathers started this many modules ahead (1: the handout's rule), timed in turns
prefetch_rounds = 12                        # their timed rounds (a step each per round)
accounting_tokens = [0, 1024, 2048, 4096, 8192]  # tokens per device in the XXL accounting
resume = True                               # skip configurations already in this machine's results
adapters = None                             # your course tests/adapters.py (or a module): checked and timed beside perflab's

# %%
import pandas as pd

from perflab.lessons.nb08_sharding import (
    H100_NODE,
    PREFETCH_KEY,
    TP_BACKWARD,
    ZERO_KEY,
    Workload,
    calculator_controls,
    compute_bound_conditions,
    conclude_all,
    ddp_sweep,
    ffn_answers,
    fsdp_forward_timeline,
    fsdp_memory,
    fsdp_memory_per_device,
    fsdp_parity,
    gather_summary,
    get_preset,
    launch,
    listing,
    max_devices_table,
    memory_per_rank_formula,
    open_notebook,
    plot_max_devices,
    plot_memory_per_rank,
    plot_rank_timelines,
    prefetch_configs,
    resolve_device,
    say,
    sharding_of_yours,
    smaller_batch_options,
    torch_fsdp_comparison,
    toy_model,
    zero_communication,
    zero_configs,
    zero_memory,
    zero_memory_points,
    zero_parity_all,
)

MiB = 2**20
nb = open_notebook("08_sharding", globals(), yours=adapters)
out, provenance = nb.out, nb.provenance
print(say.placement_line(world_size, memory_model))

# %% [markdown]
# ## 1. ZeRO stage 1: each rank keeps the optimizer state of its own parameters
#
# `ShardedOptimizer(params, optimizer_cls, **kwargs)` gives each parameter an owner (largest
# first, each to the rank holding the fewest elements so far), runs `optimizer_cls` on the
# rank's own parameters only, then broadcasts every parameter from its owner. It is a
# `torch.optim.Optimizer` itself, so `zero_grad`, learning-rate schedulers and
# `add_param_group` work as usual. The check trains a toy model (tied embeddings, a frozen
# parameter) with SGD+momentum and with AdamW, the vectors added later as a second group with
# half the learning rate, against the unsharded optimizer on one process, in float64.

# %%
zero = pd.DataFrame([row for rows in launch(zero_parity_all, world_size, (["sgd", "adamw"],))
                     for row in rows])
zero

# %%
# NBVAL_CHECK_OUTPUT
print(say.zero_parity_checks(zero).to_string(index=False))

# %% [markdown]
# ### Optimizer-state memory per rank, measured and computed
#
# AdamW keeps two fp32 moments per element (8 bytes) and a 4-byte step counter per tensor.
# Measured: the bytes of the state tensors on each rank after one step. Computed: the same
# from the parameters each rank owns.

# %%
zero_mem = pd.DataFrame(launch(zero_memory, world_size, (memory_model,)))
nb.save(zero_mem, "zero_memory.csv")
zero_mem

# %%
# NBVAL_CHECK_OUTPUT
nb.say(say.zero_memory_lines(zero_mem))

# %%
print(say.zero_state_sentence(zero_mem, memory_model, world_size))

# %% [markdown]
# ### Memory at three points of a step, with and without sharding
#
# The handout asks for the peak memory after initialisation, just before the optimizer step
# and just after it. Each rank builds the model and the optimizer, runs forward and backward,
# then steps, while the allocator's record (`torch.profiler` on a CPU, the CUDA snapshot on a
# GPU) counts every allocation: `allocated` is what the rank holds at that point, `peak` the
# most it held so far; the tensors it holds explain the rest.

# %%
points = pd.DataFrame([row for rows in launch(zero_memory_points, world_size, (memory_model,))
                       for row in rows])
nb.save(points, "zero_memory_points.csv")
rank0 = points[points["rank"] == 0].drop(columns="rank").set_index(["optimizer", "point"])
rank0.div(MiB).round(1).rename(columns=lambda c: c.replace("bytes", "MiB"))

# %%
# NBVAL_CHECK_OUTPUT
nb.say(say.memory_point_lines(points, zero_mem))

# %%
print(say.rank0_sentence(points, world_size))

# %% [markdown]
# For xl on two GPUs (the handout's setting), the same accounting in fp32: parameters 4 P and
# gradients 4 P on every rank at every point after backward, AdamW's state 8 P unsharded or
# 8 P / 2 sharded after the step (activations come and go between the points):

# %%
xl_params = get_preset("xl").num_parameters()
print(f"xl: {xl_params / 1e9:.2f} B parameters")
say.handout_points(xl_params).round(1)

# %% [markdown]
# With more ranks, only the state shrinks; parameters and gradients stay whole. The formula
# for fp32 training (params 4 + grads 4 + AdamW 8 bytes per parameter), for this model:

# %%
formula = pd.DataFrame(memory_per_rank_formula(int(zero_mem["parameters"][0]), range(1, 9)))
fig = plot_memory_per_rank(formula)
nb.figure(fig, "memory_per_rank.png")
formula.pivot(index="world_size", columns="strategy", values="bytes").div(MiB).round(1)

# %% [markdown]
# ### Step time with and without sharding
#
# The same data-parallel training (flat all-reduce of the gradients) with AdamW and with
# `ShardedOptimizer(AdamW)`, both in one launch, taking turns one step each per round, so a slow
# moment of the machine falls on both; the verdict comes from the paired rounds' ratio and its
# distribution-free interval (`perflab.measure.comparison`), whose real confidence level depends
# on the number of rounds (6 give 96.8%, 4 only 87.5%; a verdict needs at least 95%, otherwise
# the difference is "not established"). The sentence below states the level it has.

# %%
zero_steps = ddp_sweep(out / "zero_step.csv", zero_configs(world_size, zero_time_model),
                       batch_size=zero_batch_per_rank, seq_len=zero_seq_len, warmup=zero_warmup,
                       rounds=zero_rounds, resume=resume, metadata=provenance, key=ZERO_KEY)
zero_steps[["optimizer", "status", "rounds", "step_ms", "sync_ms"]]

# %%
nb.say(conclude_all(out, say.zero_step_findings(zero_steps, zero_time_model, world_size)))

# %% [markdown]
# Sharding trades memory for traffic: each rank steps only its own parameters (less optimizer
# work by count; what that saves in time is what the step comparison above could or could not
# tell), then every parameter is broadcast from its owner (more communication).
#
# ### This wrapper against ZeRO stage 1
#
# ZeRO's first stage (P_os, Rajbhandari et al. 2020) shards the optimizer state as this wrapper
# does, but communicates differently: instead of all-reducing the gradients and then
# broadcasting the updated parameters, it reduce-scatters the gradients (each rank needs only
# the average of its own shard) and all-gathers the updated parameters. Bytes each rank sends
# per step and what it keeps, for this model's parameters on `world_size` ranks
# (`zero_communication`, ring collectives):

# %%
zero_volume = zero_communication(4 * int(zero_mem["parameters"][0]), world_size)
zero_volume.set_index("scheme").div(MiB).round(2).rename(columns=lambda c: c.replace("bytes",
                                                                                     "MiB"))

# %%
print(say.volume_sentence(zero_volume, world_size))

# %% [markdown]
# ## 2. Fully sharded data parallel
#
# `FSDP(module, compute_dtype=None)` shards every parameter of two or more dimensions,
# whatever module holds it (linear, embedding, the tied output projection); vectors (norm
# gains, biases) stay replicated. Before each module's forward its weights are all-gathered
# and the next module's gather is started (prefetch); after it, they are dropped. Backward
# gathers them again when it needs them (a saved-tensor hook keeps a note instead of the
# weight) and reduce-scatters their gradients in fp32. With `compute_dtype=torch.float16` the
# gathers and the arithmetic are fp16 while the shards (master weights) and gradients stay
# fp32.
#
# Checked against fp32 training on one process (SGD, 3 steps): the toy model (tied, frozen
# parameter) in fp32, and a small Transformer with fp16 compute. `backward_gathers` counts the
# weights gathered again for backward; `full_weights_kept_for_backward` counts the gathered
# weights still in memory between forward and backward (weak references): 0 means the saved
# tensor hook really left them out.

# %%
fsdp = pd.DataFrame(launch(fsdp_parity, world_size, (None, "toy"))
                    + launch(fsdp_parity, world_size, ("float16", fp16_parity_model)))
fsdp

# %%
# NBVAL_CHECK_OUTPUT
print(say.fsdp_parity_checks(fsdp).to_string(index=False))

# %% [markdown]
# ### Parameter, gradient and optimizer memory per rank under FSDP
#
# Each rank holds `ceil(numel / N)` elements of every matrix and all of every vector, for the
# parameters, their gradients and the AdamW state alike.

# %%
fsdp_mem = pd.DataFrame(launch(fsdp_memory, world_size, (memory_model,)))
nb.save(fsdp_mem, "fsdp_memory.csv")
fsdp_mem

# %%
# NBVAL_CHECK_OUTPUT
nb.say(say.fsdp_memory_lines(fsdp_mem, world_size)[:2])

# %%
print(say.fsdp_memory_lines(fsdp_mem, world_size)[2])

# %% [markdown]
# ### Do the weight gathers finish before the forward needs them?
#
# Rank 0's forward under `FSDP`, profiled (`perflab.lessons.nb08_sharding.fsdp_timeline`): for each
# module holding weights, the time it waited for them (`fsdp.wait`: the first module's gather,
# which nothing prefetched, or the wait for a prefetched one) and its own forward
# (`fsdp.forward`), above the process group's all-gathers. A gather that finished in time costs
# its module no wait. On a CPU, Gloo's threads and the compute share the same cores; the
# handout's setting (xl on two GPUs, NCCL beside the compute, Nsight's view) is GPU-only.

# %%
gathers = fsdp_forward_timeline(world_size, memory_model, batch_size=zero_batch_per_rank,
                                seq_len=zero_seq_len)
fig = plot_rank_timelines(gathers, lanes=("fsdp.wait", "fsdp.forward", "communication"),
                         xlabel="ms from the start of the forward (rank 0)")
nb.figure(fig, "fsdp_forward_timeline.png")
gather_stats = gather_summary(gathers)
pd.Series(gather_stats).round(2)

# %%
# NBVAL_CHECK_OUTPUT
holders = [m for m in toy_model(memory_model, seed=0).modules()
           if any(p.ndim >= 2 for p in m.parameters(recurse=False))]
print("one row per module that gathers weights:", gather_stats["modules_gathering"] == len(holders))

# %%
print(say.gather_sentence(gather_stats, memory_model, world_size, str(resolve_device("auto"))))

# %% [markdown]
# ### How far ahead to prefetch
#
# `FSDP(module, prefetch=k)` starts the gathers of the next `k` modules as a module starts its
# forward, and in backward the gathers of the next `k` weights backward will unpack as it
# unpacks one. `k = 1` is the handout's rule (module i's gather starts once module i-2 has
# finished); `k = 2` starts each a module earlier and holds one more module's full weights;
# `k = 0` gathers every weight when it is needed. The depths take turns in one launch, one
# training step each per round (as the ZeRO steps above), and each is compared with the one
# before it; FSDP counts, for each prefetched gather, whether it had finished when its weights
# were needed (`FSDP.arrivals`, rank 0, the timed steps).

# %%
prefetch_steps = ddp_sweep(out / "fsdp_prefetch.csv",
                           prefetch_configs(world_size, zero_time_model, prefetch_depths),
                           batch_size=zero_batch_per_rank, seq_len=zero_seq_len,
                           warmup=zero_warmup, rounds=prefetch_rounds, resume=resume,
                           metadata=provenance, key=PREFETCH_KEY)
prefetch_steps[["prefetch", "status", "step_ms", "forward_in_time", "forward_prefetched",
                "backward_in_time", "backward_prefetched"]]

# %%
nb.say(conclude_all(out, say.prefetch_findings(prefetch_steps, zero_time_model,
                                                        world_size)))

# %% [markdown]
# ### Against PyTorch's FSDP
#
# `torch.distributed.fsdp.fully_shard` (FSDP2) trained from the same weights on the same
# batches; it shards the vectors too (as `DTensor`s), a likely source of any small difference
# in bytes (not measured here on its own).

# %%
versus = pd.DataFrame(launch(torch_fsdp_comparison, world_size, ("toy",)))
versus

# %%
# NBVAL_CHECK_OUTPUT
print("same parameters as torch's FSDP (|diff| < 1e-6):",
      bool((versus["max_param_diff_vs_torch"] < 1e-6).all()))

# %% [markdown]
# ### Yours
#
# With `-p adapters PATH`: `perflab check --adapters`'s FSDP checks (against one process in
# float32, with fp16 compute and fp32 master weights, with two micro-batches, and the
# gradients' dtype and shape) and sharded-optimizer checks (AdamW against AdamW whole, and
# after a `state_dict` round trip). Those that pass every check are then timed as in section 1,
# taking turns in one launch with perflab's: your FSDP against perflab's `FSDP`, your sharded
# AdamW (on perflab's flat data parallelism) against `ShardedOptimizer(AdamW)`. The timed model
# is perflab's (`torch.nn` layers): `held_fraction` is the share of its parameters each rank
# holds, about 1 / world size for an FSDP that shards it.

# %%
nb.say(sharding_of_yours(adapters, out, provenance, world_size=world_size,
                              model=zero_time_model, batch_size=zero_batch_per_rank,
                              seq_len=zero_seq_len, warmup=zero_warmup, rounds=zero_rounds))

# %% [markdown]
# ## 3. How many devices stay compute-bound?
#
# A step of `6 N B S` FLOPs split over the devices shrinks as devices are added, while each
# device's communication does not: data parallelism all-reduces the gradients
# (`2 (n-1)/n N b` bytes), FSDP gathers the weights twice and reduce-scatters the gradients
# (`3 (n-1)/n N b`), tensor parallelism all-reduces activations four times per layer
# (`8 L (t-1)/t B S d b`, on the fast links within a node). Once communication takes longer
# than the compute it overlaps it can no longer hide behind it, and each collective overlaps
# only the pass it belongs to: data parallelism's all-reduce the backward (`4 N B S`: the
# gradients exist only once backward produces them, and the optimizer step waits for them),
# FSDP's forward gathers the forward (`2 N B S`) and its backward gathers and reduce-scatters
# the backward, tensor parallelism's all-reduces their own pass (half in each, so the forward
# binds). The formulas and their closed forms are in `perflab.distributed.calculators`
# (`overlap="pass"`; `overlap="step"` lets everything hide behind the whole step's `6 N B S`,
# the optimistic assumption); the hardware is an H100 node (datasheet numbers).

# %%
# NBVAL_CHECK_OUTPUT
print(H100_NODE)

# %%
config = get_preset("xl")
work = Workload.from_config(config, batch_size=256, seq_len=calculator_seq_len)
examples = say.example_estimates(work, H100_NODE)
examples  # comm_over_compute: the largest pass's communication / that pass's compute

# %%
# NBVAL_CHECK_OUTPUT
print(say.compute_bound_line(config.name, work, H100_NODE, calculator_seq_len))

# %% [markdown]
# The same calculator with sliders: choose the model, the global batch, the sequence length,
# the device's dense FLOP/s and the two link bandwidths, and the largest compute-bound device
# count of each strategy follows (in JupyterLab; without a front end the table under the
# widget is its starting state, the example above).

# %%
controls = calculator_controls("xl", 256, calculator_seq_len, H100_NODE)
display(controls)
controls.result

# %%
table = pd.concat([max_devices_table(get_preset(name), H100_NODE, calculator_batch_sizes,
                                     calculator_seq_len)
                   for name in calculator_presets])
nb.save(table, "max_devices.csv")
fig = plot_max_devices(table)
nb.figure(fig, "max_devices.png")
shown = table[table["batch_size"].isin([1, 16, 256, 4096])]
shown.pivot(index=["model", "batch_size"], columns="strategy", values="max_devices")

# %% [markdown]
# Data parallelism and FSDP scale with the batch: the compute per device falls as `1/n` while
# the gradient traffic does not, so a larger global batch buys more devices. FSDP reaches the
# same count as DP for 1.5x the traffic, while holding `1/n` of the model: its extra traffic,
# the forward's gather, runs during the forward, which DP's all-reduce cannot use. Their
# limits do not depend on the model's size at all (the three panels agree): compute and
# traffic both grow with `N`. Tensor
# parallelism does not depend on the batch at all: its traffic grows with the tokens exactly
# as its compute does, and its limit is set by the width `d` and the fast-link bandwidth, and
# by the number of heads. 2D training multiplies the two limits, which is why the largest
# runs combine them.
#
# ### The handout's FFN setting, in symbols
#
# The handout asks the same questions of one feed-forward block: x (B, D) through W1, W2
# (D, D_FF) and W3 (D_FF, D), FP16, matmul FLOPs only, C FLOP/s and W bytes/s of egress per
# device, ring collectives, compute and communication overlapping. Each expression below is
# derived by sympy from what one device does (the shapes of its matmuls, the collectives it
# joins: `perflab.distributed.ffn_calcs`), and each largest device count is solved from
# "communication time = compute time". The tests count the same FLOPs with PyTorch's
# `FlopCounterMode` on real shards and check the largest counts against a brute-force search.

# %%
# NBVAL_CHECK_OUTPUT
ffn = ffn_answers()
print("\n".join(say.ffn_lines(ffn)))

# %% [markdown]
# Data parallelism and FSDP stop at 1 + B W / C devices, whatever the model's width: both
# compute and traffic scale with D D_FF. Tensor parallelism stops at 1 + 3 D_FF W / (2 C)
# (forward) whatever the batch. With the two axes of a 2D mesh overlapping the bounds
# multiply; sharing one network they cannot both be reached: the product is maximised on the
# line where the summed communication equals compute, and where that optimum would give one
# axis fewer than one device, that axis stays at 1 and the other takes the whole budget (the
# first two pieces of the answer).
#
# **tp_calcs (a), the tensor-parallel backward on device i**, from dy (B, D) and what the
# forward saved; one collective, the all-reduce of dx. Executed on shards of real tensors
# (`tp_backward`, three shards, float64), it gives autograd's gradients:

# %%
# NBVAL_CHECK_OUTPUT
print("\n".join(TP_BACKWARD))
print("equal to autograd within 1e-12:", say.tp_backward_matches_autograd(n_tp=3))

# %% [markdown]
# The same bounds in numbers, for xl's FFN (D = 2560, D_FF = 10240) on the H100 node above
# (C its bf16 peak; W its InfiniBand link between data-parallel ranks, NVLink within a
# tensor-parallel group; the 2D rows keep the handout's single W, the InfiniBand link) and
# B = 2^20 tokens (data parallelism needs a large batch: its bound is 1 + B W / C):

# %%
print("\n".join(say.ffn_bound_lines(ffn, H100_NODE)))

# %% [markdown]
# The calculator above and this derivation count data parallelism's bound the same way: the
# gradient all-reduce hides behind the backward only. Had it been allowed to hide behind the
# whole step's forward and backward (`overlap="step"`), the compute to hide behind would be 1.5x
# larger and the bound higher (printed below), as the calculator once assumed. Both, for the calculator's example batch in tokens:

# %%
# NBVAL_CHECK_OUTPUT
print(say.dp_bound_sentence(ffn, config.name, work, H100_NODE))

# %% [markdown]
# ### The 2025 handout's communication accounting: XXL on TPU v5p
#
# The 2025 handout asks the same questions of a far larger dense model, **XXL**: 126 blocks of
# two linears, d_model 16384 -> d_ff 53248 -> d_model, nothing else (no activation function,
# attention, embedding or output layer), no checkpointing; BF16 activations and gradient
# communication, FP32 master weights, accumulated gradients and AdamW state
# (`perflab.distributed.comm_accounting`; the tests count its parameters on the `meta` device,
# its saved activations with autograd's hooks and its FLOPs with `FlopCounterMode`).
#
# **(a) Memory on one device.**

# %%
# NBVAL_CHECK_OUTPUT
print("\n".join(say.xxl_state_lines()))

# %% [markdown]
# **(b) Sharded over N_FSDP devices**: weights, gradients, optimizer state and every second
# layer's activations (A: the activations of the tokens one device computes on) are sharded;
# the other half of the activations is not. Bytes per device, and the smallest N_FSDP that fits
# a 95 GB TPU v5p for a few token counts:

# %%
# NBVAL_CHECK_OUTPUT
print("bytes per device =", fsdp_memory_per_device())
fits = say.xxl_fsdp_fits(accounting_tokens)
print(fits.round(1).to_string(index=False))
print(say.xxl_fits_sentence(fits))

# %% [markdown]
# **(c) Forward only, on a v5p mesh** of X = 16 (FSDP, over M_X = 2 torus axes) by Y = 4
# (tensor parallelism, M_Y = 1), W_ici = 2 x 9e10 B/s, C = 4.6e14 FLOP/s. Following the TPU
# Scaling Book (part 5), each device computes on B/X tokens with a d_ff/Y slice of each weight:
# two matmuls of 2 (B/X) D (D_FF/Y) FLOPs; it all-gathers its slice of both weights over X
# (2 D D_FF / Y bytes each) and all-gathers / reduce-scatters its activations over Y
# ((B/X) D bf16 values each). Both communications must hide behind the compute:

# %%
# NBVAL_CHECK_OUTPUT
for convention, ring in (("large-mesh (Scaling Book)", False), ("ring factors (n-1)/n", True)):
    bounds = compute_bound_conditions(ring=ring)
    print(f"{convention}: B/X >= {bounds['min B/X']},  Y <= {bounds['max Y']}")
mesh = say.mesh_table()
print(mesh.round(1).to_string(index=False))
print(say.mesh_sentence(mesh))

# %% [markdown]
# **(d) A smaller total batch, still compute-bound.** The bound is B/X >= C / (W_ici M_X) per
# FSDP shard times X shards, so the total batch shrinks with fewer FSDP shards or fewer bytes
# per gathered weight. The same model, computed for each option:

# %%
options = smaller_batch_options()
options[["option", "X", "Y", "weight_bytes", "min_tokens_per_fsdp_shard", "min_total_batch",
         "tp_hidden"]].round(1)

# %%
# NBVAL_CHECK_OUTPUT
print(say.options_sentence(options))

# %% [markdown]
# Pipeline parallelism (GPipe, Huang et al. 2019) is the other way to take chips off the FSDP
# axis: with P stages each chip holds only 126/P blocks, so an FSDP axis P times narrower
# holds the state, at the price of a pipeline bubble that needs several micro-batches in
# flight per stage. The bound itself, C / (W_ici M_X), is the chip's compute over the
# bandwidth of its gathers: more torus axes for the FSDP gathers (at the expense of tensor
# parallelism's) lower it in proportion.

# %% [markdown]
# ## Where the results are

# %%
print(listing(out))

# %% [markdown]
# **Do these results contradict themselves?** `perflab check-results` (notebook 01 lists its
# rules; CI runs it over `data/results`):

# %%
nb.check()
