"""perflab report's typeset write-up: one section per handout problem, compiled to a PDF whose
text holds every problem's heading, the results' sentences, tables and vector figures, each
cited in the provenance appendix; tricky cells render as text; two results folders side by
side; docs/handout.md's map is the one the write-up reads."""

import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from perflab.measure.paths import save_figure, save_table  # noqa: E402
from perflab.tools.handout import ANSWERS, PROBLEMS, markdown_table, problems  # noqa: E402
from perflab.tools.report import Source  # noqa: E402
from perflab.tools.writeup import build_writeup, readable, writeup_source  # noqa: E402

HANDOUT_MAP = Path(__file__).resolve().parents[1] / "docs" / "handout.md"
TRICKY = "_x_ 50% a&b #1 $5 <lambda> = head - item ~3"


def _results(root: Path, device: str, median_s: float) -> Path:
    folder = root / "01_benchmarking" / device
    folder.mkdir(parents=True)
    timings = pd.DataFrame(
        {
            "preset": ["cpu-tiny", "cpu-tiny", "cpu-small"],
            "mode": ["forward", "train-step", "forward"],
            "d_model": [128, 128, 256],  # fixed by the preset: left out, and said so
            "batch_size": [4, 4, 4],  # one value in every row: a note, not a column
            "median_s": [median_s, 3 * median_s, 2.123456789 * median_s],
            "peak_bytes": [2**20, 3 * 2**20, 2**21],
            "samples_s": ["[0.1, 0.2]"] * 3,  # serialised samples: left out
            "commit": ["abc1234"] * 3,
        }
    )
    save_table(timings, folder / "timings.csv", {"settings": {"steps": 6}})
    sidecar = folder / "timings.json"
    key = ["preset", "mode", "d_model", "batch_size"]
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "key": key}))
    pd.DataFrame(
        {
            "key": ["warm-up", "unrelated"],
            "sentence": [f"warm-up took {median_s:.3f} s: {TRICKY}", "not this one"],
        }
    ).to_csv(folder / "conclusions.csv", index=False)
    save_table(
        pd.DataFrame({"phase": ["forward", "backward"], "median_ms": [1.5, 3.25]}),
        folder / "phases.csv",
    )  # a table and a figure of the same name: both shown
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    save_figure(fig, folder / "phases.png")
    plt.close(fig)
    memory = root / "08_sharding" / device
    memory.mkdir(parents=True)
    save_table(pd.DataFrame({"cell": [TRICKY, "plain"], "n": [1, 2]}), memory / "fsdp_memory.csv")
    return root


@pytest.fixture
def two_sources(tmp_path):
    return [
        Source("cpu", _results(tmp_path / "cpu", "amd-epyc", 0.0123)),
        Source("gpu", _results(tmp_path / "gpu", "nvidia-h100", 0.000456)),
    ]


def test_readable_tables_keep_what_varies_with_units_and_four_digits():
    table = pd.DataFrame(
        {
            "preset": ["a", "a", "b"],
            "d_model": [1, 1, 2],
            "steps": [6, 6, 6],
            "median_s": [0.1234567, 2.0, 1 / 3],
            "peak_bytes": [2**20] * 2 + [0],
            "commit": ["x"] * 3,
        }
    )
    cells, notes = readable(table, key=["preset", "d_model", "steps"])
    assert list(cells.columns) == ["preset", "median (s)", "peak (MiB)"]
    assert list(cells["median (s)"]) == ["0.1235", "2", "0.3333"]
    assert list(cells["peak (MiB)"]) == ["1", "1", "0"]
    assert (
        "in every row: steps = 6" in notes and "fixed by another column: d_model by preset" in notes
    )


def test_writeup_has_every_problem_of_the_year_in_the_handouts_order(two_sources, tmp_path):
    for year, count in (("2026", 27), ("2025", 22)):
        text, _ = writeup_source(year, two_sources, tmp_path / "out")
        headings = re.findall(r'#heading\(level: 2, "([^"]+)"\)', text)
        assert [h.split(" (")[0] for h in headings] == [p.name for p in problems(year)]
        assert len(headings) == count
    assert "FA2 leaderboard" in writeup_source("2025", two_sources, tmp_path / "o")[0]
    with pytest.raises(ValueError, match="valid: 2026, 2025"):
        writeup_source("2024", two_sources, tmp_path / "out")


def test_the_pdf_holds_the_headings_results_and_provenance(two_sources, tmp_path):
    pytest.importorskip("typst", reason="the typst package (report extra) is not installed")
    pypdf = pytest.importorskip("pypdf", reason="pypdf (dev extra) is not installed")
    typ, pdf = build_writeup("2026", two_sources, tmp_path / "out")
    reader = pypdf.PdfReader(pdf)
    text = "\n".join(page.extract_text() for page in reader.pages)
    flat = re.sub(r"\s+", "", text)
    for problem in problems("2026"):
        assert problem.name.replace(" ", "") in flat, problem.name
    for sentence in ("warm-uptook0.012s", "warm-uptook0.000s"):  # both sources, side by side
        assert sentence in flat
    assert "notthisone" not in flat  # a sentence of no problem's answer
    assert TRICKY.replace(" ", "") in flat  # sentences and cells show as text, not markup
    assert "0.02612" in flat and "median(s)" in flat and "peak(MiB)" in flat
    assert "[P1]" in text and "Provenance" in text
    assert "abc1234" not in flat  # the rows' commit column: provenance, not a table column
    source = typ.read_text()
    assert source.count('image("/cpu/01_benchmarking/amd-epyc/phases.pdf"') == 1  # vectors
    assert source.count("phases.pdf") == 2  # one per source
    assert source.count('"phases (cpu, amd-epyc) [P') == 2  # its table and its figure
    assert len(reader.pages) >= 3  # title and contents, the sections, the appendix


def test_report_command_writes_the_pdf_for_two_labelled_folders(two_sources, tmp_path, capsys):
    pytest.importorskip("typst", reason="the typst package (report extra) is not installed")
    from perflab.tools.cli import main

    args = ["report", "--year", "2025", "--output", str(tmp_path / "r")]
    for source in two_sources:
        args += ["--results", f"{source.label}={source.path}"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "writeup.pdf (2025 handout" in out
    assert (tmp_path / "r" / "writeup.pdf").stat().st_size > 10_000
    assert "## 01_benchmarking (gpu)" in (tmp_path / "r" / "report.md").read_text()


def test_without_typst_the_source_is_written_and_the_pdf_is_not(two_sources, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_typst(name, *args, **kwargs):
        if name == "typst":
            raise ImportError("no typst")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_typst)
    typ, pdf = build_writeup("2026", two_sources, tmp_path / "out")
    assert typ.is_file() and pdf is None and not (tmp_path / "out" / "writeup.pdf").exists()


def test_the_readme_map_is_the_one_the_writeup_reads():
    assert markdown_table() in HANDOUT_MAP.read_text(), (
        "docs/handout.md differs from perflab.tools.handout.ANSWERS: "
        "render it again with perflab.tools.handout.markdown_table()"
    )
    names = {p.name for p in PROBLEMS}
    assert all(set(a.problems) <= names for a in ANSWERS)
    assert all(any(p.name in a.problems for a in ANSWERS) for p in PROBLEMS)


def test_results_folders_are_labelled_as_given_or_by_their_place(tmp_path):
    from perflab.tools.report import parse_source

    results = tmp_path / "gpu-box" / "data" / "results"
    results.mkdir(parents=True)
    assert parse_source(str(results)).label == "data/results"  # absolute: its last two folders
    assert parse_source(f"h100={results}").label == "h100"
    odd = tmp_path / "a=b"  # a "=" in a path is part of the path
    odd.mkdir()
    assert parse_source(str(odd)) == Source(f"{tmp_path.name}/a=b", odd)
    with pytest.raises(ValueError, match="no results folder .* \\(give DIR or LABEL=DIR\\)"):
        parse_source(f"cpu={tmp_path / 'missing'}")
    from perflab.tools.cli import main

    other = tmp_path / "other" / "data" / "results"
    other.mkdir(parents=True)
    with pytest.raises(SystemExit) as done:  # both "data/results": a label is needed
        main(["report", "--results", str(results), "--results", str(other)])
    assert done.value.code == 2
