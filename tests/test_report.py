"""perflab report: every table and figure of a small results folder, with its provenance, in
Markdown, HTML, LaTeX and Typst; clear errors for a missing or empty folder."""

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from perflab.measure.paths import save_table  # noqa: E402
from perflab.tools.cli import main  # noqa: E402
from perflab.tools.report import MAX_ROWS, build_report  # noqa: E402


@pytest.fixture
def results(tmp_path):
    folder = tmp_path / "results" / "10_decoding" / "amd-epyc"
    folder.mkdir(parents=True)
    table = pd.DataFrame(
        {
            "batch": [1, 2],
            "tokens_per_s": [113.4061, 166.2853],
            "samples_s": ["[0.1, 0.2]", "[0.3]"],
        }
    )
    save_table(table, folder / "decode_throughput.csv", {"settings": {"preset": "cpu-small"}})
    pd.DataFrame({"i": range(MAX_ROWS + 5)}).to_csv(folder / "long.csv", index=False)
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    fig.savefig(folder / "decode_roofline.png")
    plt.close(fig)
    return tmp_path / "results"


def test_report_shows_every_table_and_figure_with_its_provenance(results, tmp_path):
    written = build_report(results, tmp_path / "report")
    text = written.read_text()
    assert "## 10_decoding" in text and "### decode_throughput (amd-epyc)" in text
    assert "113.4" in text and "[0.1, 0.2]" not in text  # samples are left out
    assert "columns of samples left out: samples_s" in text
    assert f"first {MAX_ROWS} of {MAX_ROWS + 5} rows" in text
    record = json.loads((results / "10_decoding/amd-epyc/decode_throughput.json").read_text())
    assert f"commit `{record['commit']}`" in text and "preset='cpu-small'" in text
    assert f"torch {record['versions']['torch']}" in text
    assert "![decode_roofline](../results/10_decoding/amd-epyc/decode_roofline.png)" in text
    assert "recorded with this folder's newest table" in text  # the figure's provenance
    page = (tmp_path / "report" / "report.html").read_text()
    assert "<table" in page and 'src="../results/10_decoding/amd-epyc/decode_roofline.png"' in page
    tables = tmp_path / "report" / "tables"
    latex = (tables / "10_decoding-amd-epyc-decode_throughput.tex").read_text()
    assert r"\begin{table}" in latex and "tab:10_decoding-amd-epyc-decode_throughput" in latex
    typst = (tables / "10_decoding-amd-epyc-decode_throughput.typ").read_text()
    assert typst.startswith("#table(\n  columns: 2,") and '"113.4"' in typst


def test_report_command_and_its_errors(results, tmp_path, capsys):
    assert main(["report", "--results", str(results), "--output", str(tmp_path / "r")]) == 0
    assert "report.md" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    for folder, message in (
        (tmp_path / "nowhere", "no results folder"),
        (tmp_path / "empty", "no tables"),
    ):
        with pytest.raises(SystemExit) as done:
            main(["report", "--results", str(folder), "--output", str(tmp_path / "r")])
        assert done.value.code == 2 and message in capsys.readouterr().err


TRICKY = [
    "_x_",
    "50%",
    "a & b",
    "#1",
    "$5",
    "<lambda>",
    "= head",
    "- item",
    "~3",
    "*b*",
    "back\\slash",
    'say "hi"',
    "{}",
    "x^2",
    "@ref",
]


def _tricky_folder(tmp_path):
    folder = tmp_path / "results" / "99_tricky" / "cpu"
    folder.mkdir(parents=True)
    save_table(
        pd.DataFrame({"cell_#%": TRICKY, "n_&": range(len(TRICKY))}), folder / "tricky_cells.csv"
    )
    return tmp_path / "results"


def test_typst_tables_compile_and_show_every_cell_as_text(tmp_path):
    typst = pytest.importorskip("typst", reason="the typst package (dev extra) is not installed")
    pypdf = pytest.importorskip("pypdf", reason="pypdf (dev extra) is not installed")
    build_report(_tricky_folder(tmp_path), tmp_path / "report")
    table = (tmp_path / "report" / "tables" / "99_tricky-cpu-tricky_cells.typ").read_text()
    document = tmp_path / "doc.typ"
    document.write_text("#set page(width: 20cm, height: auto)\n" + table)
    pdf = tmp_path / "doc.pdf"
    typst.compile(str(document), output=str(pdf))
    text = "".join(page.extract_text() for page in pypdf.PdfReader(pdf).pages)
    flat = text.replace(" ", "").replace("\n", "")
    for cell in [*TRICKY, "cell_#%", "n_&"]:
        assert cell.replace(" ", "") in flat, (cell, text)


def test_latex_tables_escape_special_characters(tmp_path):
    import shutil
    import subprocess

    build_report(_tricky_folder(tmp_path), tmp_path / "report")
    latex = (tmp_path / "report" / "tables" / "99_tricky-cpu-tricky_cells.tex").read_text()
    for raw, escaped in (
        ("_x_", r"\_x\_"),
        ("50%", r"50\%"),
        ("a & b", r"a \& b"),
        ("#1", r"\#1"),
        ("$5", r"\$5"),
        ("cell_#%", r"cell\_\#\%"),
    ):
        assert escaped in latex and f" {raw} " not in latex
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not installed: the escaped table was checked, not compiled")
    document = tmp_path / "doc.tex"
    document.write_text(
        "\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n"
        + latex
        + "\n\\end{document}\n"
    )
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", document.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]
