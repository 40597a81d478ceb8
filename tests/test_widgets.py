"""perflab.widgets: the controls compute their default state without a front end (what
papermill shows), follow a changed value, and refuse bad input with one clear line."""

import pandas as pd
import pytest

from perflab.distributed.calculators import H100_NODE, Workload, max_compute_bound_devices
from perflab.model import get_preset
from perflab.widgets import ALL, calculator_controls, filter_rows, results_explorer


def _control(controls, description):
    return next(c for c in controls.children if getattr(c, "description", None) == description)


def test_calculator_controls_start_at_the_notebooks_example_and_follow_the_batch():
    controls = calculator_controls("xl", 256, 1024)
    work = Workload.from_config(get_preset("xl"), 256, 1024)
    expected = {s: max_compute_bound_devices(s, work, H100_NODE)
                for s in ("dp", "fsdp", "tp", "fsdp+tp")}  # fmt: skip
    shown = controls.result.set_index("strategy")["max_devices"].to_dict()
    assert shown == expected
    _control(controls, "batch").value = 4096  # a larger batch: more data-parallel devices
    assert controls.result.set_index("strategy").loc["dp", "max_devices"] > expected["dp"]
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        calculator_controls("huge")
    with pytest.raises(ValueError, match="batch_size must be a power of 2 from 1 to 16384"):
        calculator_controls("xl", 100)


def test_results_explorer_filters_saved_rows_without_measuring():
    table = pd.DataFrame({"preset": ["cpu-tiny", "cpu-tiny", "cpu-small"],
                          "mode": ["forward", "train-step", "forward"],
                          "median_s": [0.1, 0.3, 0.2]})  # fmt: skip
    explorer = results_explorer(table, ["preset", "mode"], ["median_s"],
                                defaults={"mode": "forward"})  # fmt: skip
    assert explorer.result["median_s"].tolist() == [0.1, 0.2]
    _control(explorer, "preset").value = "cpu-small"
    assert explorer.result["median_s"].tolist() == [0.2]
    assert len(filter_rows(table, preset=ALL, mode=ALL)) == 3
    with pytest.raises(ValueError, match="no column dtype; valid: preset, mode, median_s"):
        results_explorer(table, ["dtype"], ["median_s"])
