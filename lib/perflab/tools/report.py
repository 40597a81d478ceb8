"""``perflab report``: every table and figure under a results folder, with its provenance, as a
write-up: ``report.md`` and ``report.html``, and each table also as LaTeX (``tables/*.tex``)
and Typst (``tables/*.typ``) for a course's write-up. Nothing in it is typed: the tables are the
CSVs the notebooks saved, the provenance their JSON sidecars (the notebook's settings, the
commit, the time, the library versions where recorded), the device the folder they sit in
(``data/results/<notebook>/<device>/``).
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

#: Rows shown per table in the write-up; the CSV holds all of them.
MAX_ROWS = 30


@dataclass
class Entry:
    """One table (CSV) or figure (PNG) of a notebook, measured on one device."""

    notebook: str
    device: str
    path: Path
    provenance: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def label(self) -> str:
        return f"{self.notebook}-{self.device.replace('/', '-')}-{self.name}"


@dataclass(frozen=True)
class Source:
    """A results folder (``data/results`` or one like it) and the label it is shown under."""

    label: str
    path: Path


def parse_source(text: str) -> Source:
    """``LABEL=PATH`` or ``PATH`` (labelled as typed, or by its last two folders when absolute:
    ``data/results``), as ``--results`` takes it; a LABEL has no ``/``."""
    label, sep, path = text.partition("=")
    if not sep or "/" in label or "\\" in label or not label:
        label, path = "", text
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"no results folder {str(path)!r} (give DIR or LABEL=DIR)")
    default = "/".join(path.parts[-2:]) if path.is_absolute() else path.as_posix()
    return Source(label or default, path)


def device_folders(results: Path, notebooks: str = "*") -> list[Path]:
    """``results/<notebook>/<device>/`` folders, and ``results/<notebook>/yours-*/<device>/``
    (a notebook run on a student's code with ``-p adapters`` or ``-p model``)."""
    found = []
    for folder in sorted(p for p in Path(results).glob(f"{notebooks}/*") if p.is_dir()):
        if folder.name.startswith("yours-"):
            found += sorted(p for p in folder.iterdir() if p.is_dir())
        else:
            found.append(folder)
    return found


def device_label(folder: Path) -> str:
    """The device folder's name, with ``yours-*/`` before it for a student's results."""
    parent = folder.parent.name
    return f"{parent}/{folder.name}" if parent.startswith("yours-") else folder.name


def find_entries(results: Path) -> list[Entry]:
    """Tables and figures under ``results/<notebook>/<device>/`` (``device_folders``), in
    order, each with the JSON sidecar of the same name. A figure without one (``savefig``
    writes none) takes the newest sidecar of its folder, the record of the notebook run that
    drew it, marked as such."""
    results = Path(results)
    if not results.is_dir():
        raise ValueError(f"no results folder {str(results)!r}")
    entries = []
    for folder in device_folders(results):
        notebook = folder.relative_to(results).parts[0]
        for path in sorted(folder.iterdir()):
            if path.suffix not in (".csv", ".png"):
                continue
            sidecar = path.with_suffix(".json")
            if sidecar.is_file():
                provenance = json.loads(sidecar.read_text())
            else:
                records = [json.loads(p.read_text()) for p in folder.glob("*.json")]
                records.sort(key=lambda r: str(r.get("saved_at", "")))
                newest = records[-1] if records else {}
                provenance = {**newest, "from": "this folder's newest table"} if newest else {}
            entries.append(Entry(notebook, device_label(folder), path, provenance))
    if not entries:
        raise ValueError(f"no tables (.csv) or figures (.png) under {str(results)!r}")
    return entries


def provenance_line(entry: Entry) -> str:
    """Device, commit, time, versions and settings of an entry, on one line."""
    record = entry.provenance
    parts = [f"device `{entry.device}`"]
    for key, label in (("commit", "commit"), ("saved_at", "saved")):
        if record.get(key):
            parts.append(f"{label} `{record[key]}`")
    versions = record.get("versions")
    if versions:
        parts.append("versions " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    settings = record.get("settings")
    if settings:
        parts.append("settings " + ", ".join(f"{k}={v!r}" for k, v in settings.items()))
    if record.get("from"):
        parts.append(f"recorded with {record['from']}")
    if len(parts) == 1:
        parts.append("no provenance recorded")
    return "; ".join(parts)


def _shown(table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The part of ``table`` a reader reads: no empty columns, no columns of serialised lists
    (per-step samples), at most ``MAX_ROWS`` rows; and a note of what was left out."""
    serialised = r"^\s*[\[{].+[\]}]\s*$"  # a JSON list or object in every cell: samples
    listed = [
        c
        for c in table.columns
        if not pd.api.types.is_numeric_dtype(table[c])
        and table[c].notna().any()
        and table[c].dropna().astype(str).str.match(serialised).all()
    ]
    empty = [c for c in table.columns if table[c].isna().all()]
    shown = table.drop(columns=listed + empty).head(MAX_ROWS)
    notes = []
    if len(table) > MAX_ROWS:
        notes.append(f"first {MAX_ROWS} of {len(table)} rows")
    if listed:
        notes.append(f"columns of samples left out: {', '.join(listed)}")
    return shown, f"({'; '.join(notes)}; all in the CSV)" if notes else ""


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters written as text (as pandas' ``escape=True``
    writes the cells)."""
    return "".join(_LATEX_SPECIAL.get(c, c) for c in text)


def typst_string(text: str) -> str:
    """``text`` as a Typst string literal: shown as plain text, never read as markup (``#``,
    ``$``, ``<``, ``=``, ``-``, ``*``, ``_`` ... stay themselves); only the backslash, the
    double quote and control characters need escaping inside it."""
    escaped = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


def typst_table(table: pd.DataFrame) -> str:
    """A Typst ``#table`` of ``table``: a header row, then the values as text (each cell a
    string literal, so no value can be taken for markup)."""

    def cell(value) -> str:
        if pd.isna(value):
            return "[]"
        return typst_string(f"{value:.4g}" if isinstance(value, float) else str(value))

    header = ", ".join(cell(c) for c in table.columns)
    rows = ",\n  ".join(", ".join(cell(v) for v in row) for row in table.itertuples(index=False))
    return f"#table(\n  columns: {len(table.columns)},\n  table.header({header}),\n  {rows}\n)\n"


def build_report(results: str | Path | list[Source], output: str | Path) -> Path:
    """Write ``report.md``, ``report.html`` and ``tables/<label>.tex`` / ``.typ`` for every
    table and figure under ``results`` (a folder, or several ``Source``s, each labelled) into
    ``output``; returns the Markdown file."""
    sources = results if isinstance(results, list) else [Source("", Path(results))]
    labelled = [(source.label, entry) for source in sources for entry in find_entries(source.path)]
    output = Path(output)
    (output / "tables").mkdir(parents=True, exist_ok=True)
    folders = ", ".join(
        f"`{s.path.as_posix()}`" + (f" ({s.label})" if s.label else "") for s in sources
    )
    markdown = [
        "# perflab results",
        "",
        f"Every table and figure under {folders}, each with where and how it was measured.",
        "",
    ]
    body = ["<h1>perflab results</h1>"]
    current = None
    for label, entry in labelled:
        if (label, entry.notebook) != current:
            current = (label, entry.notebook)
            title = f"{entry.notebook} ({label})" if label else entry.notebook
            markdown += [f"## {title}", ""]
            body.append(f"<h2>{html.escape(title)}</h2>")
        heading = f"{entry.name} ({label + ', ' if label else ''}{entry.device})"
        line = provenance_line(entry)
        markdown += [f"### {heading}", "", f"*{line}*", ""]
        body += [f"<h3>{html.escape(heading)}</h3>", f"<p><em>{html.escape(line)}</em></p>"]
        relative = Path(os.path.relpath(entry.path, output)).as_posix()
        if entry.path.suffix == ".png":
            markdown += [f"![{entry.name}]({relative})", ""]
            body.append(f'<img src="{html.escape(relative)}" alt="{html.escape(entry.name)}">')
            continue
        table = pd.read_csv(entry.path)
        shown, note = _shown(table)
        markdown += [shown.to_markdown(index=False, floatfmt=".4g"), ""]
        markdown += [note, ""] if note else []
        body.append(shown.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep=""))
        body += [f"<p>{html.escape(note)}</p>"] if note else []
        name = f"{label}-{entry.label}" if len(sources) > 1 else entry.label
        (output / "tables" / f"{name}.tex").write_text(
            shown.to_latex(
                index=False,
                float_format="%.4g",
                na_rep="",
                escape=True,
                caption=latex_escape(heading),
                label=f"tab:{name}",
            )
        )
        (output / "tables" / f"{name}.typ").write_text(typst_table(shown))
    (output / "report.md").write_text("\n".join(markdown))
    page = (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>perflab results</title>"
        "<style>body{font-family:sans-serif;max-width:70em;margin:auto}"
        "table{border-collapse:collapse;font-size:80%}td,th{border:1px solid #ccc;"
        "padding:2px 6px}img{max-width:100%}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
    (output / "report.html").write_text(page)
    return output / "report.md"
