"""The smoke command: the workbook's central GPU questions in one lease call of at most 8
minutes (``.ci/gpu-check smoke``, ``python -m perflab.tools.smoke``).

A GPU box is lent for 15 minutes at a time, its start included, so the first call must answer
what matters most before anything else can fail or run out of time. ``STAGES`` run in order of
value; each is guarded (an error is a row of the summary, the next stage still runs), timed,
and saves its rows as it finishes, into the results folder of the notebook it answers for
(``data/results/<notebook>/<device>/smoke_*.csv``, each with its metadata beside it), so a run
cut short keeps what it measured. A stage whose estimate no longer fits the budget is skipped
and says so. The summary (``smoke_summary.csv`` in ``--out``) has a row per stage: its status,
seconds, and a line computed from its rows.

The stages (GPU sizes; ``SIZES["cpu"]`` runs the same code end to end on a CPU in a few
minutes, the Triton kernels interpreted, ranks on Gloo, so that a broken stage is found
before a lease is spent on it):

1. ``kernels``: every kept configuration of the three FlashAttention kernels, bfloat16 at
   head dimensions 64 and 128, against float64 (``tools.kernel_configs``).
2. ``flash``: Triton FlashAttention forward + backward against SDPA, bfloat16, causal, d = 64,
   16 heads at 4k and 16k tokens (16k is the 2025 leaderboard's case): ``do_bench`` times and
   an interleaved comparison with its verdict.
3. ``autotune``: the configurations the autotuner picks at 1 head and at 16 (4k tokens), and
   16 heads run on the 1-head choice against its own, interleaved.
4. ``decode``: the fixed-shape decode step compiled with ``mode="reduce-overhead"`` against
   eager, and how many CUDA graphs and kernel launches one profiled step makes.
5. ``distributed``: the all-reduce sweep and the DDP variants on two ranks sharing the GPU.
6. ``memory``: each block's gradients found in a CUDA allocator snapshot, against 4 bytes x
   parameters.
7. ``trace``: a training step's CUDA trace and its per-kernel summary.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from perflab.measure.device import describe
from perflab.measure.paths import data_dir, display_path, results_dir, save_table
from perflab.tools.lease import PARTIAL_EXIT

#: Seconds the whole smoke command may take (a lease call allows 10 minutes).
BUDGET_S = 480
#: How a stage skipped for lack of time begins its line; the command then exits with
#: ``PARTIAL_EXIT`` (the lease log's "partial": run it again), an error with 1, else 0.
OUT_OF_TIME = "out of time"

#: The sizes of each stage: "gpu" for a lease, "cpu" to check the command end to end here.
SIZES = {
    "gpu": {
        "kernel_dtypes": ["bfloat16"],
        "kernel_head_dims": [64, 128],
        "kernel_workers": 8,
        "flash_dtype": "bfloat16",
        "flash_heads": 16,
        "flash_seq_lens": [4096, 16384],
        "flash_rounds": 10,
        "autotune_seq_len": 4096,
        "autotune_heads": [1, 16],
        "decode_preset": "small",
        "decode_dtype": "bfloat16",
        "decode_batch": 8,
        "decode_context": 480,  # below the preset's context of 512 (the step adds a token)
        "decode_rounds": 6,
        "allreduce_sizes_mb": [1, 10, 100],
        "ddp_model": "lm:512:4",
        "ddp_seq_len": 256,
        "ddp_rounds": 6,
        "memory_preset": "small",
        "memory_seq_len": 256,
        "trace_preset": "small",
        "trace_context": 256,
    },
    "cpu": {
        "kernel_dtypes": ["float32"],
        "kernel_head_dims": [16],
        "kernel_workers": 1,
        "flash_dtype": "float32",
        "flash_heads": 2,
        "flash_seq_lens": [32, 64],
        "flash_rounds": 6,
        "autotune_seq_len": 32,
        "autotune_heads": [1, 2],
        "decode_preset": "cpu-tiny",
        "decode_dtype": "float32",
        "decode_batch": 2,
        "decode_context": 32,
        "decode_rounds": 6,
        "allreduce_sizes_mb": [0.1, 1],
        "ddp_model": "lm:64:2",
        "ddp_seq_len": 32,
        "ddp_rounds": 6,
        "memory_preset": "cpu-tiny",
        "memory_seq_len": 32,
        "trace_preset": "cpu-tiny",
        "trace_context": 32,
    },
}


@dataclass(frozen=True)
class Stage:
    """One stage: what it answers, the notebook whose results folder takes its rows, its
    estimated seconds on a GPU (the budget check), and the function that runs it."""

    name: str
    notebook: str
    question: str
    estimate_s: int
    run: Callable[[dict, torch.device, Path], str]


def _save(frame: pd.DataFrame, folder: Path, name: str, sizes: dict) -> Path:
    return save_table(frame, folder / name, metadata={"smoke_sizes": sizes, **_machine()})


def _machine() -> dict:
    return describe("cuda" if torch.cuda.is_available() else "cpu")


# --------------------------------------------------------------------------------------------
# The stages. Each returns its summary line and saves its rows in ``folder``.
# --------------------------------------------------------------------------------------------


def kernels_stage(sizes: dict, device: torch.device, folder: Path) -> str:
    from perflab.tools.kernel_configs import check_configs, config_check_line, config_jobs

    jobs = config_jobs(sizes["kernel_dtypes"], sizes["kernel_head_dims"])
    if device.type != "cuda":  # the interpreter runs 16 x 16 tiles whatever is pinned
        jobs = list({job.kernel: job for job in reversed(jobs)}.values())
    table = check_configs(jobs, str(device), workers=sizes["kernel_workers"])
    _save(table, folder, "smoke_kernel_configs.csv", sizes)
    return config_check_line(table)


def flash_stage(sizes: dict, device: torch.device, folder: Path) -> str:
    from perflab.bench.attention_timing import LEADERBOARD_CASE, flash_speed
    from perflab.measure.comparison import comparison_frame

    lines, timed_rows, compared_rows = [], [], []
    for seq_len in sizes["flash_seq_lens"]:  # one length at a time: each saved as it finishes
        timed, versus = flash_speed(
            ["sdpa", "flash_triton"],
            heads=[sizes["flash_heads"]],
            seq_lens=[seq_len],
            head_dim=64,
            dtype=sizes["flash_dtype"],
            causal=True,
            device=device,
            rounds=sizes["flash_rounds"],
        )
        compared = comparison_frame(versus)
        timed_rows.append(timed)
        compared_rows.append(compared)
        # This run's lengths so far (rows of an earlier run are replaced, not appended to).
        _save(pd.concat(timed_rows, ignore_index=True), folder, "smoke_flash_speed.csv", sizes)
        _save(pd.concat(compared_rows, ignore_index=True), folder, "smoke_flash_vs_sdpa.csv",
              sizes)  # fmt: skip
        lines.append(f"{seq_len} tokens: {compared.iloc[0]['sentence']}")
        case = LEADERBOARD_CASE
        if (sizes["flash_heads"], seq_len, sizes["flash_dtype"]) == (
            case["heads"],
            case["seq_len"],
            case["dtype"],
        ):
            flash = timed.set_index("implementation").loc["flash_triton"]
            lines.append(
                f"the 2025 leaderboard's case: {flash['device_ms']:.2f} ms ({flash['method']} "
                f"median, on {_machine()['device_name']}; the posted best, "
                f"{LEADERBOARD_BEST_MS} ms, was an H100's)"
            )
    return "; ".join(lines)


#: The 2025 FlashAttention leaderboard's best posted time (CS336 2025, section 1.3.3), on an H100.
LEADERBOARD_BEST_MS = 5.364


def autotune_choices() -> pd.DataFrame:
    """Every choice the three autotuned FlashAttention kernels have made in this process: one
    row per kernel and key (``flash_tuning.AUTOTUNE_KEY``, then the argument dtypes, which
    Triton's autotuner appends to its key) with the configuration chosen. GPU-only: the
    interpreter does not autotune."""
    from perflab.implementations.attention import flash_triton as ft
    from perflab.implementations.attention.flash_tuning import AUTOTUNE_KEY

    rows = []
    for name, tuned in (
        ("flash_forward", ft._forward),
        ("flash_backward_kv", ft._backward_kv),
        ("flash_backward_q", ft._backward_q),
    ):
        for key, config in getattr(tuned, "cache", {}).items():
            named = dict(zip(AUTOTUNE_KEY, key, strict=False))
            dtypes = " ".join(str(k) for k in key[len(AUTOTUNE_KEY) :])
            rows.append({"kernel": name, **named, "dtypes": dtypes, "config": _config_name(config)})
    return pd.DataFrame(rows, columns=["kernel", *AUTOTUNE_KEY, "dtypes", "config"])


def _config_name(config) -> str:
    from perflab.implementations.attention.flash_configs import as_tuple

    return "x".join(map(str, as_tuple(config)))


def autotune_stage(sizes: dict, device: torch.device, folder: Path) -> str:
    from perflab.bench.attention_timing import _attention_calls
    from perflab.implementations.attention import flash_triton as ft
    from perflab.implementations.attention.flash_tuning import batch_bucket, pinned_config
    from perflab.measure.comparison import compare, comparison_frame
    from perflab.measure.device import parse_dtype

    if ft.INTERPRETED:
        raise _Skip("the Triton interpreter does not autotune (GPU-only)")
    dtype, n = parse_dtype(sizes["flash_dtype"]), sizes["autotune_seq_len"]
    few, many = sizes["autotune_heads"]
    buckets = {few: batch_bucket(few), many: batch_bucket(many)}
    calls = {
        h: _attention_calls("flash_triton", h, n, 64, dtype, True, device)[1] for h in (few, many)
    }
    for call in calls.values():
        call()  # tunes each bucket (a no-op where the flash stage already did)
    torch.cuda.synchronize(device)
    choices = autotune_choices()
    chosen = choices[
        (choices["N_Q"] == n)
        & (choices["N_K"] == n)
        & (choices["D"] == 64)
        & (choices["IS_CAUSAL"] == True)  # noqa: E712 (a column of bools)
        & choices["BATCH_BUCKET"].isin(buckets.values())
        & choices["dtypes"].str.contains(str(dtype), regex=False)
    ]
    _save(chosen, folder, "smoke_autotune_choices.csv", sizes)
    by_bucket = chosen.pivot_table(
        index="kernel", columns="BATCH_BUCKET", values="config", aggfunc="first"
    )
    if by_bucket.shape != (3, 2) or by_bucket.isna().any().any():
        raise _Skip(f"the autotuner's cache lacks a choice of some kernel or bucket: {by_bucket}")
    pins = {
        h: {kernel: tuple(int(x) for x in name.split("x")) for kernel, name in by_bucket[b].items()}
        for h, b in buckets.items()
    }

    def on(heads_choice: int):  # both sides pinned: the configuration is the only difference
        def call():
            with pinned_config(pins[heads_choice]):
                return calls[many]()

        return call

    result = compare(
        on(few),
        on(many),
        rounds=sizes["flash_rounds"],
        warmup=2,
        device=device,
        names=(f"{many} heads on the {few}-head choice", f"{many} heads on their own choice"),
    )
    _save(comparison_frame([result.with_labels(heads=many, seq_len=n)]), folder,
          "smoke_autotune_vs.csv", sizes)  # fmt: skip
    changed = int((by_bucket[buckets[few]] != by_bucket[buckets[many]]).sum())
    return (
        f"{changed} of 3 kernels chose another configuration at {many} heads than at {few}; "
        f"{result.sentence()}"
    )


class _Skip(Exception):
    """A stage that cannot run here; the reason is its summary line."""


def decode_stage(sizes: dict, device: torch.device, folder: Path) -> str:
    from torch._dynamo.utils import counters

    from perflab.implementations.model import get_preset
    from perflab.lessons.nb10_decoding.inputs import inference_model
    from perflab.lessons.nb10_decoding.measurements import compile_static_step
    from perflab.lessons.nb10_decoding.roofline import decode_step
    from perflab.measure.device import parse_dtype

    model = inference_model(
        get_preset(sizes["decode_preset"]), device, parse_dtype(sizes["decode_dtype"])
    )
    batch, context = sizes["decode_batch"], sizes["decode_context"]
    skips_before = counters["inductor"]["cudagraph_skips"]
    result = compile_static_step(
        model, batch, context, rounds=sizes["decode_rounds"], mode="reduce-overhead"
    )
    step = decode_step(model, "contiguous", batch, context, compiled=True, mode="reduce-overhead")
    launches = count_launches(step, device)
    eager = count_launches(decode_step(model, "contiguous", batch, context), device, warmup=1)
    launches["eager_kernel_launches"] = eager["kernel_launches"]
    row = {
        **result.as_row(),
        "sentence": result.sentence(),
        "preset": sizes["decode_preset"],
        "dtype": sizes["decode_dtype"],
        "batch": batch,
        "context": context,
        "cudagraph_skips": counters["inductor"]["cudagraph_skips"] - skips_before,
        **launches,
    }
    _save(pd.DataFrame([row]), folder, "smoke_decode_reduce_overhead.csv", sizes)
    launched = (
        f"one compiled step made {launches['graph_launches']} CUDA graph launch(es) and "
        f"{launches['kernel_launches']} kernel launch(es) (eager: "
        f"{launches['eager_kernel_launches']})"
        if device.type == "cuda"
        else "launches not counted (no CUDA: the step runs without graphs)"
    )
    return (
        f"{launched}; {row['graphs_compiled']} graph(s) compiled in {row['compile_s']:.1f} s; "
        f"same next tokens as eager: {row['same_next_tokens']}; {row['sentence']}"
    )


#: Host calls that start work on the GPU, as the profiler names them.
GRAPH_LAUNCHES = ("cudaGraphLaunch",)
KERNEL_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def launch_counts(names: list[str]) -> dict[str, int]:
    """CUDA graph launches and kernel launches among the host events ``names``."""
    return {
        "graph_launches": sum(name in GRAPH_LAUNCHES for name in names),
        "kernel_launches": sum(name in KERNEL_LAUNCHES for name in names),
    }


def count_launches(step: Callable[[], object], device: torch.device, warmup: int = 3) -> dict:
    """``launch_counts`` of one profiled call of ``step`` after ``warmup`` calls (a CUDA graph
    is recorded on a call after the first, then replayed)."""
    from torch.profiler import ProfilerActivity

    from perflab.measure.capture import profiling
    from perflab.measure.device import synchronize

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    for _ in range(warmup):
        step()
    synchronize(device)
    with profiling(activities=activities) as profiler:
        step()
        synchronize(device)
    return launch_counts([event.name for event in profiler.events()])


def distributed_stage(sizes: dict, device: torch.device, folder: Path) -> str:
    from perflab.distributed.ddp_benchmark import ddp_comparison, ddp_configs, ddp_sweep
    from perflab.distributed.launch import place_ranks
    from perflab.lessons.nb07_distributed_ddp.allreduce_benchmark import allreduce_sweep

    meta = {"smoke_sizes": sizes}
    allreduce = allreduce_sweep(
        folder / "smoke_allreduce.csv", sizes["allreduce_sizes_mb"], [2], metadata=meta
    )
    ok = allreduce[allreduce["status"] == "ok"]
    configs = ddp_configs(2, sizes["ddp_model"], [10])
    steps = ddp_sweep(
        folder / "smoke_ddp_steps.csv",
        configs,
        batch_size=4,
        seq_len=sizes["ddp_seq_len"],
        rounds=sizes["ddp_rounds"],
        metadata=meta,
    )
    measured = steps[steps["status"] == "ok"]
    best = ok["busbw_gbps"].max() if len(ok) else float("nan")
    line = (
        f"{place_ranks(2, ('all_reduce', 'broadcast')).describe()}; all-reduce "
        f"{len(ok)} of {len(allreduce)} sizes measured, best bus bandwidth {best:.2f} GB/s; "
        f"DDP {len(measured)} of {len(configs)} variants measured"
    )
    if {"naive", "torch"} <= set(measured["variant"]):
        line += "; " + ddp_comparison(steps, "naive", "torch").sentence()
    return line


def memory_stage(sizes: dict, device: torch.device, folder: Path) -> str:
    from perflab.lessons.nb04_memory.step_memory import gradient_memory

    table, backward_ms = gradient_memory(sizes["memory_preset"], 2, sizes["memory_seq_len"], device)
    table = table.assign(
        backward_ms=backward_ms, matches_formula=table["allocated_bytes"] == table["formula_bytes"]
    )
    _save(table, folder, "smoke_gradient_memory.csv", sizes)
    after = (table["first_ms"] >= backward_ms).sum()
    return (
        f"{int(table['found'].sum())} of {int(table['gradients'].sum())} gradients found in the "
        f"allocator record; {int(table['matches_formula'].sum())} of {len(table)} modules at "
        f"exactly their formula's bytes (element size x parameters); {int(after)} of "
        f"{len(table)} allocated after backward began"
    )


def trace_stage(sizes: dict, device: torch.device, folder: Path) -> str:
    from perflab.bench.steps import BenchConfig
    from perflab.lessons.nb02_profiling.step_trace import record_step_trace
    from perflab.measure.summary import kernel_summary
    from perflab.measure.trace import load_trace

    config = BenchConfig(
        preset=sizes["trace_preset"],
        context_length=sizes["trace_context"],
        mode="train-step",
        batch_size=4,
        warmup=2,
        steps=2,
        device=str(device),
    )
    path = record_step_trace(folder / "smoke_step_trace.json.gz", config)
    summary = kernel_summary(load_trace(path))
    top = summary.with_categories().head(15)
    _save(top, folder, "smoke_kernel_summary.csv", sizes)
    shares = summary.category_shares()
    return (
        f"{len(summary.table)} distinct {summary.source} in {display_path(path)}; by category: "
        + ", ".join(f"{name} {share:.0%}" for name, share in shares.items())
    )


# Estimates: 1.4x (kernels) to several times the longest each stage took on an H200 (leases of
# 2026-11-27 and -28: kernels 55-64 s, flash 15-25 s, autotune 9 s, decode 21-25 s, distributed
# 16-20 s, memory and trace a second or two), summing to the lease plan's 240 s for the command.
# flash's old 120 s made a 170 s budget skip it after kernels' 55 s.
STAGES = (
    Stage("kernels", "06_flash_attention", "every kept kernel configuration correct", 90,
          kernels_stage),
    Stage("flash", "06_flash_attention", "Triton FlashAttention against SDPA at 4k and 16k",
          40, flash_stage),
    Stage("autotune", "06_flash_attention", "the autotuner's choice at 16 heads against 1",
          20, autotune_stage),
    Stage("decode", "10_decoding", "reduce-overhead decode step: CUDA graphs", 40,
          decode_stage),
    Stage("distributed", "07_distributed_ddp", "all-reduce and DDP on one GPU's ranks", 30,
          distributed_stage),
    Stage("memory", "04_memory", "gradients in a CUDA allocator snapshot", 10, memory_stage),
    Stage("trace", "02_profiling", "a CUDA trace's kernel summary", 10, trace_stage),
)  # fmt: skip
STAGE_NAMES = tuple(stage.name for stage in STAGES)


def run_smoke(
    stages: list[str] | None = None,
    sizes: str | None = None,
    budget_s: float = BUDGET_S,
    out: Path | None = None,
) -> pd.DataFrame:
    """Run ``stages`` (default: all, in order of value) at ``sizes`` ("gpu" or "cpu"; default:
    "gpu" where there is CUDA); the summary, one row per stage, is saved after every stage as
    ``smoke_summary.csv`` in ``out`` (default: the data folder's ``smoke/``) and returned."""
    chosen = list(stages or STAGE_NAMES)
    unknown = [name for name in chosen if name not in STAGE_NAMES]
    if unknown:
        raise ValueError(f"unknown stages {unknown}; valid: {', '.join(STAGE_NAMES)}")
    sizes = sizes or ("gpu" if torch.cuda.is_available() else "cpu")
    if sizes not in SIZES:
        raise ValueError(f"unknown sizes {sizes!r}; valid: {', '.join(SIZES)}")
    if sizes == "gpu" and not torch.cuda.is_available():
        raise ValueError("sizes 'gpu' need CUDA, which is not available here; valid here: cpu")
    device = torch.device("cuda" if sizes == "gpu" else "cpu")
    out = Path(out or data_dir() / "smoke")
    out.mkdir(parents=True, exist_ok=True)
    rows, started = [], time.perf_counter()
    for stage in (s for s in STAGES if s.name in chosen):
        elapsed = time.perf_counter() - started
        row = {"stage": stage.name, "notebook": stage.notebook, "question": stage.question}
        folder = results_dir(stage.notebook, device)
        if elapsed + stage.estimate_s > budget_s:
            line = (
                f"{OUT_OF_TIME}: {elapsed:.0f} s spent, {stage.estimate_s} s estimated, "
                f"budget {budget_s:.0f} s"
            )
            row.update(status="skipped", seconds=0.0, line=line)
        else:
            print(f"== smoke {stage.name}: {stage.question}", flush=True)
            start = time.perf_counter()
            try:
                row.update(status="ok", line=stage.run(dict(SIZES[sizes]), device, folder))
            except _Skip as reason:
                row.update(status="skipped", line=str(reason))
            except Exception as error:  # a failed stage is a row; the next stage still runs
                traceback.print_exc()
                row.update(status="error", line=f"{type(error).__name__}: {error}"[:500])
            row["seconds"] = round(time.perf_counter() - start, 1)
            if device.type == "cuda":
                torch.cuda.empty_cache()
        row["folder"] = display_path(folder)
        rows.append(row)
        print(
            f"   {row['stage']}: {row['status']} in {row['seconds']} s: {row['line']}", flush=True
        )
        save_table(
            pd.DataFrame(rows), out / "smoke_summary.csv", metadata={"sizes": sizes, **_machine()}
        )
    return pd.DataFrame(rows)


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perflab.tools.smoke", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--stages", help=f"comma-separated, of {', '.join(STAGE_NAMES)}")
    parser.add_argument("--sizes", choices=tuple(SIZES), help="default: gpu where there is CUDA")
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="seconds for all stages")
    parser.add_argument("--out", type=Path, help="folder of smoke_summary.csv")
    args = parser.parse_args(argv)
    try:
        summary = run_smoke(
            args.stages.split(",") if args.stages else None, args.sizes, args.budget_s, args.out
        )
    except ValueError as error:
        parser.error(str(error))
    for row in summary.itertuples():
        print(f"{row.stage:>12} {row.status:>8} {row.seconds:>7.1f} s  {row.line}")
    if (summary["status"] == "error").any():
        return 1
    out_of_time = summary["line"].str.startswith(OUT_OF_TIME) & (summary["status"] == "skipped")
    return PARTIAL_EXIT if out_of_time.any() else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
