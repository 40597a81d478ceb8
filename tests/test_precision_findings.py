"""Notebook 03's sentences (``perflab.lessons.nb03_mixed_precision.precision``,
``perflab.lessons.nb03_mixed_precision.loss_scaling``), the bfloat16 sweep's out-of-memory branch,
and the closing lines every notebook prints, on small frames made by hand or on the real experiments
where they are cheap."""

import pandas as pd
import pytest
import torch

from perflab.bench import steps
from perflab.lessons.nb03_mixed_precision.loss_scaling import scaler_lines, underflow_lines
from perflab.lessons.nb03_mixed_precision.precision import (
    accumulation_experiment,
    accumulation_sentence,
    audit_lines,
    sensitivity_line,
)
from perflab.measure.comparison import paired_comparison
from perflab.measure.paths import listing
from perflab.tools.check_results import contradictions_line


def test_the_accumulation_sentence_reads_the_experiment():
    sentence = accumulation_sentence(accumulation_experiment(steps=1000, value=0.01))
    assert sentence.startswith("float16 throughout is off by ")
    assert "upcasting each increment explicitly gives the same sum" in sentence


def test_audit_lines_can_say_false():
    audit = pd.DataFrame(
        {
            "float16": ["float32", "float32", "float32", "float16"],
            "bfloat16": ["float32", "bfloat16", "float32", "bfloat16"],
        },
        index=["parameter fc1.weight", "grad fc1.weight", "loss", "output of fc1"],
    )
    float16, bfloat16 = audit_lines(audit)
    assert float16 == (
        "float16 autocast: parameters float32: True; gradients float32: True; loss float32: "
        "True; first linear layer's output float16: True"
    )
    assert "gradients float32: False" in bfloat16


def test_sensitivity_line():
    sensitivity = pd.DataFrame(
        {
            "input_mean": [100.0] * 3,
            "dtype": ["float32", "float16", "bfloat16"],
            "max_abs_error": [2e-5, 0.5, 1.25],
        }
    )
    assert sensitivity_line(sensitivity) == (
        "at mean 100, std 0.1: float32 errs by 2.0e-05, float16 by 0.50 and bfloat16 by 1.25 on "
        "outputs of size ~1"
    )


def underflow_frame(scaled_error=0.01):
    rows = []
    for tokens in (128, 2048):
        for dtype, scale, error, flushed, nonfinite in (
            ("float16", 1.0, 0.05 * tokens / 128, 30, 0),
            ("float16", 65536.0, scaled_error, 0, 0),
            ("float16", 16777216.0, 1.0, 0, 500),
            ("bfloat16", 1.0, 0.08, 0, 0),
        ):
            rows.append(
                {
                    "tokens": tokens,
                    "dtype": dtype,
                    "loss_scale": scale,
                    "max_relative_error": error,
                    "flushed": flushed,
                    "flushed_share": flushed / 1e6,
                    "nonfinite": nonfinite,
                }
            )
    return pd.DataFrame(rows)


def test_underflow_lines_check_what_each_scale_does():
    scales = [1.0, 65536.0, 16777216.0]
    flushes, helps, errors = underflow_lines(underflow_frame(), scales)
    assert flushes == "bfloat16 flushes no gradient at any size: True"
    assert helps == (
        "at 2048 tokens a scale of 65,536 cuts float16's gradient error: True; a scale of "
        "16,777,216 overflows: True"
    )
    assert "grows from 5.00% at 128 tokens to 80.00% at 2048" in errors
    assert (
        "At 2048 tokens bfloat16 errs by 8.00% (loss scale 1) and flushed nothing: the error is "
        "its 8 significant bits, not its range. At 2048 tokens scaled float16 is 8.0x as "
        "accurate as bfloat16 (the ratio of their largest relative errors); unscaled, 0.1x."
    ) in errors
    worse = underflow_lines(underflow_frame(scaled_error=2.0), scales)[1]
    assert "cuts float16's gradient error: False" in worse


def test_scaler_lines_with_and_without_a_step_through():
    scaler = pd.DataFrame(
        {
            "loss_float32": [5.0, 4.9, 4.8],
            "loss_float16": [5.001, 4.95, 4.85],
            "scale": [2.0**24, 2.0**23, 2.0**22],
            "skipped": [True, True, False],
            "parameters_moved": [False, False, True],
        }
    )
    checks, sentence = scaler_lines(scaler, 2.0**24)
    assert checks == "skipped steps moved no weight: True; every other step did: True"
    assert "skipped 2 of 3 steps, halving the scale each time, and stepped from 4,194,304 on" in (
        sentence
    )
    assert "differs from float32's by 1.0e-03" in sentence
    none = scaler_lines(scaler.assign(skipped=True, parameters_moved=[False, True, False]), 1.0)
    assert none[0].startswith("skipped steps moved no weight: False")
    assert "; no step went through." in none[1]


def test_a_preset_too_large_for_both_steps_has_no_comparison(monkeypatch):
    def fake_compare(config_a, config_b, device, **kwargs):
        if config_a.preset == "xl":
            raise torch.OutOfMemoryError("CUDA out of memory")
        return paired_comparison([1.0] * 6, [0.5] * 6, names=(config_a.dtype, config_b.dtype))

    monkeypatch.setattr(steps, "compare_configs", fake_compare)
    monkeypatch.setattr(steps, "phase_comparisons", lambda step, a, b, warmup: [step])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    done = steps.bf16_against_fp32(["cpu-tiny", "xl"], 64, 2, torch.device("cpu"))
    # xl does not fit: no comparison of it; cpu-tiny's whole step, then its (faked) phases
    assert [(c.labels, c.name_a, c.name_b) for c in done] == [
        ({"preset": "cpu-tiny", "phase": "step"}, "float32", "bfloat16"),
        ({"preset": "cpu-tiny"}, "float32", "bfloat16"),
    ]


def test_closing_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "data" / "results" / "03"
    out.mkdir(parents=True)
    for name in ("b.csv", "a.png"):
        (out / name).write_text("x")
    assert listing(out) == "data/results/03/a.png\ndata/results/03/b.csv"
    assert contradictions_line(pd.DataFrame(), out) == "0 contradictions in data/results/03"


@pytest.mark.parametrize("bad", ["not a dir"])
def test_listing_of_a_missing_folder_fails_loudly(tmp_path, bad):
    with pytest.raises(FileNotFoundError):
        listing(tmp_path / bad)
