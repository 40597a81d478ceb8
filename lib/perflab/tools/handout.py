"""The CS336 systems handouts' problems (2026 and 2025) and where the workbook answers each.

``PROBLEMS`` lists every problem in the handouts' order, with its years and points
(``../shared/HANDOUT.md`` summarises both handouts). ``ANSWERS`` is the map from problems to
notebook sections: the table of ``docs/handout.md`` is rendered from it (``markdown_table``,
and a test holds the file to it), and ``perflab report`` reads it to
put each problem's tables, figures and concluding sentences in that problem's section.
"""

from __future__ import annotations

from dataclasses import dataclass

YEARS = ("2026", "2025")


@dataclass(frozen=True)
class Problem:
    """One problem of a handout: its name there, the years that ask it, its points (None: no
    points given) and the handout's section."""

    name: str
    years: tuple[str, ...]
    points: int | None
    section: str


@dataclass(frozen=True)
class Answer:
    """One row of the map: the ``problems`` it answers (``label`` names them and their parts),
    where (notebook and section) and how (measured / computed / GPU), and the results that
    hold the answer: file stems in the notebook's results folder (tables and figures) and
    the keys of its concluding sentences (``conclusions.csv``; a key matches its prefix)."""

    problems: tuple[str, ...]
    label: str
    year: str
    where: str
    how: str
    notebook: str
    results: tuple[str, ...] = ()
    conclusions: tuple[str, ...] = ()


_BOTH = ("2026", "2025")
_PROFILING = "Profiling and benchmarking"
_CHECKPOINTING = "Activation checkpointing"
_ATTENTION = "Attention kernels"
_DDP = "Distributed data parallel"
_ZERO = "Optimizer state sharding"
_FSDP = "Fully sharded data parallel"
_STRATEGIES = "Analysing parallelism strategies"
_LEADERBOARD = "Leaderboard"

PROBLEMS = (
    Problem("benchmarking_script", _BOTH, 4, _PROFILING),
    Problem("nsys_profile", _BOTH, 5, _PROFILING),
    Problem("mixed_precision_accumulation", _BOTH, 1, _PROFILING),
    Problem("benchmarking_mixed_precision", _BOTH, 2, _PROFILING),
    Problem("memory_profiling", _BOTH, 4, _PROFILING),
    Problem("gradient_checkpointing", ("2026",), 4, _CHECKPOINTING),
    Problem("pytorch_attention", _BOTH, 2, _ATTENTION),
    Problem("torch_compile", _BOTH, 2, _ATTENTION),
    Problem("flash_forward", _BOTH, 15, _ATTENTION),
    Problem("flash_backward", _BOTH, 5, _ATTENTION),
    Problem("flash_benchmarking", _BOTH, 5, _ATTENTION),
    Problem("FA2 leaderboard", ("2025",), None, _ATTENTION),
    Problem("distributed_communication_single_node", _BOTH, 5, _DDP),
    Problem("naive_ddp", _BOTH, 5, _DDP),
    Problem("naive_ddp_benchmarking", _BOTH, 3, _DDP),
    Problem("minimal_ddp_flat_benchmarking", _BOTH, 2, _DDP),
    Problem("ddp_overlap_individual_parameters", _BOTH, 5, _DDP),
    Problem("ddp_overlap_individual_parameters_benchmarking", _BOTH, 1, _DDP),
    Problem("ddp_overlap_bucketed", ("2025",), 8, _DDP),
    Problem("ddp_bucketed_benchmarking", ("2025",), 3, _DDP),
    Problem("communication_accounting", ("2025",), 10, _DDP),
    Problem("optimizer_state_sharding", _BOTH, 15, _ZERO),
    Problem("optimizer_state_sharding_accounting", _BOTH, 5, _ZERO),
    Problem("fsdp", ("2026",), 15, _FSDP),
    Problem("fsdp_accounting", ("2026",), 5, _FSDP),
    Problem("alternate_ring_all_reduce", ("2026",), 1, _STRATEGIES),
    Problem("data_parallel_calcs", ("2026",), 3, _STRATEGIES),
    Problem("fsdp_calcs", ("2026",), 3, _STRATEGIES),
    Problem("tp_calcs", ("2026",), 4, _STRATEGIES),
    Problem("fsdp_tp_calcs", ("2026",), 6, _STRATEGIES),
    Problem("Leaderboard", ("2026",), 10, _LEADERBOARD),
)

_DDP_BENCHMARKS = (
    "naive_ddp_benchmarking",
    "minimal_ddp_flat_benchmarking",
    "ddp_overlap_individual_parameters_benchmarking",
)
_CALCS = ("data_parallel_calcs", "fsdp_calcs", "tp_calcs", "fsdp_tp_calcs")

ANSWERS = (
    Answer(("benchmarking_script",), "benchmarking_script (a–c)", "both",
           "01: forward/backward/optimizer, warm-up, timer check",
           "measured; H100 rows for small–xl (10B out of memory)", "01",
           ("timings", "phases", "warmup"), ("backward/forward", "MFU", "warm-up", "yours")),
    Answer(("nsys_profile",), "nsys_profile (a–e)", "both",
           "02 §1–3 (tables by range; answers printed from the numbers), then the same "
           "answers for two sizes x three contexts (cpu-tiny, cpu-small x 256, 512, 1024, "
           "batch 2; --full: small, medium x 256, 512, 1024, batch 4)",
           "measured with torch.profiler; nsys (§4) GPU, not yet run", "02",
           ("naive_vs_sdpa", "a100_hotspots", "profile_grid")),
    Answer(("mixed_precision_accumulation",), "mixed_precision_accumulation", "both",
           "03 §1 (all four loops; loops 3 and 4 give the same sum)", "measured", "03"),
    Answer(("benchmarking_mixed_precision",), "benchmarking_mixed_precision (a, b)", "both",
           "03 §2 dtypes under autocast, §3 LayerNorm's error", "measured", "03"),
    Answer(("benchmarking_mixed_precision",), "benchmarking_mixed_precision (c)", "both",
           "03 §4 bfloat16 against float32 per preset, interleaved, with verdicts: the training "
           "step, and its forward, backward and optimizer apart (the same rounds)",
           "measured; GPU sizes not yet run", "03", ("bf16_vs_fp32", "bf16_vs_fp32_phases"),
           ("bf16 vs fp32", "forward: bf16", "backward: bf16", "optimizer: bf16")),
    Answer(("memory_profiling",), "memory_profiling (a, b, e)", "both",
           "04 §1 timelines, where each peaks (read from the record), and the training step's "
           "largest allocations with the operator and the Python code that made each "
           "(the profiler's `with_stack`), §2 peaks per context; §4 xl's forward and "
           "whole-step peaks at 128-2048 from a model of sizes counted on `meta`, held against "
           "the measured cpu-tiny peaks",
           "measured on cpu-tiny; xl modelled (GPU not yet run)", "04",
           ("timelines", "peak_memory")),
    Answer(("memory_profiling",), "memory_profiling (c)", "both",
           "04 §2 (the bfloat16 change of the peak, printed)", "measured", "04"),
    Answer(("memory_profiling",), "memory_profiling (d)", "both",
           "04 §3 derived = measured; §4 xl at 128/512/2048", "computed", "04"),
    Answer(("memory_profiling",), "memory_profiling (f)", "2026",
           "04 §4 what one block saves (top producers, cpu-tiny), what the whole model saves "
           "by module (`ModuleTracker`), each block's gradients found in the allocator record "
           "during backward and held against 4 bytes x its parameters, an xl block's saved "
           "bytes and gradients on `meta`",
           "measured + computed; Nsight views GPU, not yet run",
           "04", ("gradient_memory",)),
    Answer(("gradient_checkpointing",), "gradient_checkpointing (a)", "2026",
           "04 §5 the argument and `run_nested`'s code, k / ln k for k-way splits; nested "
           "peak against log2 L fitted, forwards per block = 1 + log2 L",
           "measured + computed", "04", ("depth_sweep", "depth"),
           ("checkpointing cost nested",)),
    Answer(("gradient_checkpointing",), "gradient_checkpointing (b)", "2026",
           "04 §5 every group size measured, the cost model's best at xl; §6 the best in a "
           "whole step; §4 the handout's xl figures on `meta`",
           "measured on cpu-tiny; computed at xl (measuring it there: GPU)", "04",
           ("group_sweep", "checkpointing_cost"), ("checkpointing cost single",)),
    Answer(("pytorch_attention",), "pytorch_attention", "both",
           "05 §1 sweep, §2 memory against the accounting (out-of-memory size for "
           "`gpu_memory_gib`)", "measured + computed", "05",
           ("attention", "attention_times", "yours_check")),
    Answer(("torch_compile",), "torch_compile (a, b)", "both",
           "05 §1, §3 attention compiled, §4 whole model", "measured", "05",
           ("compiled_vs_naive", "model_compile"), ("compiled", "yours")),
    Answer(("flash_forward", "flash_backward"), "flash_forward (a–c), flash_backward", "both",
           "06 §2 both implementations against float64, §3 every kernel compiled for sm_90 "
           "(sm_80, sm_100 and bf16 in the tests and the full profile)",
           "measured (Triton interpreted); the current kernels ran on an H200 (smoke, ba8372d: "
           "every kept configuration within tolerance, bf16, d = 64 and 128)", "06",
           ("compiled_kernels", "compiled_shared_memory", "yours_check")),
    Answer(("flash_benchmarking",), "flash_benchmarking", "both",
           "06 §4 sweep and verdicts; the GPU rows beside it",
           "interpreter timings on a CPU (not speeds); GPU: H200 smoke comparison of the "
           "current kernels against SDPA (bf16, d = 64, 4k and 16k tokens); H100 rows of the "
           "kernels before their rewrite (fd8348d), older code", "06",
           ("flash", "flash_benchmark", "against_naive", "long_context_memory"),
           ("sdpa vs naive", "flash_torch vs naive", "flash_triton vs naive", "yours")),
    Answer(("FA2 leaderboard",), "FA2 leaderboard", "2025",
           "06 §4 the kernel's speeds on a GPU (forward + backward, bf16, causal)",
           "GPU: the leaderboard's case timed on an H200 by the smoke command (ba8372d, "
           "`data/GPU_CHECKS.md`); the posted times are an H100's, not run there", "06",
           ("flash",)),
    Answer(("distributed_communication_single_node",), "distributed_communication_single_node",
           "both", "07 §2 all-reduce sizes x world sizes",
           "measured (Gloo, 1–100 MB; 1 GB with `--full`); NCCL GPU", "07", ("allreduce",)),
    Answer(("alternate_ring_all_reduce",), "alternate_ring_all_reduce", "2026",
           "07 §2 the ring with isend/irecv, checked, timed, (N-1)S/W fitted",
           "measured + computed", "07", ("ring", "ring_fit")),
    Answer(("naive_ddp", "ddp_overlap_individual_parameters", "ddp_overlap_bucketed"),
           "naive_ddp, ddp_overlap_individual_parameters, ddp_overlap_bucketed", "both / 2025",
           "07 §3 each against one process", "measured", "07", ("yours_check",)),
    Answer(_DDP_BENCHMARKS, "naive_ddp / minimal_ddp_flat / ddp_overlap (a) benchmarking",
           "both", "07 §4 step time, communication share, verdicts against naive",
           "measured (lm:128:8 on Gloo); xl on 2 GPUs: GPU, not yet run", "07",
           ("ddp_steps", "ddp_vs_naive"), ("none vs naive", "bucketed vs", "yours")),
    Answer(("ddp_overlap_individual_parameters_benchmarking",),
           "ddp_overlap_individual_parameters_benchmarking (b)", "both",
           "07 §4 rank 0's timeline of naive, overlapped and bucketed steps (torch.profiler), "
           "and the share of all-reduce time inside backward", "measured; Nsight on GPUs not yet",
           "07", ("ddp_timelines", "ddp_overlap")),
    Answer(("ddp_bucketed_benchmarking",), "ddp_bucketed_benchmarking (a, b)", "2025",
           "07 §4 bucket sweep, and its \"Is this what one would expect?\" from the measured "
           "overlap (a); the overhead model n_b o + s/(n_b w) fitted, b* = sqrt(s w o) (b)",
           "measured + computed", "07", ("bucket_sweep",), ("fastest bucket size",)),
    Answer(("communication_accounting",), "communication_accounting (a–d)", "2025",
           "08 §3 XXL: FP32 state and BF16 saved activations (a), bytes per device and N_FSDP "
           "for a 95 GB v5p (b), the compute-bound batch on the 16 x 4 mesh in sympy (c), "
           "options for a smaller batch, computed (d)",
           "computed (counts checked on `meta`, by autograd's hooks and `FlopCounterMode`)", "08"),
    Answer(("optimizer_state_sharding",), "optimizer_state_sharding", "both",
           "08 §1 against one process", "measured", "08"),
    Answer(("optimizer_state_sharding_accounting",), "optimizer_state_sharding_accounting (a)",
           "both", "08 §1 memory after init, before and after the step, with and without "
           "sharding (allocator record, broken down into parameters, gradients, state); xl on "
           "2 GPUs by the formula", "measured (lm:128:8, Gloo) + computed (xl)", "08",
           ("zero_memory", "zero_memory_points", "memory_per_rank")),
    Answer(("optimizer_state_sharding_accounting",),
           "optimizer_state_sharding_accounting (b, c)", "both",
           "08 §1 step with and without sharding (verdict); bytes sent against ZeRO-1",
           "measured + computed", "08", ("zero_step",), ("sharded vs unsharded", "flat + yours")),
    Answer(("fsdp",), "fsdp", "2026", "08 §2 against one process and PyTorch's FSDP",
           "measured", "08", ("yours_check", "yours_step"), ("yours fsdp",)),
    Answer(("fsdp_accounting",), "fsdp_accounting (a)", "2026",
           "08 §1 formula, §2 memory per rank", "computed + measured", "08", ("fsdp_memory",)),
    Answer(("fsdp_accounting",), "fsdp_accounting (b)", "2026",
           "08 §2 rank 0's profiled forward: each module's wait for its weights against its "
           "all-gathers and its forward, how many prefetched gathers were ready in time; "
           "prefetching 0, 1 (the handout's rule) and 2 modules ahead in forward and backward, "
           "timed in turns, with the gathers in time of each",
           "measured (lm:128:8, Gloo); xl on 2 GPUs with Nsight: GPU, not yet run", "08",
           ("fsdp_forward_timeline", "fsdp_prefetch"), ("FSDP prefetch", "FSDP gathers")),
    Answer(_CALCS, "data_parallel_calcs, fsdp_calcs, tp_calcs, fsdp_tp_calcs", "2026",
           "08 §3 the handout's FFN in symbols (sympy), the TP backward run against autograd, "
           "numbers for an H100 node", "computed", "08", ("max_devices",)),
    Answer(("Leaderboard",), "Leaderboard (8B on 2 x B200)", "2026",
           "09 §1–3 the step's phases and memory, the loss head without the logits, the ladder "
           "that keeps what helps (each change tried on the best stack so far, kept only when "
           "faster) and which bound dominates each rung (cpu-small; `small` in the full "
           "profile); §6 the 8B step's memory per GPU (fp32 or bf16 state, 1 or 2 GPUs), "
           "its time on 2 B200s modelled from counted FLOPs and bytes with the ladder's "
           "changes priced one by one, and the step sharded over ranks with FSDP; "
           "`perflab bench` with the ladder's flags",
           "measured on CPU (the sharded step on 2 Gloo ranks); the 8B step's time: a model, "
           "computed; the 8B model on 2 GPUs: GPU, not yet run", "09",
           ("baseline_phases", "baseline_memory", "head_memory", "ladder", "final_table",
            "leaderboard_memory", "leaderboard_estimate", "sharded_step"),
           ("fused head", "kept stack")),
)  # fmt: skip


def problems(year: str) -> list[Problem]:
    """The problems of the ``year``'s handout, in its order."""
    if year not in YEARS:
        raise ValueError(f"no handout for year {year!r}; valid: {', '.join(YEARS)}")
    return [problem for problem in PROBLEMS if year in problem.years]


def answers_for(problem: str) -> list[Answer]:
    """The rows of the map that answer ``problem``."""
    return [answer for answer in ANSWERS if problem in answer.problems]


def markdown_table() -> str:
    """The table of ``docs/handout.md``, rendered from ANSWERS."""
    lines = ["| problem | year | where | how |", "|---|---|---|---|"]
    lines += [f"| {a.label} | {a.year} | {a.where} | {a.how} |" for a in ANSWERS]
    return "\n".join(lines) + "\n"
