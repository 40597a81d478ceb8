"""perflab.measure.progress: an executed notebook keeps a bar's finished text, not its first
frame."""

import nbformat
from nbclient import NotebookClient

from perflab.measure.progress import IN_NOTEBOOK, progress


def _bar_texts(outputs: list) -> list[str]:
    shown = [o for o in outputs if o["output_type"] == "display_data"]
    return [o["data"]["text/plain"] for o in shown if "text/plain" in o["data"]]


def test_an_executed_notebook_keeps_each_bars_last_state():
    cell = nbformat.v4.new_code_cell(
        "from perflab.measure.progress import progress\n"
        "for _ in progress(range(3), desc='sweep', unit='config'):\n"
        "    pass\n"
        "with progress(total=4, desc='manual') as bar:\n"
        "    bar.update(4)\n"
    )
    notebook = nbformat.v4.new_notebook(cells=[cell])
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    texts = _bar_texts(notebook.cells[0].outputs)
    assert len(texts) == 2, notebook.cells[0].outputs
    assert texts[0].startswith("sweep: 100%") and "3/3" in texts[0]
    assert texts[1].startswith("manual: 100%") and "4/4" in texts[1]


def test_outside_a_notebook_it_is_tqdms_text_bar(capsys):
    assert not IN_NOTEBOOK
    for _ in progress(range(2), desc="plain"):
        pass
    assert "plain: 100%" in capsys.readouterr().err
