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
# # 07 Distributed communication and data-parallel training
#
# You will start functions on several ranks from this notebook, measure how long an all-reduce
# takes and how much bandwidth it reaches, then build data-parallel training four ways (naive,
# flat, overlapped per parameter, bucketed), check that each trains exactly like one process,
# and time them against each other and against PyTorch's `DistributedDataParallel`.
#
# Ranks are separate processes. They run functions from `perflab` modules (a notebook's own
# functions cannot be imported by another process) through `perflab.distributed.launch`,
# which uses Gloo on a CPU and NCCL with one GPU per rank on a CUDA machine. On a CPU the
# "network" is the loopback device and the ranks share the cores, so the numbers here teach
# the method, not NVLink or InfiniBand speeds: those are GPU-only and come from
# `perflab run 07 -p profile full` on a multi-GPU machine.

# %% tags=["parameters"]
profile = "cpu"     # "cpu": sizes for a 2-core CPU; "full": 1 MB to 1 GB, a bigger model (GPUs)
resume = True       # skip configurations already in this machine's results files

# %%
import pandas as pd

from perflab.distributed import RankError, launch, max_world_size
from perflab.distributed.collectives import allreduce_sweep, bus_factor, check_allreduce_rank
from perflab.distributed.ddp_benchmark import ddp_configs, ddp_sweep, relative_to_naive
from perflab.device import resolve_device
from perflab.distributed.launch import raise_on_rank, resolve_backend
from perflab.distributed.parity import ddp_parity_all
from perflab.distributed.plots import plot_allreduce, plot_bucket_sweep, plot_ddp_steps
from perflab.paths import display_path, results_dir
from perflab.profiles import COMMUNICATION, get_profile

run = get_profile(COMMUNICATION, profile)
out = results_dir("07_distributed_ddp", resolve_device("auto"))
print(f"profile {profile!r}: backend {resolve_backend()}, this machine holds up to "
      f"{max_world_size()} ranks; all-reduce {run.sizes_mb} MB on {run.world_sizes} ranks")

# %% [markdown]
# ## 1. Launching ranks, and what happens when one fails
#
# `launch(fn, world_size, args)` starts the ranks, joins them into a process group and returns
# what each rank's `fn` returned. Here each rank all-reduces `[rank, 1]`: every rank gets
# `[0 + 1, 2]`.

# %%
# NBVAL_CHECK_OUTPUT
print(launch(check_allreduce_rank, 2))

# %% [markdown]
# A rank that raises must not leave the others waiting forever in a collective. Below rank 1
# raises while rank 0 waits in an all-reduce that can never complete; the launcher stops both
# and raises `RankError` here, with the failing rank and its traceback.

# %%
# NBVAL_CHECK_OUTPUT
try:
    launch(raise_on_rank, 2, (1, "rank 1 gave up"))
except RankError as error:
    print(f"RankError from rank {error.rank}; last line of its traceback:")
    print(error.rank_traceback.strip().splitlines()[-1])

# %% [markdown]
# ## 2. All-reduce: time, algorithm bandwidth and bus bandwidth
#
# For `n` bytes in `t` seconds on `p` ranks, nccl-tests report the algorithm bandwidth
# `n / t` and the bus bandwidth `n / t * 2 (p - 1) / p`: a ring all-reduce sends and receives
# `(p - 1) / p` of the data twice per rank, so bus bandwidth compares with the link's speed
# whatever the world size. Each rank times its own calls; the row keeps the slowest rank.

# %%
# NBVAL_CHECK_OUTPUT
print({p: bus_factor("all_reduce", p) for p in run.world_sizes})

# %%
allreduce = allreduce_sweep(out / "allreduce.csv", list(run.sizes_mb), list(run.world_sizes),
                            warmup=run.allreduce_warmup, steps=run.allreduce_steps,
                            resume=resume, metadata={"profile": run.as_dict()})
allreduce[["world_size", "size_mb", "status", "time_ms", "algbw_gbps", "busbw_gbps", "error"]]

# %%
fig = plot_allreduce(allreduce)
fig.savefig(out / "allreduce.png", dpi=80)

# %%
at_100 = allreduce[(allreduce["size_mb"] == 100) & (allreduce["status"] == "ok")]
print("bus bandwidth at 100 MB: " + ", ".join(
    f"{r.world_size} ranks {r.busbw_gbps:.2f} GB/s" for r in at_100.itertuples()))

# %% [markdown]
# Small all-reduces are dominated by a fixed cost per call (latency), so their bandwidth is
# low; large ones approach what the transport sustains. On a CPU, more ranks than cores also
# means ranks waiting for a core, which shows as falling bus bandwidth with the world size.
#
# ## 3. Four ways to average gradients, each checked against one process
#
# Data parallelism is exact: each rank's loss is the mean over its equal share of the global
# batch, so the average of the ranks' gradients is the gradient of the mean over the whole
# batch. The check trains each variant on 2 ranks and, on every rank, a copy on one process on
# the whole batch (AdamW, 4 steps, float64 so that only the order of additions differs); every
# rank starts from a different random model, so a missing broadcast would show. The toy model
# has tied input and output embeddings and a parameter that does not require grad; `none`
# (no synchronisation) is the negative control the check must catch.

# %%
variants = ["naive", "flat", "overlapped", "bucketed", "torch", "none"]
parity = pd.DataFrame([row for model in run.parity_models
                       for row in launch(ddp_parity_all, 2, (variants, model))[0]])
parity[["model", "parameter_tensors", "variant", "max_param_diff", "grad_spread_across_ranks",
        "grads_match_params", "frozen_untouched"]]

# %%
# NBVAL_CHECK_OUTPUT
verdict = parity.assign(matches_one_process=parity["max_param_diff"] < 1e-10,
                        same_grads_on_all_ranks=parity["grad_spread_across_ranks"] == 0)
print(verdict[["model", "variant", "matches_one_process", "same_grads_on_all_ranks",
               "grads_match_params", "frozen_untouched"]].to_string(index=False))

# %% [markdown]
# ## 4. Step time, and the share spent communicating
#
# The benchmarked model has at least 50 parameter tensors, so a per-parameter all-reduce pays
# its fixed cost many times. All variants are built in one launch and take turns, one step
# each per round, so that the machine's slow moments are shared among them. `none` is the same step without any communication: the
# communication share of a variant is `1 - none / variant`. `sync_ms` is the time spent in
# `finish_gradient_synchronization()`, the communication left after backward.

# %%
configs = ddp_configs(run.ddp_world_size, run.ddp_model, run.bucket_sizes_mb)
steps = relative_to_naive(ddp_sweep(out / "ddp_steps.csv", configs,
                                    batch_size=run.batch_per_rank, seq_len=run.seq_len,
                                    warmup=run.warmup, rounds=run.rounds, resume=resume,
                                    metadata={"profile": run.as_dict()}))
steps[["variant", "bucket_size_mb", "status", "step_ms", "sync_ms", "vs_naive", "comm_share",
       "parameter_tensors", "gradient_mb", "buckets"]]

# %%
fig = plot_ddp_steps(steps)
fig.savefig(out / "ddp_steps.png", dpi=80)

# %%
fig = plot_bucket_sweep(steps)
fig.savefig(out / "bucket_sweep.png", dpi=80)

# %%
by_variant = steps[steps["variant"] != "bucketed"].set_index("variant")["step_ms"]
bucketed = steps[steps["variant"] == "bucketed"].sort_values("step_ms")
best = bucketed.iloc[0]
print(f"{int(best.parameter_tensors)} parameter tensors, {best.gradient_mb:.1f} MB of gradients")
for variant in ("flat", "overlapped", "torch"):
    print(f"{variant:>10}: {by_variant[variant] / by_variant['naive']:.2f}x naive's step time")
print(f"  bucketed: {best.step_ms / by_variant['naive']:.2f}x naive at its best size "
      f"({best.bucket_size_mb:g} MB); {best.step_ms / by_variant['torch']:.2f}x torch DDP's")
print(f"floor: the compute-only step is {by_variant['none'] / by_variant['naive']:.2f}x naive's")
one_bucket = bucketed[bucketed["buckets"] == 1]["step_ms"]
if len(one_bucket) > 1:  # sizes at least the whole gradient: the same plan, measured twice
    print(f"noise yardstick: {len(one_bucket)} bucket sizes give the same single bucket; their "
          f"step times differ by {(one_bucket.max() / one_bucket.min() - 1):.0%}")

# %% [markdown]
# What to read from it: no variant can beat the compute-only step, so on a CPU, where compute
# dominates, the ratios to naive stay far above the ~0.3 that PyTorch's DDP reaches on GPUs
# (GPU-only: run the full profile there). Differences smaller than the noise yardstick are not
# differences. One all-reduce per gradient after backward (naive) pays the per-call
# cost for every tensor and overlaps nothing. One flat all-reduce pays it once, but only after
# backward. Per-parameter asynchronous all-reduces overlap with the rest of backward, and
# buckets combine the two: few calls, each started as soon as its gradients are ready. Very
# large buckets fill only at the end of backward (no overlap), very small ones pay the per-call
# cost again. PyTorch's DDP uses the bucketed design (25 MiB by default), with the buckets
# fixed at construction and the gradients written into the buckets directly.
#
# ## Where the results are

# %%
for path in sorted(out.iterdir()):
    print(display_path(path))
