"""``perflab check --adapters``: every check of ``attention_checks``, ``kernel_compile`` and
``distributed_checks`` on one adapters module, as one table.

The handout decides pass or fail: each check says whether the handout asks for it (``scope``),
and the exit status follows those alone; checks beyond it (causal attention where the flag may
be ignored, ragged lengths, a ``state_dict`` round trip, micro-batches, four ranks) run too and
are reported as findings, each with what goes wrong and why it matters (``--strict`` counts
them). Only the adapters of the year the file is (its names tell) are listed. The distributed
checks of one world size run in one launch (2 ranks, then 4); where a check raises in it, the
others of that launch run again together, once (a launch that dies without naming its check
runs each alone).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, fields

import pandas as pd
import torch

from perflab.measure.device import triton_available
from perflab.tools.adapters.attention_checks import GETTERS, attention_rows, isolated_attention_rows
from perflab.tools.adapters.distributed_checks import (
    AUTOCAST_TOLERANCE,
    BUCKET_SIZES_MB,
    DDP_ADAPTERS,
    FAILED_CHECK,
    FP32_TOLERANCE,
    LOW_PRECISION_TOLERANCE,
    OPTIMIZER_TOLERANCE,
    battery_rank,
)
from perflab.tools.adapters.errors import describe_traceback
from perflab.tools.adapters.kernel_compile import COMPILE_TARGETS, compile_rows
from perflab.tools.adapters.loading import (
    load_adapters,
    provided_names,
    student_root,
    year_adapters,
)
from perflab.tools.adapters.rows import BEYOND, FAILING, HANDOUT, CheckRow

#: World sizes of the distributed checks: the handout's two ranks, and four beyond it (a rank
#: count hard-coded to two passes at two).
WORLD_SIZES = (2, 4)
#: Parts of the battery, in the order they run; ``check_adapters(parts=...)`` picks some
#: ("attention" stands for both FlashAttention adapters).
PARTS = ("pytorch", "triton", "kernels", "ddp", "fsdp", "optimizer")
_ALIASES = {"attention": ("pytorch", "triton")}
COLUMNS = [f.name for f in fields(CheckRow)]


def expand_parts(parts) -> list[str]:
    """``parts`` with aliases expanded, in battery order; one clear error for unknown ones."""
    wanted = {p for part in parts for p in _ALIASES.get(part, (part,))}
    unknown = sorted(wanted - set(PARTS))
    if unknown:
        valid = ", ".join((*PARTS, *_ALIASES))
        raise ValueError(f"unknown check parts {unknown}; valid: {valid}")
    return [part for part in PARTS if part in wanted]


def check_adapters(
    spec: str,
    parts=PARTS,
    progress: Callable[[str], None] = lambda _: None,
    device: str | None = None,
) -> pd.DataFrame:
    """The table of every check of the adapters ``spec`` names (a ``.py`` path or a dotted
    module): adapter, check, case, scope ("handout" or "beyond the handout"), error,
    tolerance, status (pass, fail, error, not provided, skipped, needs a GPU), detail. Raises
    ``AdapterLoadError`` (one line) if the module cannot be imported."""
    parts = expand_parts(parts)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    module = load_adapters(spec)
    mine = year_adapters(module)
    rows: list[CheckRow] = []
    launches: list[dict] = []
    if "pytorch" in parts:
        progress("FlashAttention in PyTorch")
        rows += attention_rows(module, "pytorch", device)
    if "triton" in parts or "kernels" in parts:  # the kernels are those the adapter launches
        problem = interpreter_problem(*_installed("triton", "numpy")) if device == "cpu" else None
        if not triton_available() or problem:
            rows.append(
                CheckRow(
                    GETTERS["triton"],
                    "forward and backward",
                    status="skipped",
                    detail=problem or "Triton is not installed here",
                )
            )
        else:
            progress("FlashAttention in Triton")
            # In a child process: a kernel that crashes the interpreter costs its cases only.
            triton_rows = isolated_attention_rows(spec, "triton", device, launches)
            rows += triton_rows if "triton" in parts else []
    if "kernels" in parts and launches:
        progress(f"compiling {len(launches)} Triton kernel launch(es) for GPUs")
        rows += compile_rows(spec, launches)
    elif "kernels" in parts and triton_available():
        rows.append(_no_kernel_launched(rows))
    planned = _distributed_plan(parts, set(provided_names(module)) & mine, mine)
    rows += [row for row, _ in planned if row is not None]
    runnable = [(check, args) for row, (check, args) in planned if row is None]
    rows += _run_distributed(spec, runnable, progress, student_root(module))
    return _one_row_when_not_provided(pd.DataFrame([vars(row) for row in rows], columns=COLUMNS))


def _installed(*names: str) -> list[str | None]:
    """The installed versions of ``names`` (None for one not installed), without importing."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in names:
        try:
            found.append(version(name))
        except PackageNotFoundError:
            found.append(None)
    return found


def interpreter_problem(triton: str | None, numpy: str | None) -> str | None:
    """Why the Triton interpreter cannot run any kernel in this environment, or None: Triton
    3.5's interpreter (torch 2.9's, the 2025 course's) hands a kernel 1-element arrays where
    ``range`` needs integers, which numpy 2.4 no longer converts. An error of the tool's
    environment, not of the student's kernel."""
    if triton is None or numpy is None:
        return None

    def major_minor(text: str) -> tuple[int, int]:
        major, minor, *_ = (re.match(r"\d+", part) for part in text.split("."))
        return int(major.group()), int(minor.group())

    if major_minor(triton) < (3, 6) and major_minor(numpy) >= (2, 4):
        return (
            f"not run: the Triton interpreter of Triton {triton} fails with numpy {numpy} (a "
            "loop over tensor bounds raises 'only 0-dimensional arrays can be converted'), "
            "whatever the kernel: this environment's problem, not your code's; pip install "
            "'numpy<2.4' (or Triton 3.6 or newer with its torch)"
        )
    return None


def _no_kernel_launched(rows: list[CheckRow]) -> CheckRow:
    """The compile check's row when the Triton adapter launched no kernel here (kernels are
    compiled from the launches they make): why, as far as the Triton rows tell."""
    triton = [row for row in rows if row.adapter == GETTERS["triton"]]
    status = "skipped"
    if any(row.status == "needs a GPU" for row in triton):
        status = "needs a GPU"
        why = "the adapter refused this CPU before launching a kernel (its rows say why)"
    elif any(row.status == "not provided" for row in triton):
        why = "the Triton adapter is not provided"
    else:
        why = "the Triton adapter did not launch a kernel here (its rows say why)"
    return CheckRow(
        "triton kernels",
        "compile for " + ", ".join(COMPILE_TARGETS),
        status=status,
        detail=f"no kernel launched here, so none could be compiled: {why}",
    )


def _one_row_when_not_provided(table: pd.DataFrame) -> pd.DataFrame:
    """An adapter none of whose checks ran (absent, or raising NotImplementedError): one row
    saying so, not one per check."""
    absent = table.groupby("adapter", sort=False)["status"].transform(
        lambda statuses: (statuses == "not provided").all()
    )
    repeated = absent & table.duplicated("adapter")
    table = table[~repeated].copy()
    table.loc[absent[~repeated], ["check", "case"]] = ["all checks", ""]
    return table.reset_index(drop=True)


@dataclass(frozen=True)
class DistributedCheck:
    adapter: str
    check: str
    case: str
    scope: str
    tolerance: float
    world_size: int
    why: str = ""  # a finding's explanation, beyond the handout


_FOUR_RANKS = (
    "fails on 4 ranks although it passes on 2: ranks or the world size are "
    "assumed somewhere (the handout tests 2)"
)


def _distributed_plan(parts, provided: set[str], mine: set[str]):
    """[(a "not provided" row, or None and (the check, its rank function and arguments))]."""
    plan = []

    def add(adapter, check, case, scope, tolerance, world_size, fn, args, why=""):
        if adapter not in mine:
            return
        if adapter not in provided:
            row = CheckRow(
                adapter,
                check,
                case,
                scope,
                status="not provided",
                detail=f"{adapter} is not defined",
            )
            plan.append((row, (None, None)))
            return
        spec = DistributedCheck(adapter, check, case, scope, tolerance, world_size, why)
        plan.append((None, (spec, (fn, args))))

    if "ddp" in parts:
        for getter in DDP_ADAPTERS:
            sizes = BUCKET_SIZES_MB if getter == "get_ddp_bucketed" else (None,)
            for size in sizes:
                case = "" if size is None else f"buckets of {size:g} MB"
                add(
                    getter,
                    "vs one process (fp32)",
                    case,
                    HANDOUT,
                    FP32_TOLERANCE,
                    2,
                    "ddp",
                    (getter, "fp32", size),
                )
            size = sizes[len(sizes) // 2]
            case = "" if size is None else f"buckets of {size:g} MB"
            add(
                getter,
                "vs one process (accumulation, no_sync)",
                case,
                BEYOND,
                FP32_TOLERANCE,
                2,
                "ddp",
                (getter, "accumulation", size),
                "accumulation under no_sync() does not give one big batch's update",
            )
            add(
                getter,
                "vs one process (bf16 autocast)",
                case,
                BEYOND,
                AUTOCAST_TOLERANCE,
                2,
                "ddp",
                (getter, "bf16 autocast", size),
                "under bfloat16 autocast the gradients differ from one process's beyond "
                "bfloat16 rounding",
            )
            add(
                getter,
                "vs one process (fp32)",
                f"{case}, 4 ranks".strip(", "),
                BEYOND,
                FP32_TOLERANCE,
                4,
                "ddp",
                (getter, "fp32", size),
                _FOUR_RANKS,
            )
    if "fsdp" in parts:
        for mode, check, tolerance in (
            ("fp32", "vs one process (fp32)", FP32_TOLERANCE),
            ("fp16 compute", "vs one process (fp16 compute, fp32 master)", LOW_PRECISION_TOLERANCE),
            (
                "gradients",
                "fp16 compute: gradients fp32, parameter-shaped (error: how many are not)",
                0.0,
            ),
        ):
            add("get_fsdp", check, "", HANDOUT, tolerance, 2, "fsdp", (mode,))
        add(
            "get_fsdp",
            "vs one process (2 micro-batches)",
            "",
            BEYOND,
            FP32_TOLERANCE,
            2,
            "fsdp",
            ("accumulation",),
            "gradients accumulated over two micro-batches differ from one batch's: the second "
            "backward overwrites or misses the first's",
        )
        add(
            "get_fsdp",
            "vs one process (fp32)",
            "4 ranks",
            BEYOND,
            FP32_TOLERANCE,
            4,
            "fsdp",
            ("fp32",),
            _FOUR_RANKS,
        )
    if "optimizer" in parts:
        add(
            "get_sharded_optimizer",
            "AdamW vs unsharded (5 steps)",
            "",
            HANDOUT,
            OPTIMIZER_TOLERANCE,
            2,
            "optimizer",
            ("steps",),
        )
        add(
            "get_sharded_optimizer",
            "state_dict round trip, then 2 steps",
            "",
            BEYOND,
            OPTIMIZER_TOLERANCE,
            2,
            "optimizer",
            ("round trip",),
            "training resumed from a checkpoint (state_dict, load_state_dict) does not "
            "continue as it would have",
        )
        add(
            "get_sharded_optimizer",
            "AdamW vs unsharded (5 steps)",
            "4 ranks",
            BEYOND,
            OPTIMIZER_TOLERANCE,
            4,
            "optimizer",
            ("steps",),
            _FOUR_RANKS,
        )
    return plan


def _run_distributed(spec: str, checks: list, progress, root) -> list[CheckRow]:
    """Each world size's checks in one launch. Where a check raises, the launch ends naming
    it: that check's row comes from its own traceback, and the checks it took down with it
    run again together in one launch (one launch more per failing check); a launch that ends
    otherwise (a timeout, a rank killed) runs each of its checks alone."""
    from perflab.distributed.launch import check_world_size

    rows: dict[int, CheckRow] = {}
    for world_size in sorted({check.world_size for check, _ in checks}):
        group = [
            (i, check, call)
            for i, (check, call) in enumerate(checks)
            if check.world_size == world_size
        ]
        try:
            check_world_size(world_size)
        except ValueError as error:
            for i, check, _ in group:
                rows[i] = _row(check, {"status": "skipped", "detail": str(error)})
            continue
        progress(f"{len(group)} distributed checks on {world_size} ranks (one launch)")
        rows.update(_launch_group(spec, world_size, group, progress, root))
    return [rows[i] for i in sorted(rows)]


def _launch_group(spec, world_size, group, progress, root) -> dict[int, CheckRow]:
    from perflab.distributed.launch import RankError, launch

    rows: dict[int, CheckRow] = {}
    while group:
        try:
            results = launch(
                battery_rank,
                world_size,
                (spec, [call for _, _, call in group]),
                timeout_s=60 + 30 * len(group),
            )[0]
        except RankError as error:
            found = re.search(FAILED_CHECK.format(index=r"(\d+)"), error.rank_traceback)
            if found is None:  # not a check's exception: each alone, to tell which
                rows.update(_each_alone(spec, world_size, group, progress, root))
                return rows
            n = int(found.group(1))
            i, check, _ = group[n]
            rows[i] = _row(check, _failed_launch(error, root))
            group = group[:n] + group[n + 1 :]
            if group:
                progress(
                    f"{check.adapter}: {' '.join(filter(None, (check.check, check.case)))} "
                    f"raised on {world_size} ranks; "
                    f"the {len(group)} other check(s) of that launch run again together"
                )
            continue
        except TimeoutError:
            rows.update(_each_alone(spec, world_size, group, progress, root))
            return rows
        for (i, check, _), result in zip(group, results, strict=True):
            rows[i] = _row(check, result)
        return rows
    return rows


def _each_alone(spec, world_size, group, progress, root) -> dict[int, CheckRow]:
    from perflab.distributed.launch import RankError, launch

    rows = {}
    progress(f"a launch on {world_size} ranks ended without naming a check: each runs alone")
    for i, check, call in group:
        progress(f"{check.adapter}: {check.check} {check.case} (alone)")
        try:
            result = launch(battery_rank, world_size, (spec, [call]), timeout_s=300)[0][0]
        except (RankError, TimeoutError) as error:
            result = _failed_launch(error, root)
        rows[i] = _row(check, result)
    return rows


def _failed_launch(error: BaseException, root) -> dict:
    from perflab.distributed.launch import RankError

    if not isinstance(error, RankError):
        return {"status": "error", "detail": f"{type(error).__name__}: {error}".splitlines()[0]}
    status, detail = describe_traceback(error.rank_traceback, root)
    detail = re.sub("RuntimeError: " + FAILED_CHECK.format(index=r"\d+"), "", detail)
    return {"status": status, "detail": f"rank {error.rank}: {detail}"}


def _row(check: DistributedCheck, result: dict) -> CheckRow:
    if result["status"] != "measured":
        row = CheckRow(
            check.adapter,
            check.check,
            check.case,
            check.scope,
            status=result["status"],
            detail=result.get("detail", ""),
        )
    else:
        row = CheckRow.measured(
            check.adapter,
            check.check,
            result["error"],
            check.tolerance,
            result.get("detail", ""),
            check.case,
            check.scope,
        )
    if row.finding and not row.detail:  # the rank's own detail is the more precise
        row.detail = check.why
    elif row.finding and row.status == "error" and check.why:  # why it matters, as for fails
        row.detail = f"{check.why}: {row.detail}"
    return row


def missing_adapters(table: pd.DataFrame) -> list[str]:
    """The handout adapters of the parts checked that the module does not provide at all
    (absent, or raising ``NotImplementedError`` for every check): the course's tests fail on
    each. A check left unimplemented inside a provided adapter (the PyTorch FlashAttention's
    backward, which the handout's flash_forward allows to raise) is not counted."""
    handout = table[table["scope"] == HANDOUT]
    absent = handout.groupby("adapter", sort=False)["status"].agg(
        lambda statuses: (statuses == "not provided").all()
    )
    return [adapter for adapter, missing in absent.items() if missing]


def passed(table: pd.DataFrame, strict: bool = False) -> bool:
    """True when no check the handout asks for failed or raised (``strict``: no check at all),
    every handout adapter of the parts checked is provided (``missing_adapters``: the course's
    tests fail on a missing one; ``--parts`` checks only what is done) and at least one check
    passed or needs a GPU (the course's tests skip those on a CPU and pass; a check that could
    not run here for another reason, such as a missing Triton, is not a pass)."""
    counted = table if strict else table[table["scope"] == HANDOUT]
    return (
        not counted["status"].isin(FAILING).any()
        and not missing_adapters(table)
        and table["status"].isin(("pass", "needs a GPU")).any()
    )


def findings(table: pd.DataFrame) -> pd.DataFrame:
    """The checks beyond the handout that did not pass."""
    return table[(table["scope"] == BEYOND) & table["status"].isin(FAILING)]


def passing_adapters(table: pd.DataFrame) -> set[str]:
    """The adapters every one of whose handout checks passed (those worth timing)."""
    measured = table[(table["status"] != "not provided") & (table["scope"] == HANDOUT)]
    return {name for name, rows in measured.groupby("adapter") if (rows["status"] == "pass").all()}


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per adapter and scope: the checks and how many passed, failed or did not run
    (needs a GPU, skipped, not provided), with a status: the failure if any check failed, else
    "pass" if any passed, else why none ran (the per-case rows collapsed)."""
    grouped = table.groupby(["adapter", "scope"], sort=False)["status"]
    rows = []
    for (adapter, scope), statuses in grouped:
        counts = statuses.value_counts()
        not_run = int(sum(counts.get(s, 0) for s in ("needs a GPU", "skipped", "not provided")))
        # a failure first; else "pass" when any check passed (the rest not run, counted
        # beside it); else why none ran
        order = ["error", "fail", "pass", "not provided", "needs a GPU", "skipped"]
        status = next(s for s in order if s in counts)
        rows.append(
            {
                "adapter": adapter,
                "scope": scope,
                "checks": len(statuses),
                "passed": int(counts.get("pass", 0)),
                "failed": int(sum(counts.get(s, 0) for s in FAILING)),
                "not run": not_run,
                "status": status,
            }
        )
    return pd.DataFrame(rows)


def _number(value: float, check: str) -> str:
    """An error or tolerance with its unit: bytes of shared memory in KiB, else 1.2e-05."""
    if isinstance(value, float) and math.isnan(value):
        return ""
    if check.startswith("compiles for"):
        return f"{value / 1024:,.1f} KiB"
    return f"{value:.1e}"


def format_table(table: pd.DataFrame, width: int | None = None) -> str:
    """The table as plain text, numbers with their units and never re-read by the table
    writer (``disable_numparse``: 166,912 bytes once showed as 170000). Without ``width``: one
    markdown table, every column. With it (a terminal's columns): each adapter's rows under its
    name, the check and case wrapped to fit, and every row's detail as a numbered note below,
    no line longer than ``width`` (but a word longer than it)."""
    shown = table.copy()
    for column in ("error", "tolerance"):
        if column in shown:
            shown[column] = [
                _number(v, c) for v, c in zip(shown[column], shown["check"], strict=True)
            ]
    if width is None:
        return shown.to_markdown(index=False, disable_numparse=True)
    notes: list[str] = []
    blocks = []
    for adapter, rows in shown.groupby("adapter", sort=False):
        rows = rows.drop(columns="adapter")
        if "detail" in rows:
            marks = []
            for detail in rows.pop("detail"):
                if isinstance(detail, str) and detail.strip():
                    notes.append(detail.strip())
                    marks.append(f"[{len(notes)}]")
                else:
                    marks.append("")
            rows = rows.assign(note=marks)
        blocks.append(f"{adapter}\n" + textwrap.indent(_fitted(rows, width - 2), "  "))
    wrapped = [
        textwrap.fill(f"[{i}] {note}", width, subsequent_indent="    ", break_long_words=False)
        for i, note in enumerate(notes, start=1)
    ]
    return "\n\n".join(blocks + (["\n".join(wrapped)] if wrapped else []))


def _fitted(rows: pd.DataFrame, width: int) -> str:
    """``rows`` as a plain table no wider than ``width`` where it can be: the check and case
    columns wrapped narrower, the wider of them first, down to 12 characters each."""
    from tabulate import tabulate

    rows = rows.fillna("").astype(str)
    limits = {c: max([len(c), *(len(v) for v in rows[c])]) for c in ("check", "case") if c in rows}

    def render() -> str:
        return tabulate(
            rows,
            headers="keys",
            tablefmt="simple",
            showindex=False,
            disable_numparse=True,
            maxcolwidths=[limits.get(c) for c in rows.columns],
        )

    text = render()
    while max(map(len, text.splitlines())) > width and max(limits.values(), default=0) > 12:
        widest = max(limits, key=limits.get)
        limits[widest] = max(12, limits[widest] - 1)
        text = render()
    return text
