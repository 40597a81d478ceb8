"""Which bound dominates each rung: the table's numbers on hand-made traces whose operator
times are known, the sentence's every branch, and real traces of the greedy ladder on the
CPU."""

import gzip
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from perflab.implementations.model import ModelConfig
from perflab.lessons.nb09_training_step.ladder_traces import (
    bound_rows,
    bound_sentence,
    greedy_bound_table,
)
from perflab.measure.hotspots import CATEGORIES
from perflab.training.ladder import greedy_ladder


def _trace(path, durations):
    """A trace of CPU operators run one after another on one thread, ``name: microseconds``."""
    events, ts = [], 0
    for name, dur in durations.items():
        events.append(
            {"name": name, "cat": "cpu_op", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1}
        )
        ts += dur + 1
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def _table(tmp_path, vs_previous=None, verdict="faster", ci=None):
    """``greedy_bound_table`` of a greedy ladder's rows: a baseline and one rung tried on it."""
    a = _trace(tmp_path / "a.json", {"aten::mm": 600, "aten::add": 400})
    b = _trace(tmp_path / "b.json", {"aten::mm": 200, "aten::add": 400})
    low, high = ci or ((0.98 * vs_previous, 1.02 * vs_previous) if vs_previous else (None, None))
    greedy = pd.DataFrame(
        {
            "rung": ["baseline", "faster matmul"],
            "trace": [str(a), str(b)],
            "trace_base": [None, str(a)],
            "vs_best": [None, vs_previous],
            "ci_low": [None, low],
            "ci_high": [None, high],
            "confidence": [None, 0.96875],
            "verdict": [None, verdict],
        }
    )
    return greedy_bound_table(greedy, steps=2)


def test_the_table_from_traces_with_known_times(tmp_path):
    table = _table(tmp_path, vs_previous=0.62).set_index("rung")
    base, rung = table.loc["baseline"], table.loc["faster matmul"]
    assert base["operators_ms"] == pytest.approx(0.5)  # 1000 us over 2 steps
    assert (base["dominant"], base["dominant_share"]) == ("compute-bound", pytest.approx(0.6))
    assert (rung["dominant"], rung["dominant_share"]) == ("memory-bound", pytest.approx(2 / 3))
    assert rung["hotspot"] == "aten::mm"
    assert (rung["hotspot_before_ms"], rung["hotspot_after_ms"]) == pytest.approx((0.3, 0.1))
    assert rung["hotspot_share_before"] == pytest.approx(0.6)
    assert rung["hotspot_change"] == pytest.approx(1 / 3)
    assert rung["hotspot_alone"] == pytest.approx(1 - 0.6 + 0.6 / 3)  # Amdahl: 1 - s + s r
    assert rung["operators_ratio"] == pytest.approx(0.6)
    assert (rung["vs_previous"], rung["verdict"]) == (0.62, "faster")
    assert rung["ci_low"] == pytest.approx(0.98 * 0.62) and pd.isna(rung["device_busy"])  # CPU


@pytest.mark.parametrize(
    "vs_previous, verdict, ci, says",
    [  # the hotspot alone gives 0.60x
        (
            0.62,
            "faster",
            (0.58, 0.66),
            "consistent with what the hotspot alone would give (one trace each, so the prediction "
            "has no interval: not shown to be the cause), less than the hotspot's own change "
            "(0.33x)",
        ),
        (0.62, "faster", (0.61, 0.63), "less than the hotspot alone"),  # 0.60 outside the CI
        (0.62, "faster", (0.6004, 0.63), "does not account"),  # 0.60 printed: 0.6000, 0.6004
        (0.6001, "faster", (0.60005, 0.61), "does not account"),  # step 0.60010, not 0.60
        (0.95, "faster", None, "less than the hotspot alone"),
        (0.25, "faster", None, "more than the hotspot alone"),
        (1.10, "slower", None, "the other way from the hotspot alone"),
        (1.0, "same", (0.97, 1.04), "predicts a change outside the step's interval"),
        (
            0.7,
            "same",
            (0.55, 1.01),
            "consistent with what the hotspot alone predicts, within the step's interval (one "
            "trace each, so the prediction has no interval: not shown to be the cause)",
        ),
    ],
)
def test_the_sentence_follows_the_numbers(tmp_path, vs_previous, verdict, ci, says):
    rows = _table(tmp_path, vs_previous, verdict, ci)
    assert bound_sentence(rows.iloc[0]) == (
        "baseline: compute-bound operators hold the largest share (60% of 0.50 ms)."
    )
    text = bound_sentence(rows.iloc[1])
    assert text.startswith(
        "faster matmul: memory-bound operators hold the largest share (67% of 0.30 ms); "
        "the hotspot that moved most, aten::mm, went from 0.30 to 0.10 ms a step in one trace"
    )
    assert re.search(r"take 0\.60+x as long", text) and says in text
    # the prediction printed inside the printed interval exactly when it lies inside the step's
    low, high = (float(x) for x in re.search(r"CI (\d+\.\d+)–(\d+\.\d+)", text).groups())
    printed = float(re.search(r"take (\d+\.\d+)x as long", text).group(1))
    row = rows.iloc[1]
    inside = row["ci_low"] <= row["hotspot_alone"] <= row["ci_high"]
    assert (low <= printed <= high) == inside, text
    step = float(
        re.search(
            r"the measured step (?:the same within the noise band \()?(\d+\.\d+)x", text
        ).group(1)
    )
    assert low <= step <= high, text  # and, where the prediction is outside, on its true side
    assert inside or (step < printed) == (vs_previous < row["hotspot_alone"]), text
    assert "96.8% CI" in text and "95% CI" not in text  # the interval's own level


def test_untimed_rows_and_operators_that_appear_or_vanish(tmp_path):
    traces = {
        "a": _trace(tmp_path / "a.json", {"aten::sqrt": 300, "aten::mm": 700}),
        "b": _trace(tmp_path / "b.json", {"aten::_fused_adamw_": 100, "aten::mm": 700}),
    }
    row = bound_rows([("b", traces["b"], traces["a"])], steps=1).iloc[0]
    assert row["hotspot"] == "aten::sqrt" and row["hotspot_after_ms"] == 0
    text = bound_sentence(row)
    assert "is gone (was 0.30 ms a step, 30%)" in text and "measured" not in text
    reverse = bound_rows([("a", traces["a"], traces["b"])], steps=1).iloc[0]
    assert reverse["hotspot"] == "aten::sqrt" and reverse["hotspot_change"] == float("inf")
    new = bound_sentence(reverse)
    assert "is new (0.30 ms a step) (an operator that appears or disappears" in new
    assert "alone it would make" not in new and "than the hotspot alone" not in new


def test_a_sentence_without_a_usable_measurement_states_only_the_trace(tmp_path):
    row = _table(tmp_path, vs_previous=0.62).iloc[1]
    for bad in (0.0, float("nan")):
        text = bound_sentence(row.copy().replace({row["vs_previous"]: bad}))
        assert text.endswith("take 0.60x as long; all operators take 0.60x.")


def test_a_real_trace_of_each_rung_tried_against_its_stack(tmp_path):
    config = ModelConfig(
        "t", d_model=32, d_ff=64, num_layers=1, num_heads=2, vocab_size=97, context_length=16
    )
    greedy, _ = greedy_ladder(
        config,
        ["fused AdamW"],
        2,
        8,
        torch.device("cpu"),
        rounds=2,
        warmup=0,
        trace_dir=tmp_path,
        trace_steps=1,
    )
    names = [Path(p).name for p in greedy["trace"]]
    assert names == ["greedy_00_baseline.json.gz", "greedy_01_fused_adamw.json.gz"]
    assert greedy["trace_base"].iloc[1] == greedy["trace"].iloc[0]  # tried on the baseline
    table = greedy_bound_table(greedy, steps=1)
    assert table["rung"].tolist() == ["baseline", "fused AdamW"]
    assert set(table["dominant"]) <= set(CATEGORIES) and (table["operators_ms"] > 0).all()
    assert table["verdict"].iloc[1] == greedy["verdict"].iloc[1]
    trace = json.loads(gzip.decompress(Path(greedy["trace"].iloc[1]).read_bytes()))
    names = {event.get("name") for event in trace["traceEvents"]}
    assert "aten::_fused_adamw_" in names  # the trace is of the rung's own step
