"""A notebook's front door: ``open_notebook`` records the notebook's parameters, resolves its
device, opens its results folder (a folder of its own for a student's code) and saves tables
with their provenance; ``check`` holds the folder against itself."""

import json

import pandas as pd
import pytest

from perflab.lessons import open_notebook
from perflab.measure.comparison import paired_comparison
from perflab.measure.paths import device_slug


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_DATA_DIR", str(tmp_path))
    return tmp_path


def test_a_run_records_its_parameters_and_saves_tables_with_them(data, capsys):
    namespace = {"device": "cpu", "rounds": 7, "not_a_parameter": 1}
    nb = open_notebook("03_mixed_precision", namespace, device="cpu")
    assert nb.settings == {"device": "cpu", "rounds": 7}
    assert nb.device.type == "cpu"
    assert nb.out == data / "results" / "03_mixed_precision" / device_slug("cpu")
    assert nb.out.is_dir()
    assert nb.provenance["settings"] == nb.settings and "device" in nb.provenance["machine"]

    path = nb.save(pd.DataFrame({"x": [1, 2]}), "table.csv")
    assert path == nb.out / "table.csv"
    assert pd.read_csv(path)["x"].tolist() == [1, 2]
    saved = json.loads(path.with_suffix(".json").read_text())
    assert saved["settings"] == {"device": "cpu", "rounds": 7} and "library_tree" in saved

    assert nb.check().empty
    assert capsys.readouterr().out.strip().startswith("0 contradictions in ")


def test_a_students_code_gets_a_results_folder_of_its_own(data, tmp_path):
    adapters = tmp_path / "course" / "tests" / "adapters.py"
    adapters.parent.mkdir(parents=True)
    adapters.write_text("VALUE = 1\n")
    nb = open_notebook("07_distributed_ddp", {}, yours=str(adapters))
    from perflab.tools.adapters.loading import results_name

    assert nb.out.parent.name == results_name(str(adapters))
    assert nb.out.parent.name.startswith("yours-")
    assert nb.out.parent.parent == data / "results" / "07_distributed_ddp"


def test_a_contradiction_is_printed_and_returned(data, capsys):
    nb = open_notebook("01_benchmarking", {}, device="cpu")
    nb.save(pd.DataFrame({"preset": ["small"], "mode": ["forward"], "median_s": [-1.0]}), "t.csv")
    findings = nb.check()
    line = capsys.readouterr().out.strip()
    assert line == f"{len(findings)} contradictions in {nb.out.relative_to(data.parent)}"


def test_an_unknown_notebook_is_a_one_line_error(data):
    with pytest.raises(ValueError, match="unknown notebook '11_nothing'; valid: 01_benchmarking"):
        open_notebook("11_nothing", {})


def test_rows_figures_and_sentences_go_where_the_run_keeps_them(data, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nb = open_notebook("10_decoding", {}, device="cpu")
    one = nb.save({"batch": 1, "tokens_per_s": 2.5}, "row.csv")
    assert pd.read_csv(one).to_dict("records") == [{"batch": 1, "tokens_per_s": 2.5}]
    rows = nb.save([{"a": 1}, {"a": 2}], "rows.csv")
    assert pd.read_csv(rows)["a"].tolist() == [1, 2]
    with pytest.raises(TypeError, match="save takes a DataFrame, a dict .* got str"):
        nb.save("not a table", "x.csv")
    # a Comparison is saved as its row: labels, times and verdict, details, then its sentence
    faster = paired_comparison([2.0] * 6, [1.0] * 6, names=("eager", "compiled"))
    faster = faster.with_labels(batch=4).with_details(compile_s=3.5)
    (row,) = pd.read_csv(nb.save(faster, "one.csv")).to_dict("records")
    columns = list(row)
    assert columns[:3] == ["batch", "a", "b"] and columns[-2:] == ["compile_s", "sentence"]
    assert (row["verdict"], row["sentence"]) == ("faster", faster.sentence())
    two = pd.read_csv(nb.save([faster, faster.with_labels(batch=8)], "two.csv"))
    assert two["batch"].tolist() == [4, 8]

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = nb.figure(fig, "line.png")
    plt.close(fig)
    assert png == nb.out / "line.png" and png.stat().st_size > 0
    assert png.with_suffix(".pdf").exists()

    nb.say(["first sentence.", "second sentence."])
    assert capsys.readouterr().out == "first sentence.\nsecond sentence.\n"
