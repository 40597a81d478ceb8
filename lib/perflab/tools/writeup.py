"""``perflab report``'s typeset write-up: ``writeup.typ`` and, with the ``typst`` package
(``pip install -e ".[report]"``), ``writeup.pdf``, organised by the handout's problems.

One section per problem of the chosen year's handout, in its order (``perflab.tools.handout``):
where and how the workbook answers it, then from each results folder given (CPU and GPU runs,
or perflab's and a student's) the notebook's concluding sentences, tables and figures that
hold the answer. An appendix gives the provenance of every table and figure (device, versions,
commit and ``library_tree``, date, settings), each numbered as its caption cites it. Nothing is
typed: sentences come from ``conclusions.csv``, tables from the CSVs (columns of samples and of
provenance moved out, units in the headers, four significant digits), figures from the PDFs
the notebooks save beside their PNGs (the PNG where there is no PDF).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from perflab.tools.claims import claims_table, ours_text
from perflab.tools.handout import Answer, answers_for, problems
from perflab.tools.report import (
    Entry,
    Source,
    device_folders,
    device_label,
    find_entries,
    typst_string,
)

#: Rows and columns of a table shown in the PDF; the CSV holds the rest.
MAX_ROWS = 25
MAX_COLUMNS = 9
#: Columns that say where and when a row was measured: the appendix shows them, not the tables.
PROVENANCE_COLUMNS = (
    "measured_at",
    "concluded_at",
    "saved_at",
    "commit",
    "library_tree",
    "torch",
    "triton",
    "python",
    "device_name",
    "timing",
    "timing_method",
    "platform",
)
#: Column-name suffixes and the unit each names: (suffix, header unit, scale of the values).
UNITS = (
    ("_per_s", "/s", 1),
    ("_ms", "ms", 1),
    ("_s", "s", 1),
    ("_bytes", "MiB", 2**-20),
    ("_mib", "MiB", 1),
    ("_MiB", "MiB", 1),
    ("_mb", "MB", 1),
    ("_gb", "GB", 1),
    ("_gbps", "GB/s", 1),
    ("_flops", "FLOP", 1),
)


def _markup(text: str) -> str:
    """Typst markup for ``text``: `code` spans as raw text, the rest as string literals (so no
    character of it is read as markup)."""
    parts = re.split(r"`([^`]*)`", text)
    return "".join(
        f"#raw({typst_string(p)})" if i % 2 else f"#{typst_string(p)}"
        for i, p in enumerate(parts)
        if p
    )


def _inline(text: str) -> str:
    """``_markup(text)`` as a content block, to pass to a Typst function."""
    return "[" + _markup(text) + "]"


def _number(value: float, scale: float = 1) -> str:
    value *= scale
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


def _header(column: str) -> tuple[str, float]:
    for suffix, unit, scale in UNITS:
        if column.endswith(suffix) and len(column) > len(suffix):
            return f"{column[: -len(suffix)]} ({unit})", scale
    return column, 1


#: Measured columns, shown before the other columns that are not identifiers.
MEASURED = re.compile(
    r"median|mean|ratio|verdict|ci_|confidence|peak|per_s$|mfu|share|speed|"
    r"_ms$|_s$|bytes|mib|error|diff|status|within|pass",
    re.IGNORECASE,
)


def _determined(table: pd.DataFrame, column: str, by: list[str]) -> str | None:
    """The first of ``by`` that fixes ``column`` (one value of it for each of its values)."""
    for other in by:
        if table.groupby(table[other].astype(str))[column].nunique(dropna=False).max() == 1:
            return other
    return None


def readable(table: pd.DataFrame, key: list[str] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """``table`` as text cells for the PDF: columns of serialised samples, of provenance, with
    no value, or with one value in every row (stated in a note instead) left out, and key
    columns that another key column fixes (a preset's ``d_model``); in a sweep's table the
    key's columns first, then measured ones (other tables keep their order); at most
    ``MAX_COLUMNS`` columns and ``MAX_ROWS`` rows; units in the headers (bytes as MiB), numbers
    to four significant digits. Returns the cells and the notes on what was left out."""
    notes = []
    serialised = r"^\s*[\[{].*[\]}]\s*$"
    key = [c for c in (key or []) if c in table.columns]
    varying, constant = [], []
    for column in table.columns:
        values = table[column].dropna()
        if column in PROVENANCE_COLUMNS or values.empty:
            continue
        if values.astype(str).str.match(serialised).all():
            continue
        if len(table) > 1 and values.nunique() == 1 and len(values) == len(table):
            constant.append(column)
            continue
        varying.append(column)
    identifiers, fixed = [], []
    for column in [c for c in key if c in varying]:
        by = _determined(table, column, identifiers)
        (fixed if by else identifiers).append(column if not by else f"{column} by {by}")
    measured = [c for c in varying if c not in key and MEASURED.search(c)] if key else []
    keep = identifiers + measured + [c for c in varying if c not in key and c not in measured]
    if constant:
        shown = ", ".join(
            f"{_header(c)[0]} = {_cell(table[c].iloc[0], _header(c)[1])}" for c in constant
        )
        notes.append(f"in every row: {shown}")
    if fixed:
        notes.append("fixed by another column: " + ", ".join(fixed))
    if len(keep) > MAX_COLUMNS:
        notes.append(
            f"{len(keep) - MAX_COLUMNS} more columns in the CSV: " + ", ".join(keep[MAX_COLUMNS:])
        )
        keep = keep[:MAX_COLUMNS]
    if len(table) > MAX_ROWS:
        notes.append(f"first {MAX_ROWS} of {len(table)} rows")
    cells = pd.DataFrame(
        {_header(c)[0]: [_cell(v, _header(c)[1]) for v in table[c].head(MAX_ROWS)] for c in keep}
    )
    return cells, notes


def _cell(value, scale: float = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, float, np.number)):
        return _number(float(value), scale)
    return str(value)


def typst_cells_table(cells: pd.DataFrame) -> str:
    """A Typst ``table`` of text cells, every cell a string literal."""
    header = ", ".join(typst_string(str(c)) for c in cells.columns)
    rows = ",\n    ".join(
        ", ".join(typst_string(v) for v in row) for row in cells.itertuples(index=False)
    )
    return (
        f"table(\n    columns: {len(cells.columns)}, align: left,\n"
        f"    table.header({header}),\n    {rows}\n  )"
    )


class _Writer:
    """Accumulates the Typst source; numbers each table and figure for the appendix."""

    def __init__(self, root: Path, output: Path):
        self.root, self.output = root, output
        self.lines: list[str] = []
        self.cited: list[tuple[str, Entry]] = []  # (source label, entry) by number - 1

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def cite(self, label: str, entry: Entry) -> int:
        self.cited.append((label, entry))
        return len(self.cited)

    def path(self, path: Path) -> str:
        """``path`` for Typst: from the project root (``root``), which Typst lets it read."""
        return "/" + Path(os.path.relpath(path.resolve(), self.root)).as_posix()


def _answer_items(writer: _Writer, source: Source, answer: Answer, entries: dict) -> bool:
    """The sentences, tables and figures of ``answer`` in ``source``; False if none."""
    found = False
    for folder in device_folders(source.path, f"{answer.notebook}_*"):
        device = device_label(folder)
        conclusions = folder / "conclusions.csv"
        if answer.conclusions and conclusions.is_file():
            rows = pd.read_csv(conclusions)
            rows = rows[rows["key"].astype(str).str.startswith(answer.conclusions)]
            for sentence in rows["sentence"]:
                writer.add(f"- {_markup(str(sentence))} #text(size: 8pt, {typst_string(device)})")
                found = True
        for stem in answer.results:
            for suffix in (".csv", ".png"):  # a table and the figure drawn from it, both
                entry = entries.get(folder / f"{stem}{suffix}")
                if entry is not None:
                    _item(writer, source, entry, device)
                    found = True
    return found


def _item(writer: _Writer, source: Source, entry: Entry, device: str) -> None:
    """One table or figure, captioned with its source, device and provenance number."""
    number = writer.cite(source.label, entry)
    caption = f"{entry.path.stem} ({source.label}, {device}) [P{number}]"
    if entry.path.suffix == ".csv":
        cells, notes = readable(pd.read_csv(entry.path), entry.provenance.get("key"))
        if cells.empty:
            notes.insert(0, "no column varies")
        caption += (". " + "; ".join(notes)) if notes else ""
        body = typst_cells_table(cells) if not cells.empty else "[]"
        writer.add(f"#figure({body},\n  caption: {typst_string(caption)}, kind: table)")
        return
    vector = entry.path.with_suffix(".pdf")
    image = vector if vector.is_file() else entry.path
    if image is entry.path:  # drawn before the notebooks saved vectors beside PNGs
        caption += ". Raster: its run saved no vector copy"
    writer.add(
        f"#figure(image({typst_string(writer.path(image))}, width: 85%),\n"
        f"  caption: {typst_string(caption)})"
    )


def writeup_source(year: str, sources: list[Source], output: Path) -> tuple[str, Path]:
    """The Typst source of the write-up and the root folder Typst must be allowed to read."""
    handout = problems(year)
    output = Path(output).resolve()
    root = Path(os.path.commonpath([output, *(s.path.resolve() for s in sources)]))
    writer = _Writer(root, output)
    entries = {}
    for source in sources:
        entries.update({e.path: e for e in _entries(source.path)})
    title = f"CS336 Assignment 2 (Systems), {year} handout: measured answers"
    writer.add(
        f"#set document(title: {typst_string(title)})",
        '#set page(paper: "a4", margin: (x: 1.7cm, y: 1.8cm), numbering: "1")',
        "#set text(size: 9.5pt)",
        '#set heading(numbering: "1.1")',
        "#show table: set text(size: 6.5pt)",
        "#show figure: set block(breakable: true)",
        f'#align(center, text(15pt, weight: "bold", {typst_string(title)}))',
        "",
        "#"
        + typst_string(
            f"Written by perflab report from the results folders below; one section per "
            f"problem of the {year} handout ({len(handout)} problems), each with where and how "
            "the workbook answers it, then the concluding sentences, tables and figures of "
            "each results folder. Numbers come from the saved results, and [P n] cites the "
            "appendix's provenance of table or figure n."
        ),
        "",
        *[f"- {_markup(f'{s.label}: `{_display(s.path)}`')}" for s in sources],
        "",
        "#outline(depth: 2)",
        "",
    )
    section = None
    shown_in: dict[Answer, str] = {}  # an answer of several problems is shown once
    for problem in handout:
        if problem.section != section:
            section = problem.section
            writer.add(f"#heading(level: 1, {typst_string(section)})", "")
        points = f" ({problem.points} pts)" if problem.points else ""
        writer.add(f"#heading(level: 2, {typst_string(problem.name + points)})", "")
        rows = [a for a in answers_for(problem.name) if year in a.year or "both" in a.year]
        table = pd.DataFrame(
            {
                "part": [a.label for a in rows],
                "where": [a.where for a in rows],
                "how": [a.how for a in rows],
            }
        )
        writer.add(
            "#table(columns: (auto, 1fr, auto), align: left,",
            '  table.header("part", "where", "how"),',
            *[
                f"  {_inline(r.part)}, {_inline(r.where)}, {_inline(r.how)},"
                for r in table.itertuples()
            ],
            ")",
            "",
        )
        for answer in rows:
            if answer in shown_in:
                writer.add(
                    "#"
                    + typst_string(
                        f"{answer.label}: its results are shown under {shown_in[answer]}."
                    ),
                    "",
                )
        rows = [answer for answer in rows if answer not in shown_in]
        shown_in.update({answer: problem.name for answer in rows})
        for source in sources:
            shown = [_answer_items(writer, source, answer, entries) for answer in rows]
            if rows and not any(shown):
                writer.add(
                    "#"
                    + typst_string(
                        f"{source.label}: no saved table, figure or sentence for this problem; "
                        "the notebook named above prints its answer."
                    ),
                    "",
                )
            writer.add("")
    _appendix(writer)
    _sources_appendix(writer, sources)
    return "\n".join(writer.lines) + "\n", root


def _entries(results: Path) -> list[Entry]:
    try:
        return find_entries(results)
    except ValueError:  # an empty folder: nothing of it to show
        return []


def _display(path: Path) -> str:
    return Path(os.path.relpath(path.resolve())).as_posix() if path.is_absolute() else str(path)


def _appendix(writer: _Writer) -> None:
    writer.add('#heading(level: 1, numbering: none, "Provenance")', "")
    writer.add(
        "#"
        + typst_string(
            "Every table and figure above, numbered as its caption cites it: where it was measured "
            "and by which library. Settings are the notebook's parameters for that folder."
        ),
        "",
    )
    rows, settings = [], {}
    for number, (label, entry) in enumerate(writer.cited, start=1):
        record = entry.provenance
        versions = record.get("machine") or record.get("versions") or record
        saved = record.get("saved_at") or record.get("updated") or record.get("created") or ""
        rows.append(
            {
                "n": f"P{number}",
                "source": label,
                "file": f"{entry.notebook}/{entry.path.name}",
                "device": entry.device,
                "torch": str(versions.get("torch", "")),
                "commit": str(record.get("commit", "")),
                "library_tree": str(record.get("library_tree", ""))[:12],
                "saved": str(saved)[:16],
            }
        )
        settings.setdefault((label, entry.notebook, entry.device), record.get("settings", {}))
    if rows:
        writer.add(
            "#figure(" + typst_cells_table(pd.DataFrame(rows)) + ", kind: table,",
            '  caption: "Provenance of each table and figure")',
            "",
        )
    for (label, notebook, device), values in settings.items():
        text = ", ".join(f"{k}={v!r}" for k, v in (values or {}).items()) or "none recorded"
        writer.add(f"- {_markup(f'{label} · {notebook} · {device}: {text}')}")


def _sources_appendix(writer: _Writer, sources: list[Source]) -> None:
    """The five sources' claims beside each results folder's answers (``perflab.tools.claims``)."""
    writer.add('#heading(level: 1, numbering: none, "The sources\' claims beside ours")', "")
    writer.add(
        "#"
        + typst_string(
            "The headline claims of the documents the workbook was designed from: measured or "
            "estimated there, their own arithmetic redone from their own figures, and the "
            "workbook's answer to the same question read from each results folder "
            "(docs/sources.md)."
        ),
        "",
    )
    for source in sources:
        table = claims_table(source.path)
        cells = pd.DataFrame(
            {
                "claim": [
                    f"{r.source}: {r.claim} ({r.basis}; quantity: {r.quantity})"
                    for r in table.itertuples()
                ],
                "its own figures": table["own figures"],
                "ours": ["; ".join(ours_text(a, code="")) for a in table["answers"]],
            }
        )
        caption = f"The sources' claims{f' ({source.label})' if source.label else ''}"
        writer.add(
            "#figure(" + typst_cells_table(cells) + ", kind: table,",
            f"  caption: {typst_string(caption)})",
            "",
        )


def build_writeup(year: str, sources: list[Source], output: str | Path) -> tuple[Path, Path | None]:
    """Write ``writeup.typ`` into ``output`` and compile it to ``writeup.pdf`` where the
    ``typst`` package is installed; returns both paths (the PDF's None without Typst)."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    text, root = writeup_source(year, sources, output)
    source_path = output / "writeup.typ"
    source_path.write_text(text)
    try:
        import typst
    except ImportError:
        return source_path, None
    pdf = output / "writeup.pdf"
    try:
        typst.compile(str(source_path), output=str(pdf), root=str(root))
    except Exception as error:  # Typst's own message: the line of writeup.typ and why
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"Typst could not compile {source_path}: {first}") from None
    return source_path, pdf
