"""perflab.tools.widgets: the controls compute their default state without a front end (what
papermill shows), follow a changed value, measure only when asked, and refuse bad input with
one clear line."""

import math

import pandas as pd
import pytest

from perflab.bench import BenchConfig
from perflab.distributed.calculators import H100_NODE, Workload, max_compute_bound_devices
from perflab.implementations.model import get_preset
from perflab.tools.widgets import (
    ALL,
    MeasureNow,
    calculator_controls,
    filter_rows,
    results_explorer,
)


def _control(controls, description):
    return next(c for c in controls.children if getattr(c, "description", None) == description)


def test_calculator_controls_start_at_the_notebooks_example_and_follow_the_batch():
    controls = calculator_controls("xl", 256, 1024)
    work = Workload.from_config(get_preset("xl"), 256, 1024)
    expected = {
        s: max_compute_bound_devices(s, work, H100_NODE) for s in ("dp", "fsdp", "tp", "fsdp+tp")
    }
    shown = controls.result.set_index("strategy")["max_devices"].to_dict()
    assert shown == expected
    _control(controls, "batch").value = 4096  # a larger batch: more data-parallel devices
    assert controls.result.set_index("strategy").loc["dp", "max_devices"] > expected["dp"]
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        calculator_controls("huge")
    with pytest.raises(ValueError, match="batch_size must be a power of 2 from 1 to 16384"):
        calculator_controls("xl", 100)


def test_calculator_controls_compute_from_the_hardware_given_not_a_clamped_one():
    """0.5 TFLOP/s lies below the slider's default range (10 to 10^4): it once became 10."""
    from perflab.distributed.calculators import Hardware

    slow = Hardware("slow", 0.5e12, 5e6, 2e9)
    controls = calculator_controls("xl", 256, 1024, hardware=slow)
    assert _control(controls, "TFLOP/s").value == pytest.approx(0.5)
    assert _control(controls, "DP GB/s").value == pytest.approx(0.005)
    work = Workload.from_config(get_preset("xl"), 256, 1024)
    shown = controls.result.set_index("strategy")["max_devices"].to_dict()
    assert shown == {
        s: max_compute_bound_devices(s, work, slow) for s in ("dp", "fsdp", "tp", "fsdp+tp")
    }
    with pytest.raises(ValueError, match="hardware.flops_per_s must be positive, got 0"):
        calculator_controls(hardware=Hardware("none", 0, 1e9, 1e9))


def test_results_explorer_refuses_a_string_for_a_list():
    import pandas as pd

    table = pd.DataFrame({"preset": ["a"], "median_s": [1.0]})
    with pytest.raises(ValueError, match="filters must be a list of column names, got 'preset'"):
        results_explorer(table, filters="preset", columns=["median_s"])


def test_results_explorer_filters_saved_rows_without_measuring():
    table = pd.DataFrame(
        {
            "preset": ["cpu-tiny", "cpu-tiny", "cpu-small"],
            "mode": ["forward", "train-step", "forward"],
            "median_s": [0.1, 0.3, 0.2],
        }
    )
    explorer = results_explorer(
        table, ["preset", "mode"], ["median_s"], defaults={"mode": "forward"}
    )
    assert explorer.result["median_s"].tolist() == [0.1, 0.2]
    _control(explorer, "preset").value = "cpu-small"
    assert explorer.result["median_s"].tolist() == [0.2]
    assert len(filter_rows(table, preset=ALL, mode=ALL)) == 3
    with pytest.raises(ValueError, match="no column dtype; valid: preset, mode, median_s"):
        results_explorer(table, ["dtype"], ["median_s"])


def test_measure_now_measures_the_chosen_configuration_only_when_pressed(tmp_path):
    path = tmp_path / "timings.csv"
    start = BenchConfig(
        preset="cpu-tiny",
        context_length=32,
        mode="forward",
        batch_size=1,
        warmup=0,
        steps=2,
        device="cpu",
    )
    control = MeasureNow(path, start, ["cpu-tiny", "cpu-small"])
    planned = control.planned()
    assert planned[["preset", "mode", "context_length", "steps"]].values.tolist() == [
        ["cpu-tiny", "forward", 32, 2]
    ]
    assert math.isnan(planned["saved_median_s"].iloc[0])
    assert control.result is None and not path.exists()  # nothing ran yet

    _control(control, "steps").value = 3
    _control(control, "mode").value = "forward-backward"
    control.manual_button.click()
    measured = control.result
    assert measured[["mode", "steps", "status"]].values.tolist() == [["forward-backward", 3, "ok"]]
    saved = pd.read_csv(path)
    assert len(saved) == 1 and saved["median_s"].iloc[0] == pytest.approx(
        measured["median_ms"].iloc[0] / 1e3
    )
    assert control.planned()["saved_median_s"].iloc[0] == saved["median_s"].iloc[0]

    control.manual_button.click()  # pressed again: measured again, a second row
    assert len(pd.read_csv(path)) == 2

    _control(control, "preset").value = "cpu-small"  # another preset: its own shape
    small = get_preset("cpu-small")
    assert control.config().d_model == small.d_model != start.d_model
    control.manual_button.click()
    row = pd.read_csv(path).iloc[-1]
    assert (row["preset"], row["num_layers"]) == ("cpu-small", small.num_layers)
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        MeasureNow(path, start, ["cpu-tiny", "huge"])
    with pytest.raises(ValueError, match="defaults.preset 'cpu-tiny' is not among"):
        MeasureNow(path, start, ["cpu-small"])


def test_measure_now_shows_the_sweeps_saved_median_until_it_measures_its_own(tmp_path):
    start = BenchConfig(
        preset="cpu-tiny",
        context_length=32,
        mode="forward",
        batch_size=1,
        warmup=0,
        steps=2,
        device="cpu",
    )
    sweep = tmp_path / "timings.csv"
    mine = tmp_path / "measure_now.csv"
    MeasureNow(sweep, start, ["cpu-tiny"]).manual_button.click()  # the sweep's own row
    in_sweep = pd.read_csv(sweep)["median_s"].iloc[-1]
    control = MeasureNow(mine, start, ["cpu-tiny"], sweep=sweep)
    assert control.planned()["saved_median_s"].iloc[0] == in_sweep
    control.manual_button.click()
    assert control.planned()["saved_median_s"].iloc[0] == pd.read_csv(mine)["median_s"].iloc[-1]
    assert len(pd.read_csv(sweep)) == 1  # the sweep's file is never written
