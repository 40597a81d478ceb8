"""``perflab`` on the command line (also ``python -m perflab``).

    perflab run [NOTEBOOK ...] [--full | --lease] [-p NAME VALUE ...] [--output DIR]
    perflab bench --preset NAME --mode MODE [--context-length N] [--batch-size B] [--warmup W]
                  [--steps N] [--dtype D] [--device D] [--d-model D] [--d-ff F] [--num-layers L]
                  [--num-heads H] [--vocab-size V] [--qkv {fused,separate}]
                  [--attention {naive,flash,sdpa}]
                  [--head {plain,fused}] [--optimizer {for-loop,foreach,fused}] [--compile]
                  [--checkpoint-group N] [--memory] [--format {table,json}]
    perflab bench --mode decode --preset NAME [--batch-size B] [--context-length N]
                  [--cache {none,contiguous,paged}] [--compile [--freeze]] [--dtype D]
                  [--format json]
    perflab hotspots TRACE [--compare OTHER] [--top K] [--format {table,csv}]
    perflab check-results DIR
    perflab report [--results [LABEL=]DIR ...] [--year 2026|2025] [--output DIR]
    perflab noise-check [--runs N] [--burst | --simulate]
    perflab kernels [--target sm_80|sm_90|sm_100 ...] [--dtype fp16 ...] [--head-dim D ...]
                    [--summary] [--format {table,csv}]

``run`` executes notebooks with papermill (``--full``: each notebook at the full sizes of
``perflab.settings.FULL_SIZES``, for a GPU); ``bench`` times one configuration, any model shape and
context, with notebook 09's optimisations as flags (``--memory``: and the peak memory of one step;
the command that ``nsys profile`` wraps in notebook 02; ``--mode decode``: one decode step against
its roofline, with the copy bandwidth and matmul peak measured in the same run,
``perflab.lessons.nb10_decoding.roofline``); ``hotspots`` analyses a Chrome/Kineto trace, or
compares a baseline trace with an optimized one; ``kernels`` compiles every Triton kernel of the
workbook for GPU targets (no GPU needed) and prints registers, spills and shared memory per
configuration; ``check-results`` flags contradictions in saved results (exit 1 if any); ``report``
writes every table and figure of one or more results folders, with its provenance, as Markdown and
HTML (tables also as LaTeX and Typst), and a write-up by handout problem as Typst and PDF
(``perflab.tools.writeup``); ``noise-check`` measures how often ``perflab.bench.compare`` calls
identical work different (A/A) and finds a 2x difference (A/B); ``--simulate``: the intervals'
actual coverage against their stated confidence and the false-alarm rate, simulated at every
round count (``perflab.measure.simulate``). Bad arguments exit with status 2 and a one-line
message naming the valid choices."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import torch

import perflab
from perflab.bench.steps import BenchConfig, run_benchmark
from perflab.measure.paths import NOTEBOOKS_DIR, REPO_ROOT, data_dir
from perflab.measure.sweep import is_out_of_memory
from perflab.settings import full_sizes, lease_sizes
from perflab.tools.handout import YEARS


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: 'perflab bench: error: ...'."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is not >= {minimum}")
        return value

    return parse


def available_notebooks(directory: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The workbook's notebooks, in order."""
    return sorted(p for p in directory.glob("[0-9][0-9]_*.ipynb"))


def resolve_notebook(name: str, directory: Path = NOTEBOOKS_DIR) -> Path:
    """'01', '01_benchmarking', '01_benchmarking.ipynb' or a path -> the notebook's path."""
    path = Path(name)
    if path.suffix == ".ipynb" and path.exists():
        return path
    notebooks = available_notebooks(directory)
    matches = [p for p in notebooks if name in (p.name, p.stem, p.stem.split("_", 1)[0])]
    if len(matches) != 1:
        valid = ", ".join(p.stem for p in notebooks) or f"none found in {directory}"
        raise ValueError(f"unknown notebook {name!r}; valid: {valid}")
    return matches[0]


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: The text a widget leaves without its state, e.g. "interactive(children=(Dropdown(...": nothing
#: to read (a progress bar's text, "sweep: 100%|####| 4/4", is kept).
_WIDGET_REPR = re.compile(r"^[A-Za-z]+\(children=\(")


def _is_widget_repr(output: dict) -> bool:
    """An output left with nothing but a widget's repr, or nothing at all (its view dropped)."""
    if "data" not in output:
        return False
    data = output["data"]
    return not data or (
        set(data) == {"text/plain"} and bool(_WIDGET_REPR.match("".join(data["text/plain"])))
    )


def _merge_streams(outputs: list) -> list:
    """Consecutive outputs of one stream (stdout, stderr) as one: how printed text is split into
    messages depends on when the kernel flushed, not on what was printed."""
    merged = []
    for output in outputs:
        last = merged[-1] if merged else None
        if (
            output.get("output_type") == "stream"
            and last is not None
            and last.get("output_type") == "stream"
            and last["name"] == output["name"]
        ):
            last["text"] = "".join(last["text"]) + "".join(output["text"])
        else:
            merged.append(output)
    return merged


def _clean_executed(path: Path, keep_timings: bool = False) -> None:
    """Leave in an executed notebook only what a re-run with nothing changed reproduces:
    papermill's record (start and end times, per-cell durations) and Jupyter's per-cell
    execution times are dropped, so that ``git diff`` of a re-run notebook shows only changed
    outputs. With ``keep_timings`` they stay (for finding slow cells), without the paths of the
    machine that ran the notebook. Widgets keep no state in a committed notebook: their views
    are dropped, a progress bar stays as its text, a control (re-run to use it) leaves
    nothing. Consecutive stream outputs are merged (where the kernel split them varies).
    """
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    if keep_timings:
        record = notebook.metadata.get("papermill", {})
        for key in ("input_path", "output_path"):
            if record.get(key):
                record[key] = Path(record[key]).name
    else:
        for key in ("papermill", "widgets"):
            notebook.metadata.pop(key, None)
        for cell in notebook.cells:
            for key in ("papermill", "execution", "ExecuteTime"):
                cell.metadata.pop(key, None)
    for cell in notebook.cells:  # no widget state is kept: only the text of a widget stays
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_VIEW, None)
        if "outputs" in cell:
            cell["outputs"] = _merge_streams([o for o in cell["outputs"] if not _is_widget_repr(o)])
    nbformat.write(notebook, path)


def parse_parameter_value(text: str) -> object:
    """A Python literal (10, 0.5, True, None, ["small"]) or else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _from_here(parameters: dict) -> None:
    """Notebooks run in ``notebooks/``: an ``adapters`` path given relative to where ``perflab
    run`` was started becomes absolute, and a ``model`` module is imported from there too (this
    folder goes on the kernel's ``PYTHONPATH``). So does a relative ``$PERFLAB_DATA_DIR``,
    which the kernels inherit: read in ``notebooks/`` it would file rows under
    ``notebooks/<dir>``."""
    data = os.environ.get("PERFLAB_DATA_DIR")
    if data and not Path(data).is_absolute():
        os.environ["PERFLAB_DATA_DIR"] = str(Path(data).expanduser().resolve())
    adapters = parameters.get("adapters")
    if isinstance(adapters, str) and (adapters.endswith(".py") or "/" in adapters):
        parameters["adapters"] = str(Path(adapters).expanduser().resolve())
    if parameters.get("model"):
        here = os.getcwd()
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if here not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([here, *paths])


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import papermill

    from perflab.tools.kernel_client import LookingKernelManager

    try:
        notebooks = [resolve_notebook(n) for n in args.notebooks] or available_notebooks()
    except ValueError as error:
        parser.error(str(error))
    if not notebooks:
        parser.error(f"no notebooks found in {NOTEBOOKS_DIR}")
    parameters = {name: parse_parameter_value(value) for name, value in args.parameter or []}
    _from_here(parameters)
    # Each notebook gets the parameters it declares; a name that no notebook declares is an error.
    declared = {notebook: set(papermill.inspect_notebook(str(notebook))) for notebook in notebooks}
    everywhere = set().union(*declared.values())
    unknown = sorted(set(parameters) - everywhere)
    if unknown:
        names = ", ".join(n.stem for n in notebooks)
        parser.error(
            f"no parameter {', '.join(unknown)} in {names}; valid: {', '.join(sorted(everywhere))}"
        )
    # perflab's own output/ by default, never the folder it was run from: a student running it
    # from their course checkout would otherwise hand the executed notebooks in with their code.
    output = (Path(args.output) if args.output else REPO_ROOT / "output").resolve()
    output.mkdir(parents=True, exist_ok=True)
    failed = []
    total_start = time.perf_counter()
    for notebook in notebooks:
        start = time.perf_counter()
        target = output / notebook.name
        print(f"== {notebook.stem} -> {target}", flush=True)
        try:
            own = (
                lease_sizes(notebook.stem)
                if args.lease
                else full_sizes(notebook.stem)
                if args.full
                else {}
            )
            own.update({k: v for k, v in parameters.items() if k in declared[notebook]})
            papermill.execute_notebook(
                str(notebook),
                str(target),
                parameters=own,
                cwd=str(notebook.parent),
                kernel_manager_class=LookingKernelManager,  # no endless wait for a reply
            )
            _clean_executed(target, args.keep_timings)
        except papermill.PapermillExecutionError as error:
            failed.append(notebook.stem)
            print(
                f"!! {notebook.stem} failed in cell {error.exec_count}: {error.ename}: "
                f"{error.evalue}",
                file=sys.stderr,
            )
        except Exception as error:  # a dead kernel, a malformed notebook: report, go on
            failed.append(notebook.stem)
            print(f"!! {notebook.stem} failed: {type(error).__name__}: {error}", file=sys.stderr)
        print(f"   {notebook.stem}: {time.perf_counter() - start:.1f} s", flush=True)
    print(
        f"== {len(notebooks)} notebooks in {(time.perf_counter() - total_start) / 60:.2f} min; "
        f"{len(failed)} failed{': ' + ', '.join(failed) if failed else ''}"
    )
    return 1 if failed else 0


_TABLE_FIELDS = (
    "preset",
    "d_model",
    "d_ff",
    "num_layers",
    "num_heads",
    "vocab_size",
    "num_parameters",
    "context_length",
    "batch_size",
    "mode",
    "dtype",
    "attention",
    "head",
    "optimizer",
    "compile",
    "checkpoint_group",
    "device",
    "device_name",
    "warmup",
    "steps",
    "mean_s",
    "std_s",
    "median_s",
    "min_s",
    "max_s",
    "p20_s",
    "p80_s",
    "tokens_per_s",
    "achieved_flops_per_s",
    "peak_MiB",
)


_DECODE_FIELDS = (
    "preset",
    "num_parameters",
    "batch_size",
    "context_length",
    "cache",
    "compile",
    "freeze",
    "dtype",
    "device",
    "device_name",
    "warmup",
    "steps",
    "first_call_s",
    "median_s",
    "median_ci_low_s",
    "median_ci_high_s",
    "median_ci_level",
    "unstable",
    "tokens_per_s",
    "bytes_per_token",
    "flops_per_token",
    "copy_bytes_per_s",
    "peak_flops_per_s",
    "memory_bound_tokens_per_s",
    "compute_bound_tokens_per_s",
    "bound",
    "fraction_of_roofline",
    "step_bytes",
    "last_level_cache_bytes",
)
# what --mode decode takes from perflab bench's options; the others are the training modes'
_DECODE_OPTIONS = (
    "preset",
    "batch_size",
    "context_length",
    "cache",
    "compile",
    "freeze",
    "dtype",
    "device",
    "warmup",
    "steps",
    "format",
    "mode",
)


def _print_row(row: dict, names: tuple[str, ...]) -> None:
    width = max(map(len, names))
    for name in (n for n in names if n in row):
        value = row[name]
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        print(f"{name:<{width}}  {text}")


def _bench_decode(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``perflab bench --mode decode``: one decode step timed against its roofline
    (``perflab.lessons.nb10_decoding.roofline.decode_benchmark``)."""
    from perflab.implementations.model import get_preset
    from perflab.lessons.nb10_decoding.roofline import DecodeConfig, decode_benchmark

    ignored = [
        "--" + name.replace("_", "-")
        for name in vars(args)
        if name not in (*_DECODE_OPTIONS, "handler", "subparser", "command")
        and getattr(args, name) != parser.get_default(name)
    ]
    if ignored:
        verb = "applies" if len(ignored) == 1 else "apply"
        parser.error(
            f"{', '.join(ignored)} {verb} to the training modes, not to --mode decode "
            "(which takes --preset, --batch-size, --context-length, --cache, --compile, "
            "--freeze, --dtype, --device, --warmup, --steps, --format)"
        )
    try:
        preset = get_preset(args.preset)
        context = preset.context_length - 1 if args.context_length is None else args.context_length
        config = DecodeConfig(
            args.preset,
            args.batch_size,
            context,
            args.cache or "contiguous",
            args.compile,
            args.dtype,
            args.device,
            args.warmup,
            args.steps,
            args.freeze,
        )
        row, timing = decode_benchmark(config)
    except ValueError as error:
        parser.error(str(error))
    if args.format == "json":
        print(json.dumps({**row, "samples_s": list(timing.samples)}))
    else:
        _print_row(row, _DECODE_FIELDS)
    return 0


def _bench(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from perflab.lessons.nb04_memory.step_memory import step_peak_memory

    if args.mode == "decode":
        return _bench_decode(args, parser)
    for name in ("cache", "freeze"):
        if getattr(args, name) not in (None, False):
            parser.error(f"--{name} applies to --mode decode only")
    try:
        config = BenchConfig.from_arguments(args)
        row, timing = run_benchmark(config)
        if args.memory:  # a fresh model: the peak of one step after the warm-up steps
            peak = step_peak_memory(config.as_dict())["peak_bytes"]
            row.update(peak_bytes=peak, peak_MiB=peak / 2**20)
    except ValueError as error:
        parser.error(str(error))
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        print(f"perflab bench: out of memory: {str(error).splitlines()[0]}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(json.dumps({**row, "samples_s": list(timing.samples)}))
    else:
        _print_row(row, _TABLE_FIELDS)
    return 0


def _hotspots(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from perflab.measure.hotspots import compare_traces, kernel_hotspots, short_name

    try:
        if args.compare is None:
            table = kernel_hotspots(args.trace, top=args.top)
        else:
            comparison = compare_traces(args.trace, args.compare)
    except ValueError as error:  # TraceError included: one line, no traceback
        parser.error(str(error))
    if args.compare is None:
        if args.format == "csv":
            print(table.to_csv(index=False), end="")
            return 0
        print(f"{Path(args.trace).name}: {table['source'].iloc[0]}")
        shown = table.drop(columns="source").assign(
            name=table["name"].map(short_name), share=(100 * table["share"]).round(2)
        )
        print(shown.rename(columns={"share": "share_%"}).to_string(index=False))
        return 0
    kernels = comparison.kernels.head(args.top) if args.top else comparison.kernels
    if args.format == "csv":
        print(kernels.to_csv(index=False), end="")
        return 0
    print(f"{Path(args.trace).name} -> {Path(args.compare).name}: {comparison.source}")
    print(kernels.assign(name=kernels["name"].map(short_name)).to_string(index=False))
    print()
    print(comparison.categories.to_string(index=False))
    print()
    print(comparison.verdict)
    return 0


def _kernels(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from perflab.measure.device import triton_available
    from perflab.tools.kernels import KERNEL_NAMES, compile_table, jobs, summary

    if not triton_available():
        print(
            "perflab kernels: Triton is not installed (it ships for Linux only); "
            "pip install triton on Linux",
            file=sys.stderr,
        )
        return 2

    try:
        job_list = jobs(
            kernels=args.kernel or KERNEL_NAMES,
            targets=args.target,
            dtypes=args.dtype,
            head_dims=args.head_dim,
        )
    except ValueError as error:
        parser.error(str(error))
    table = compile_table(job_list)
    shown = summary(table) if args.summary else table
    if args.format == "csv":
        print(shown.to_csv(index=False), end="")
    else:
        columns = [c for c in shown.columns if c not in ("error", "max_shared_bytes")]
        print(shown[columns].to_string(index=False))
    failed = table[table["status"] != "ok"]
    for _, row in failed.iterrows():
        print(f"{row['kernel']} {row['target']} {row['dtype']}: {row['error']}", file=sys.stderr)
    return 1 if len(failed) else 0


def _check_results(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from perflab.tools.check_results import check_results, checked_files

    try:
        findings = check_results(args.directory)
    except ValueError as error:
        parser.error(str(error))
    for row in findings.itertuples():
        print(f"{row.file}: {row.rule}: {row.detail}")
    count = checked_files(args.directory)
    print(f"{count} result files checked, {len(findings)} contradictions")
    return 1 if len(findings) else 0


def _noise_check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.simulate:
        from perflab.measure.simulate import SIMULATED_ROUNDS, coverage_table

        for noise in ("quiet", "bursty"):
            table = coverage_table(
                SIMULATED_ROUNDS, runs=args.runs, noise=noise, adaptive_from=(8,)
            )
            print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        return 0
    from perflab.measure.comparison import noise_check

    table = noise_check(runs=args.runs, burst=args.burst)
    summary = table.groupby("test").agg(
        runs=("verdict", "size"),
        same=("verdict", lambda v: int((v == "same").sum())),
        slower=("verdict", lambda v: int((v == "slower").sum())),
        faster=("verdict", lambda v: int((v == "faster").sum())),
        inconclusive=("verdict", lambda v: int((v == "inconclusive").sum())),
        median_ratio=("ratio_b_over_a", "median"),
        min_ratio=("ratio_b_over_a", "min"),
        max_ratio=("ratio_b_over_a", "max"),
    )
    print(summary.to_string())
    aa, ab = summary.loc["A/A"], summary.loc["A/B 2x"]
    burst = " (under a burst of competing work)" if args.burst else ""
    print(
        f"A/A false alarms: {int(aa.faster + aa.slower)} of {int(aa.runs)}; "
        f"A/B 2x detected: {int(ab.slower)} of {int(ab.runs)}{burst}"
    )
    return 0


def _check_adapters(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from perflab.tools.adapters import (
        PARTS,
        AdapterLoadError,
        check_adapters,
        findings,
        format_table,
        missing_adapters,
        passed,
        results_name,
        summary,
    )

    def progress(what: str) -> None:
        print(f"checking {what} ...", file=sys.stderr, flush=True)

    try:
        folder = results_name(args.adapters)
        print(
            f"perflab check: {args.adapters}; the notebooks keep this implementation's results "
            f"in {data_dir().resolve() / 'results'}/<notebook>/{folder}/",
            file=sys.stderr,
        )
        table = check_adapters(args.adapters, parts=args.parts, progress=progress)
    except AdapterLoadError as error:
        print(f"perflab check: {error}", file=sys.stderr)
        return 2
    shown = summary(table) if args.summary else table
    if args.format == "csv":
        print(shown.to_csv(index=False), end="")
    else:
        width = None if args.details else shutil.get_terminal_size((120, 24)).columns
        print(format_table(shown, width))
    counts = table["status"].value_counts()
    found = findings(table)
    print(
        ", ".join(
            f"{counts[s]} {s}"
            for s in ("pass", "fail", "error", "needs a GPU", "not provided", "skipped")
            if s in counts
        )
        + f"; {len(found)} finding(s) beyond the handout"
        + (" (counted: --strict)" if args.strict and len(found) else "")
    )
    missing = missing_adapters(table)
    if missing:
        print(
            f"not provided: {', '.join(missing)}: the course's tests fail on each; check only "
            "the parts you have done with --parts (valid: " + ", ".join(PARTS) + ")"
        )
    return 0 if passed(table, strict=args.strict) else 1


def _report(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from perflab.tools.report import build_report, parse_source
    from perflab.tools.writeup import build_writeup

    try:
        sources = [parse_source(text) for text in args.results or [str(data_dir() / "results")]]
        labels = [source.label for source in sources]
        if len(set(labels)) < len(labels):
            raise ValueError(
                f"two results folders labelled alike ({', '.join(labels)}): give "
                "each a label, --results LABEL=DIR"
            )
        written = build_report(sources, args.output)
        start = time.perf_counter()
        typ, pdf = build_writeup(args.year, sources, args.output)
    except ValueError as error:
        parser.error(str(error))
    print(
        f"wrote {written} and {written.with_suffix('.html')}, tables also as LaTeX and Typst in "
        f"{written.parent / 'tables'}"
    )
    if pdf is None:
        print(f'wrote {typ}; for the PDF install Typst: pip install -e ".[report]"')
    else:
        print(f"wrote {typ} and {pdf} ({args.year} handout, {time.perf_counter() - start:.1f} s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="perflab", description=__doc__.split("\n\n")[0])
    version = f"perflab {perflab.__version__} (torch {torch.__version__})"
    parser.add_argument("--version", action="version", version=version)
    commands = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="{run,bench,hotspots,kernels,check,check-results,report,noise-check}",
    )

    run = commands.add_parser("run", help="execute notebooks with papermill")
    run.add_argument(
        "notebooks", nargs="*", metavar="NOTEBOOK", help="e.g. 01 or 01_benchmarking (default: all)"
    )
    run.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        metavar=("NAME", "VALUE"),
        help="notebook parameter; VALUE is a Python literal or else a string",
    )
    run.add_argument(
        "--keep-timings",
        action="store_true",
        help="keep papermill's start, end and per-cell times in the executed notebooks",
    )
    sizes = run.add_mutually_exclusive_group()
    sizes.add_argument(
        "--full",
        action="store_true",
        help="the full sizes (perflab.settings.FULL_SIZES), for a GPU",
    )
    sizes.add_argument(
        "--lease",
        action="store_true",
        help="the full sizes cut to fit a short GPU lease (perflab.settings.LEASE_SIZES)",
    )
    run.add_argument(
        "--output",
        default=None,
        help="folder for executed notebooks (default: output/ in perflab's checkout, beside its "
        "data/, whatever folder you run from)",
    )
    run.set_defaults(handler=_run, subparser=run)

    bench = commands.add_parser("bench", help="time one model configuration")
    BenchConfig.add_arguments(bench, count_type=_count, more_choices={"mode": ("decode",)})
    bench.add_argument(
        "--cache",
        choices=("none", "contiguous", "paged"),
        help="--mode decode: the keys and values kept (default contiguous: the fixed-shape step, "
        "the one --compile compiles)",
    )
    bench.add_argument(
        "--freeze",
        action="store_true",
        help="--mode decode --compile: fold the weights into the graph (inductor's freezing; on "
        "a CPU each linear becomes inductor's own GEMM kernel on weights packed once)",
    )
    bench.add_argument(
        "--memory", action="store_true", help="also the peak memory of one step above the model"
    )
    bench.add_argument("--format", choices=("table", "json"), default="table")
    bench.set_defaults(handler=_bench, subparser=bench)

    hotspots = commands.add_parser("hotspots", help="hotspots of a Chrome/Kineto trace")
    hotspots.add_argument("trace", metavar="TRACE", help="trace file, .json or .json.gz")
    hotspots.add_argument("--compare", metavar="OTHER", help="optimized trace to compare with")
    hotspots.add_argument("--top", type=_count(1), help="show only the first K rows")
    hotspots.add_argument("--format", choices=("table", "csv"), default="table")
    hotspots.set_defaults(handler=_hotspots, subparser=hotspots)

    from perflab.measure.triton_compile import TARGETS
    from perflab.tools.kernels import DTYPES as KERNEL_DTYPES
    from perflab.tools.kernels import KERNEL_NAMES

    kernels = commands.add_parser(
        "kernels", help="compile the Triton kernels for GPU targets; registers, spills, shared"
    )
    kernels.add_argument("--target", nargs="+", choices=list(TARGETS), default=["sm_90"])
    kernels.add_argument("--dtype", nargs="+", choices=KERNEL_DTYPES, default=["fp16"])
    kernels.add_argument(
        "--head-dim", nargs="+", type=int, choices=(16, 32, 64, 128), default=[128]
    )
    kernels.add_argument("--kernel", nargs="+", choices=KERNEL_NAMES, help="default: all")
    kernels.add_argument("--summary", action="store_true", help="one row per kernel and target")
    kernels.add_argument("--format", choices=("table", "csv"), default="table")
    kernels.set_defaults(handler=_kernels, subparser=kernels)

    from perflab.tools.adapters.battery import PARTS

    adapters = commands.add_parser(
        "check", help="check a CS336 adapters file (yours) against plain references"
    )
    adapters.add_argument(
        "--adapters",
        required=True,
        metavar="PATH_OR_MODULE",
        help="e.g. my-repo/tests/adapters.py, or perflab.cs336",
    )
    adapters.add_argument(
        "--parts",
        nargs="+",
        choices=(*PARTS, "attention"),
        default=list(PARTS),
        help="which checks (default: all; attention: pytorch and triton)",
    )
    adapters.add_argument(
        "--strict", action="store_true", help="findings beyond the handout count as failures too"
    )
    adapters.add_argument(
        "--summary",
        action="store_true",
        help="one row per adapter and scope instead of one per case",
    )
    adapters.add_argument(
        "--details",
        action="store_true",
        help="one markdown table, every column on one line (default: fitted to the terminal, "
        "details as numbered notes)",
    )
    adapters.add_argument("--format", choices=("table", "csv"), default="table")
    adapters.set_defaults(handler=_check_adapters, subparser=adapters)

    check = commands.add_parser("check-results", help="flag contradictions in saved results")
    check.add_argument("directory", metavar="DIR", help="e.g. data/results")
    check.set_defaults(handler=_check_results, subparser=check)

    report = commands.add_parser(
        "report", help="a write-up of every table and figure, and a PDF by handout problem"
    )
    report.add_argument(
        "--results",
        action="append",
        metavar="[LABEL=]DIR",
        help="results folder, labelled LABEL (default: its name); repeat to show "
        "several side by side (default: data/results)",
    )
    report.add_argument(
        "--year",
        choices=YEARS,
        default=YEARS[0],
        help="the handout whose problems the PDF follows (default: %(default)s)",
    )
    report.add_argument("--output", default="report", help="folder for the write-up")
    report.set_defaults(handler=_report, subparser=report)

    noise = commands.add_parser("noise-check", help="A/A and A/B runs of perflab.bench.compare")
    noise.add_argument("--runs", type=_count(1), default=20, help="comparisons of each kind")
    noise.add_argument("--burst", action="store_true", help="under competing busy processes")
    noise.add_argument(
        "--simulate",
        action="store_true",
        help="simulated coverage and false alarms per round count (--runs each)",
    )
    noise.set_defaults(handler=_noise_check, subparser=noise)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.handler(args, args.subparser)
