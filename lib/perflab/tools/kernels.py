"""Every Triton kernel of the workbook compiled ahead of time for real GPU targets, on a CPU.

The Triton interpreter runs the kernels on a CPU but does not type-check what the compiler
rejects, so a kernel can pass every interpreted test and fail on its first GPU launch. Here
each kernel is compiled to a cubin (``triton_compile``) for each target of ``TARGETS``
(sm_80 A100, sm_90 H100, sm_100 B200), each autotune configuration, causal and not, fp16 and
bf16 by default (fp32 on request); a row per compile records registers, stack, spills, shared
memory against the target's limit, the strides widened to 64-bit offsets, compile seconds, and
the error if it failed. ``tests/test_aot_compile.py`` compiles every kernel for every target and
configuration (its docstring says which dtypes and head dimensions); notebook 06 and
``perflab kernels`` show the table.

A process that runs kernels on a CPU has them interpreted (``TRITON_INTERPRET=1``), and an
interpreted kernel cannot be compiled, so ``compile_table`` compiles in child processes that
import the kernels with ``TRITON_INTERPRET=0``; Triton caches each binary (``~/.triton``), so
repeated tables take seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field

import pandas as pd

from perflab.implementations.attention.flash_configs import (
    CANDIDATES,
    CANDIDATES_FP32,
    HEAD_DIMS,
    PREPROCESS_CONFIG,
    kept_configs,
)
from perflab.implementations.attention.flash_configs import KERNELS as FLASH_KERNELS
from perflab.measure.processes import end_group_with_caller, map_forked, own_group, usable_cores
from perflab.measure.triton_compile import TARGETS, get_target

#: dtypes a kernel may be compiled for, as Triton names them.
DTYPES = ("fp32", "fp16", "bf16")
#: Triton's defaults for a CUDA launch without a config (the weighted-sum kernels).
DEFAULT_WARPS, DEFAULT_STAGES = 4, 3


@dataclass(frozen=True)
class KernelSpec:
    """How to compile one kernel: where it lives, its argument types, its configurations."""

    name: str  # as the tables show it
    module: str
    attr: str
    pointers: dict[str, str]  # pointer argument -> "input" (the input dtype) or a Triton dtype
    floats: tuple[str, ...] = ()
    attention: bool = False  # takes D, IS_CAUSAL, PRECISION, EVEN_Q, EVEN_K; autotunes BQ, BK
    fixed: dict = field(default_factory=dict)  # constexprs of kernels that do not autotune
    head_dim: bool = False  # a kernel that does not autotune but takes D
    num_warps: int = 4  # of a kernel that does not autotune
    #: An attention kernel that does not autotune: its configurations (else flash_configs').
    configs: tuple[tuple[int, int, int, int], ...] = ()

    def load(self):
        """The kernel's ``JITFunction`` (fails in a process with ``TRITON_INTERPRET=1``)."""
        import importlib

        kernel = getattr(importlib.import_module(self.module), self.attr)
        if not hasattr(kernel, "arg_names") or type(kernel).__name__ != "JITFunction":
            raise RuntimeError(
                f"{self.name} is interpreted here (TRITON_INTERPRET=1); compile it in a process "
                "started with TRITON_INTERPRET=0, as compile_table does"
            )
        return kernel


_FORWARD = "perflab.implementations.attention.flash_forward"
_BACKWARD = "perflab.implementations.attention.flash_backward"
_PLAIN = "perflab.implementations.attention.flash_triton_plain"
_WSUM = "perflab.implementations.attention.weighted_sum"
_QKV = {"Q": "input", "K": "input", "V": "input"}
KERNELS = (
    KernelSpec(
        "flash_forward",
        _FORWARD,
        "_flash_forward_kernel",
        {**_QKV, "Out": "input", "L": "fp32"},
        ("scale",),
        attention=True,
    ),
    KernelSpec(
        "flash_backward_kv",
        _BACKWARD,
        "_flash_backward_kv_kernel",
        {**_QKV, "DO": "input", "L": "fp32", "DELTA": "fp32", "DK": "input", "DV": "input"},
        ("scale",),
        attention=True,
    ),
    KernelSpec(
        "flash_backward_q",
        _BACKWARD,
        "_flash_backward_q_kernel",
        {**_QKV, "DO": "input", "L": "fp32", "DELTA": "fp32", "DQ": "input"},
        ("scale",),
        attention=True,
    ),
    KernelSpec(
        "flash_backward_preprocess",
        _BACKWARD,
        "_flash_backward_preprocess_kernel",
        {"Out": "input", "DO": "input", "DELTA": "fp32"},
        fixed={"BQ": PREPROCESS_CONFIG[0], "EVEN_Q": False},
        head_dim=True,
        num_warps=PREPROCESS_CONFIG[1],
    ),
    KernelSpec(
        "flash_forward_plain",
        _PLAIN,
        "_plain_forward_kernel",
        {**_QKV, "Out": "input", "L": "fp32"},
        ("scale",),
        attention=True,
        configs=((64, 64, 4, 3),),
    ),
    KernelSpec(
        "weighted_sum_forward",
        _WSUM,
        "_weighted_sum_forward_kernel",
        {"X": "input", "W": "input", "Y": "input"},
        fixed={"ROWS": 16, "COLS": 32},
    ),
    KernelSpec(
        "weighted_sum_backward",
        _WSUM,
        "_weighted_sum_backward_kernel",
        {"X": "input", "W": "input", "DY": "input", "DX": "input", "DW_PARTIAL": "fp32"},
        fixed={"ROWS": 16, "COLS": 32},
    ),
)
KERNEL_NAMES = tuple(spec.name for spec in KERNELS)


@dataclass(frozen=True)
class Job:
    """One compile: a kernel, a target, a dtype and a configuration."""

    kernel: str
    target: str
    dtype: str
    head_dim: int | None = None
    causal: bool | None = None
    block_q: int | None = None
    block_k: int | None = None
    num_warps: int = DEFAULT_WARPS
    num_stages: int = DEFAULT_STAGES


def jobs(
    kernels: Iterable[str] = KERNEL_NAMES,
    targets: Iterable[str] = tuple(TARGETS),
    dtypes: Iterable[str] = ("fp16", "bf16"),
    head_dims: Iterable[int] = (128,),
    causal: Iterable[bool] = (False, True),
    configs: list[tuple[int, int, int, int]] | None = None,
) -> list[Job]:
    """Every combination: attention kernels over head dims, causal flags and autotune configs
    (those ``flash_configs`` keeps for the kernel, head dimension and dtype, unless given);
    the preprocess kernel once per head dim, the weighted sum once per dtype."""
    kernels, targets, dtypes = list(kernels), list(targets), list(dtypes)
    for name in kernels:
        if name not in KERNEL_NAMES:
            raise ValueError(f"unknown kernel {name!r}; valid: {', '.join(KERNEL_NAMES)}")
    for target in targets:
        get_target(target)
    for dtype in dtypes:
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    specs = {spec.name: spec for spec in KERNELS}
    out = []
    for name in kernels:
        spec = specs[name]
        for target in targets:
            for dtype in dtypes:
                if spec.head_dim:
                    out += [
                        Job(name, target, dtype, d, num_warps=spec.num_warps) for d in head_dims
                    ]
                if not spec.attention:
                    if not spec.head_dim:
                        out.append(Job(name, target, dtype, num_warps=spec.num_warps))
                    continue
                for d in head_dims:
                    size = 4 if dtype == "fp32" else 2
                    for is_causal in causal:
                        default = spec.configs or kept_configs(name, d, size)
                        for bq, bk, warps, stages in configs or default:
                            out.append(
                                Job(name, target, dtype, d, is_causal, bq, bk, warps, stages)
                            )
    return out


def _compile_job(job: Job) -> dict:
    """Compile ``job`` in this process (which must import the kernels uninterpreted)."""
    from perflab.measure.triton_compile import compile_kernel, resource_usage

    spec = next(s for s in KERNELS if s.name == job.kernel)
    kernel = spec.load()
    types = {n: "*" + (job.dtype if t == "input" else t) for n, t in spec.pointers.items()}
    types.update({n: "fp32" for n in spec.floats})
    constexprs = dict(spec.fixed)
    if spec.head_dim:
        constexprs["D"] = job.head_dim
    if spec.attention:
        # Ragged lengths (EVEN_* False): every mask compiled in, the most code and registers.
        constexprs.update(
            D=job.head_dim,
            IS_CAUSAL=job.causal,
            BQ=job.block_q,
            BK=job.block_k,
            PRECISION="ieee" if job.dtype == "fp32" else "tf32",
            EVEN_Q=False,
            EVEN_K=False,
        )
        constexprs = {k: v for k, v in constexprs.items() if k in kernel.arg_names}
    for name in kernel.arg_names:  # strides and sizes
        if name not in types and name not in constexprs:
            types[name] = "i32"
    # As Triton's launcher specializes them: aligned pointers, strides that are multiples of 16.
    divisible = tuple(spec.pointers) + tuple(
        n for n in kernel.arg_names if n.startswith("stride") and n not in ("stride_lb",)
    )
    target = get_target(job.target)
    row = {**asdict(job), "max_shared_bytes": target.max_shared_bytes}
    start = time.perf_counter()
    try:
        compiled = compile_kernel(
            kernel,
            types,
            constexprs,
            num_warps=job.num_warps,
            num_stages=job.num_stages,
            target=target,
            divisible=divisible,
        )
        row.update(status="ok", error="", **resource_usage(compiled))
        # Strides sign-extended to 64 bits before they multiply an index (``b * stride_qb``
        # past 2^31 elements): read from the Triton IR, where the compiler keeps the names.
        widened = re.findall(r"arith\.extsi %(stride_\w+) : i32 to i64", compiled.asm["ttir"])
        row["int64_strides"] = " ".join(sorted(set(widened)))
        row["fits_shared_memory"] = row["shared_bytes"] <= target.max_shared_bytes
    except Exception as error:  # a compile error is a row of the table, not the end of it
        lines = [line for line in str(error).splitlines() if line.strip()]
        row.update(status="error", error=f"{type(error).__name__}: {' | '.join(lines[-3:])}")
    row["compile_s"] = time.perf_counter() - start
    return row


def compile_jobs_here(job_list: list[Job], workers: int = 1) -> Iterator[dict]:
    """Compile in this process (``workers`` > 1: in a pool of child processes; 0: one per
    usable core), yielding rows in order. The caller must have started Python with
    ``TRITON_INTERPRET=0``."""
    return map_forked(_compile_job, job_list, workers, chunksize=4)


def compiler_environment() -> dict[str, str]:
    """The environment of a child process that compiles kernels: no interpreter, and Triton's
    floating-point fusion set explicitly (its default changes in Triton 3.10)."""
    return {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}


def compile_table(job_list: list[Job], workers: int | None = None) -> pd.DataFrame:
    """One row per job (``jobs()``), compiled in a child process without the Triton
    interpreter, ``workers`` compiles at a time (default: one per usable core), with a progress
    bar (seconds each when not in Triton's cache)."""
    from perflab.measure.progress import progress

    workers = workers or usable_cores()
    env = compiler_environment()
    rows = []
    command = [sys.executable, "-m", "perflab.tools.kernels", str(workers)]
    # In a group of its own: an error or an interrupt here kills the child and its workers.
    with tempfile.TemporaryFile("w+") as errors, own_group(command, env, errors) as child:
        try:
            child.stdin.write(json.dumps([asdict(job) for job in job_list]))
            child.stdin.close()
        except BrokenPipeError:  # it ended before reading them: its stderr says why, below
            with contextlib.suppress(BrokenPipeError):
                child.stdin.close()
        with progress(total=len(job_list), desc="compiling", unit="kernel") as bar:
            for line in child.stdout:
                rows.append(json.loads(line))
                bar.update()
        if child.wait() != 0:
            errors.seek(0)
            raise RuntimeError(f"ahead-of-time compile failed:\n{errors.read()[-4000:]}")
    return pd.DataFrame(rows)


_USAGE = (
    "registers",
    "stack_bytes",
    "spill_stores",
    "spill_loads",
    "shared_bytes",
    "main_loop_instructions",
)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per kernel and target, counted in compiles (a configuration compiled causal and not
    counts twice): compiles, failures, compiles over the shared-memory limit, compiles that
    spill, the most registers and the largest stack (ptxas may cap registers low and spill
    instead, so read both), the fewest and the most SASS instructions in a main loop (the
    unmasked stage: one trip per tile), compile seconds."""
    table = table.reindex(columns=[*table.columns, *(c for c in _USAGE if c not in table)])
    ok = table["status"] == "ok"
    grouped = table.assign(
        failed=~ok,
        over_limit=ok & (table["shared_bytes"] > table["max_shared_bytes"]),
        spills=table["spill_stores"].fillna(0) > 0,
    ).groupby(["kernel", "target"], sort=False)
    return grouped.agg(
        compiles=("status", "size"),
        failed=("failed", "sum"),
        compiles_over_shared_limit=("over_limit", "sum"),
        compiles_spilling=("spills", "sum"),
        max_registers=("registers", "max"),
        max_stack_bytes=("stack_bytes", "max"),
        main_loop_min=("main_loop_instructions", "min"),
        main_loop_max=("main_loop_instructions", "max"),
        compile_s=("compile_s", "sum"),
    ).reset_index()


def compile_line(table: pd.DataFrame) -> str:
    """A compile table in one line: compiles, kernels, targets, failures, FlashAttention
    compiles that spill, compiles over the shared-memory limit."""
    flash = table["kernel"].str.startswith("flash")
    spilling = int((flash & (table["spill_stores"].fillna(0) > 0)).sum())
    over = int((table["shared_bytes"] > table["max_shared_bytes"]).sum())
    targets = ", ".join(dict.fromkeys(table["target"]))
    return (
        f"{len(table)} compiles of {table['kernel'].nunique()} kernels for {targets}; failed: "
        f"{int((table['status'] != 'ok').sum())}; FlashAttention compiles that spill: "
        f"{spilling}; over the shared-memory limit: {over}"
    )


def over_shared_limit(table: pd.DataFrame) -> pd.DataFrame:
    """The compiled configurations that need more shared memory than their target has: the
    ones ``flash_triton``'s autotuner prunes on that GPU before benchmarking."""
    ok = table[table["status"] == "ok"]
    over = ok[ok["shared_bytes"] > ok["max_shared_bytes"]]
    columns = [
        "kernel",
        "target",
        "dtype",
        "head_dim",
        "causal",
        "block_q",
        "block_k",
        "num_warps",
        "num_stages",
        "shared_bytes",
        "max_shared_bytes",
    ]
    return over[columns].reset_index(drop=True)


def pruned_configs(table: pd.DataFrame) -> pd.DataFrame:
    """Per kernel, target and dtype: how many distinct autotune configurations do not fit the
    target's shared memory, and which (BQxBK/warps/stages)."""
    over = over_shared_limit(table).drop_duplicates(
        ["kernel", "target", "dtype", "block_q", "block_k", "num_warps", "num_stages"]
    )
    label = over.apply(
        lambda r: f"{r.block_q:.0f}x{r.block_k:.0f}/{r.num_warps}w/{r.num_stages}s", axis=1
    )
    grouped = over.assign(config=label).groupby(["kernel", "target", "dtype"], sort=False)
    return grouped["config"].agg(pruned="size", configs=", ".join).reset_index()


def spill_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Per warps and stages of the attention kernels' configurations: compiles, compiles that
    spill registers, and those that spill while using at most 64 registers per thread."""
    rows = table[table["block_q"].notna() & (table["status"] == "ok")]
    rows = rows.assign(
        spills=rows["spill_stores"] > 0,
        spills_with_few_registers=(rows["spill_stores"] > 0) & (rows["registers"] <= 64),
    )
    grouped = rows.groupby(["num_warps", "num_stages"])
    return grouped.agg(
        compiles=("spills", "size"),
        spilling=("spills", "sum"),
        spilling_with_at_most_64_registers=("spills_with_few_registers", "sum"),
    ).reset_index()


def plot_shared_memory(table: pd.DataFrame):
    """Shared memory per autotune configuration of each attention kernel, one panel per
    kernel, bars per target, the targets' limits as dashed lines."""
    import matplotlib.pyplot as plt

    flash = table[(table["status"] == "ok") & table["block_q"].notna()].copy()
    flash["config"] = flash.apply(
        lambda r: f"{r.block_q:.0f}x{r.block_k:.0f} w{r.num_warps} s{r.num_stages}", axis=1
    )
    kernels = list(dict.fromkeys(flash["kernel"]))
    targets = list(dict.fromkeys(flash["target"]))
    fig, axes = plt.subplots(1, len(kernels), figsize=(4 * len(kernels), 3.6), sharey=True)
    for ax, kernel in zip(list(getattr(axes, "flat", [axes])), kernels, strict=True):
        rows = flash[flash["kernel"] == kernel]
        per = (
            rows.pivot_table(
                index="config", columns="target", values="shared_bytes", aggfunc="max", sort=False
            )[targets]
            / 1024
        )
        per.plot.bar(ax=ax, width=0.8)
        for i, target in enumerate(targets):
            limit = TARGETS[target].max_shared_bytes / 1024
            ax.axhline(limit, color=f"C{i}", linestyle="--", linewidth=1)
        ax.set_title(kernel)
        ax.set_xlabel("BQ x BK, warps, stages")
        ax.set_ylabel("shared KiB (dashed: limit)")
    fig.tight_layout()
    return fig


def search(element_size: int = 2, workers: int | None = None):
    """Every candidate of every kernel and head dimension compiled for sm_80, sm_90 and
    sm_100, causal and not (ragged lengths: every mask compiled in), in fp16 (``element_size``
    2) or fp32 (4): the compile table of ``perflab.tools.kernels`` (minutes on a CPU; Triton's
    cache makes a second run fast)."""
    dtype = {2: "fp16", 4: "fp32"}[element_size]
    candidates = CANDIDATES if element_size == 2 else CANDIDATES_FP32
    job_list = jobs(kernels=FLASH_KERNELS, dtypes=(dtype,), head_dims=HEAD_DIMS, configs=candidates)
    return compile_table(job_list, workers)


def fitting(table):
    """Per kernel, head dimension and configuration of a compile table: whether every compile
    of it (each target, dtype, causal flag) succeeded without spilling and within shared
    memory (the rule of this module), whether all succeeded within shared memory, and the
    most spill stores of any of them."""
    config = ["block_q", "block_k", "num_warps", "num_stages"]
    ok = table["status"] == "ok"
    within = ok & (table["shared_bytes"] <= table["max_shared_bytes"])
    spills = table["spill_stores"].where(ok)
    return (
        table.assign(fits=within & (spills.fillna(1) == 0), within_shared=within, spills=spills)
        .groupby(["kernel", "head_dim", *config], sort=False)
        .agg(
            fits=("fits", "all"),
            within_shared=("within_shared", "all"),
            worst_spill_stores=("spills", "max"),
        )
        .reset_index()
    )


def choose(fits) -> dict[str, dict[int, list[tuple[int, int, int, int]]]]:
    """The configurations to keep from ``fitting``'s table, per kernel and head dimension: for
    each tile pair (BQ, BK) of which some configuration fits everywhere, one: the deepest
    pipeline that fits (more loads in flight hide more memory latency), then 4 warps for tiles
    of up to 64 x 64 and 8 for larger ones (a warp per 16 rows of a 64-row tile, the choice of
    Triton's fused-attention tutorial), else whichever fits. Every tile pair is kept: large
    tiles reuse each loaded byte more, small ones make more programs for short sequences and
    few heads; the autotuner measures which wins per shape.

    Where no configuration fits everywhere (float32 at head dimension 128), the one that spills
    least while within shared memory is kept alone: that kernel still runs correctly, slower
    (``spilling`` lists these)."""
    kept: dict[str, dict[int, list]] = {}
    for (kernel, head_dim), rows in fits.groupby(["kernel", "head_dim"]):
        ok = rows[rows["fits"]]
        chosen = []
        for (bq, bk), tile in ok.groupby(["block_q", "block_k"]):
            preferred_warps = 4 if bq * bk <= 64 * 64 else 8
            best = (
                tile.assign(warps_rank=(tile["num_warps"] != preferred_warps).astype(int))
                .sort_values(["num_stages", "warps_rank"], ascending=[False, True])
                .iloc[0]
            )
            chosen.append((int(bq), int(bk), int(best["num_warps"]), int(best["num_stages"])))
        if not chosen:
            runs = rows[rows["within_shared"]].sort_values(
                ["worst_spill_stores", "block_q", "block_k"]
            )
            if runs.empty:
                continue
            best = runs.iloc[0]
            chosen.append(
                tuple(int(best[c]) for c in ("block_q", "block_k", "num_warps", "num_stages"))
            )
        kept.setdefault(kernel, {})[int(head_dim)] = sorted(chosen, key=lambda c: (c[0] * c[1], c))
    return kept


def spilling(fits) -> list[tuple[str, int]]:
    """(kernel, head dimension) pairs of ``fitting``'s table of which no configuration fits
    everywhere: those ``choose`` keeps a spilling configuration for."""
    fit_any = fits.groupby(["kernel", "head_dim"])["fits"].any()
    return [(kernel, int(head_dim)) for (kernel, head_dim), ok in fit_any.items() if not ok]


def _print_search(element_size: int) -> None:
    """The search's table and the configurations ``choose`` keeps (``python -m
    perflab.tools.kernels search [ELEMENT_SIZE]``)."""
    fits = fitting(search(element_size))
    print(fits.to_string(index=False))
    for kernel, by_dim in choose(fits).items():
        for head_dim, configs in by_dim.items():
            print(f"{kernel} d={head_dim}: {configs}")


def _main() -> None:
    """Child process: read jobs as JSON on stdin, print one JSON row per compile; or, with
    ``search [ELEMENT_SIZE]``, the configuration search."""
    if sys.argv[1:2] == ["search"]:
        _print_search(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
        return
    end_group_with_caller()
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    job_list = [Job(**job) for job in json.loads(sys.stdin.read())]
    for row in compile_jobs_here(job_list, workers):
        print(json.dumps(row), flush=True)


def structure_cost(
    targets=("sm_90",),
    dtype: str = "fp16",
    head_dim: int = 64,
    config: tuple[int, int, int, int] = (64, 64, 4, 3),
) -> pd.DataFrame:
    """The plain one-loop forward (``flash_triton_plain``) and the lean two-stage forward
    (``flash_forward``) compiled alike (causal, ragged lengths, one configuration) for each
    target: the SASS instructions of each loop, the main loop's, registers and spills."""
    kernels = ("flash_forward_plain", "flash_forward")
    job_list = jobs(
        kernels=kernels,
        targets=targets,
        dtypes=(dtype,),
        head_dims=(head_dim,),
        causal=(True,),
        configs=[config],
    )
    table = compile_table(job_list)
    columns = [
        "kernel",
        "target",
        "loop_instructions",
        "main_loop_instructions",
        "registers",
        "spill_stores",
        "shared_bytes",
    ]
    return table.reindex(columns=columns)


def structure_findings(table: pd.DataFrame) -> list[str]:
    """Per target, a sentence from ``structure_cost``'s table: the instructions one trip of
    each kernel's main loop issues, and how many fewer the lean one's does."""
    sentences = []
    for target, rows in table.groupby("target", sort=False):
        by = rows.set_index("kernel")
        plain, lean = (
            by.loc[name, "main_loop_instructions"]
            for name in ("flash_forward_plain", "flash_forward")
        )
        sentences.append(
            f"{target}: one tile of the plain forward's loop issues {plain:.0f} SASS "
            f"instructions, the lean forward's unmasked loop {lean:.0f} ({1 - lean / plain:.0%} "
            f"fewer; its masked stage, for the diagonal and the last tile, "
            f"{by.loc['flash_forward', 'loop_instructions'].split()[-1]})"
        )
    return sentences


if __name__ == "__main__":
    _main()
