"""perflab check-results: each rule finds its contradiction, and clean results pass."""

import pandas as pd
import pytest

from perflab.measure.comparison import paired_comparison
from perflab.measure.conclusions import UNSTABLE_SENTENCE, conclude
from perflab.tools.check_results import check_results
from perflab.tools.cli import main


def _timings(low_small, high_small, low_large, high_large):
    common = {
        "mode": "train-step",
        "dtype": "float32",
        "context_length": 64,
        "batch_size": 4,
        "device": "cpu",
        "status": "ok",
    }
    return pd.DataFrame(
        [
            {
                "preset": "cpu-tiny",
                "median_ci_low_s": low_small,
                "median_ci_high_s": high_small,
                **common,
            },
            {
                "preset": "cpu-small",
                "median_ci_low_s": low_large,
                "median_ci_high_s": high_large,
                **common,
            },
        ]
    )


def test_clean_results_pass(tmp_path):
    _timings(0.10, 0.12, 0.11, 0.30).to_csv(tmp_path / "timings.csv", index=False)
    pd.DataFrame({"forward_share": [0.3], "ratio": [1.2], "step_s": [0.1]}).to_csv(
        tmp_path / "other.csv", index=False
    )
    assert check_results(tmp_path).empty
    assert main(["check-results", str(tmp_path)]) == 0


def test_each_rule_finds_its_contradiction(tmp_path, capsys):
    _timings(0.20, 0.22, 0.10, 0.12).to_csv(tmp_path / "timings.csv", index=False)
    pd.DataFrame(
        {"optimizer_phase_s": [-0.01], "mfu": [1.3], "compiled_over_eager": [0.0], "status": ["ok"]}
    ).to_csv(tmp_path / "phases.csv", index=False)
    pd.DataFrame({"x_s": [-5.0], "status": ["oom"]}).to_csv(tmp_path / "oom.csv", index=False)
    concluded = {"key": "k", "sentence": "b is 2x faster", "verdict": "faster", "unstable": True}
    pd.DataFrame([concluded]).to_csv(tmp_path / "conclusions.csv", index=False)
    pd.DataFrame(
        {
            "batch": [1, 2],
            "tokens_per_s_low": [90.0, 300.0],
            "roofline_tokens_per_s": [100.0, 200.0],
        }
    ).to_csv(tmp_path / "decode.csv", index=False)
    found = check_results(tmp_path, library=None)
    assert sorted(found["rule"]) == sorted(
        [
            "larger preset faster",
            "negative time",
            "share out of bounds",
            "ratio not positive",
            "conclusion from an unstable measurement",
            "above the roofline",
        ]
    )
    assert "row 1: measured at least 300 tokens/s, bound 200" in " ".join(found["detail"])
    assert main(["check-results", str(tmp_path)]) == 1
    assert "7 contradictions" in capsys.readouterr().out  # and the conclusion's missing tree


def test_conclusions_are_computed_and_never_from_unstable_rows(tmp_path):
    comparison = paired_comparison([1.0] * 6, [0.5] * 6, names=("eager", "compiled"))
    assert conclude(tmp_path, "compile", comparison).startswith("compiled is 2.00x faster")
    assert conclude(tmp_path, "phases", "backward is 2x forward", unstable=True).endswith(
        UNSTABLE_SENTENCE
    )
    conclude(tmp_path, "compile", comparison)  # a re-run replaces its row
    stored = pd.read_csv(tmp_path / "conclusions.csv")
    assert stored["key"].tolist() == ["phases", "compile"]
    assert check_results(tmp_path).empty


def test_a_missing_folder_is_one_clear_error():
    with pytest.raises(SystemExit) as exit_:
        main(["check-results", "no/such/folder"])
    assert exit_.value.code == 2


def _rules(folder, **kwargs) -> list[str]:
    return sorted(check_results(folder, **kwargs)["rule"])


def test_a_sweep_row_contradicting_an_interleaved_verdict_is_found(tmp_path):
    """Notebook 06's case: the sweep showed naive 9.6x slower than flash_torch at n = 256, above
    an interleaved verdict that flash_torch is 2.66x slower."""
    verdicts = pd.DataFrame(
        [
            {
                "a": "naive",
                "b": "flash_torch",
                "ratio_b_over_a": 2.66,
                "ci_low": 2.6,
                "ci_high": 2.7,
                "confidence": 0.97,
                "noise_band": 0.03,
                "verdict": "slower",
                "seq_len": 256,
            }
        ]
    )
    verdicts.to_csv(tmp_path / "against_naive.csv", index=False)
    sweep = pd.DataFrame(
        {
            "implementation": ["naive", "flash_torch"],
            "seq_len": [256, 256],
            "end_to_end_s": [0.05, 0.0052],
        }
    )
    sweep.to_csv(tmp_path / "flash.csv", index=False)
    assert _rules(tmp_path, library=None) == ["sweep row contradicts a verdict"]
    # The same rows with a flag: an unstable row claims nothing (06's had their flags hidden;
    # a table of medians without its flag is a finding of its own).
    sweep.assign(end_to_end_unstable=[True, False]).to_csv(tmp_path / "flash.csv", index=False)
    assert _rules(tmp_path, library=None) == []
    sweep.assign(end_to_end_s=[0.005, 0.013]).to_csv(tmp_path / "flash.csv", index=False)
    assert _rules(tmp_path, library=None) == []
    # With intervals, only intervals lying apart on the wrong side count.
    sweep.assign(
        median_s=[0.010, 0.009],
        median_ci_low_s=[0.008, 0.007],
        median_ci_high_s=[0.012, 0.011],
        unstable=False,
    ).to_csv(tmp_path / "flash.csv", index=False)
    assert _rules(tmp_path, library=None) == []
    # The end-to-end time's own interval counts the same way (notebooks 05 and 06 save it).
    flash_faster = sweep.assign(end_to_end_s=[0.010, 0.009])
    flash_faster.assign(
        end_to_end_ci_low_s=[0.008, 0.007], end_to_end_ci_high_s=[0.012, 0.011]
    ).to_csv(tmp_path / "flash.csv", index=False)
    assert _rules(tmp_path, library=None) == []
    flash_faster.assign(
        end_to_end_ci_low_s=[0.0095, 0.0085], end_to_end_ci_high_s=[0.0105, 0.009]
    ).to_csv(tmp_path / "flash.csv", index=False)
    assert _rules(tmp_path, library=None) == ["sweep row contradicts a verdict"]


def test_overstated_confidence_and_same_outside_the_band_are_found(tmp_path):
    few = paired_comparison([1.0] * 3, [2.0, 2.1, 1.9])  # 75%: no verdict
    conclude(tmp_path, "few", "b is 2.00x slower than a (95% CI 1.90–2.10x)", comparison=few)
    assert _rules(tmp_path) == ["confidence overstated"]
    (tmp_path / "conclusions.csv").unlink()
    pd.DataFrame(
        [
            {
                "a": "x",
                "b": "y",
                "ci_low": 1.01,
                "ci_high": 1.22,
                "confidence": 0.97,
                "noise_band": 0.03,
                "verdict": "same",
            },
            {
                "a": "x",
                "b": "z",
                "ci_low": 0.5,
                "ci_high": 0.6,
                "confidence": 0.75,
                "noise_band": 0.03,
                "verdict": "faster",
            },
        ]
    ).to_csv(tmp_path / "t.csv", index=False)
    assert _rules(tmp_path) == ['"same" outside the band', "confidence overstated"]
    (tmp_path / "t.csv").unlink()
    pd.DataFrame(
        [
            {
                "key": "k",
                "sentence": "no difference beyond the noise (1.05x, 96.8% CI 1.02–1.06)",
                "verdict": "",
                "ci_low": 1.02,
                "ci_high": 1.06,
                "confidence": 0.968,
                "library_tree": "t",
            }
        ]
    ).to_csv(tmp_path / "conclusions.csv", index=False)
    assert _rules(tmp_path, library="t") == ['"same" outside the band']


def test_unstable_flags_yardsticks_and_the_library_are_checked(tmp_path):
    pd.DataFrame({"phase": ["forward"], "median_ms": [3.0]}).to_csv(tmp_path / "p.csv", index=False)
    pd.DataFrame({"achieved_flops_per_s": [2e11], "peak_flops_per_s": [1.3e11]}).to_csv(
        tmp_path / "mfu.csv", index=False
    )
    pd.DataFrame({"x": [1], "measured_at": ["2026-01-01"], "library_tree": ["old"]}).to_csv(
        tmp_path / "rows.csv", index=False
    )
    assert _rules(tmp_path, library="new") == [
        "above the yardstick",
        "measured by other code",
        "unstable flag missing",
    ]
    # The same rows in a GPU folder are a historical record: kept, not flagged.
    gpu = tmp_path / "nvidia-h100-80gb-hbm3"
    gpu.mkdir()
    (tmp_path / "rows.csv").rename(gpu / "rows.csv")
    assert "measured by other code" not in _rules(tmp_path, library="new")


def test_larger_preset_faster_compares_parameters_within_one_recipe(tmp_path):
    """A compiled cpu-small against an eager cpu-tiny, and a 'cpu-small' whose d_model was
    overridden below cpu-tiny's, are no contradictions; the same recipe and shapes are."""
    rows = _timings(0.20, 0.22, 0.10, 0.12).assign(compile=[False, True])
    rows.to_csv(tmp_path / "timings.csv", index=False)
    assert check_results(tmp_path, library=None).empty
    rows.assign(compile=False, num_parameters=[3_000_000, 1_000_000]).to_csv(
        tmp_path / "timings.csv", index=False
    )
    assert check_results(tmp_path, library=None).empty  # the 'cpu-small' row is the smaller
    rows.assign(compile=False).to_csv(tmp_path / "timings.csv", index=False)
    assert list(check_results(tmp_path, library=None)["rule"]) == ["larger preset faster"]


def test_malformed_results_are_findings_that_name_the_file(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    pd.DataFrame({"x": [1]}).to_csv(tmp_path / "bad.csv", index=False)
    (tmp_path / "bad.json").write_text("{not json")
    pd.DataFrame({"x": [1]}).to_csv(tmp_path / "listed.csv", index=False)
    (tmp_path / "listed.json").write_text("[1, 2]")
    pd.DataFrame({"text": ["hi"]}).to_csv(tmp_path / "conclusions.csv", index=False)
    found = check_results(tmp_path, library=None)
    assert sorted(zip(found["file"].astype(str), found["rule"], strict=True)) == [
        ("bad.json", "unreadable"),
        ("conclusions.csv", "unreadable"),
        ("empty.csv", "unreadable"),
        ("listed.json", "unreadable"),
    ]
    assert "a list" in " ".join(found["detail"])


def test_an_empty_folder_is_refused_not_passed(tmp_path, capsys):
    with pytest.raises(ValueError, match="no result files"):
        check_results(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["check-results", str(tmp_path)])
    assert exit_.value.code == 2 and "no result files" in capsys.readouterr().err


def test_a_stated_level_without_a_recorded_interval_is_found(tmp_path):
    """A conclusion written from a plain sentence (the comparison flattened into words) that
    states a level: nothing recorded says the interval has it."""
    conclude(tmp_path, "flat", "b is 2.00x slower than a (96.8% CI 1.90–2.10x)")
    assert _rules(tmp_path) == ["confidence overstated"]
    (tmp_path / "conclusions.csv").unlink()
    conclude(tmp_path, "words", "b takes longer than a")  # no level stated: nothing to hold
    assert _rules(tmp_path) == []


def test_sweeps_timed_in_milliseconds_are_held_to_the_verdicts(tmp_path):
    """A DDP sweep's step_ms (notebooks 07 and 08) counts like a median in seconds."""
    pd.DataFrame(
        [
            {
                "a": "naive",
                "b": "flat",
                "ratio_b_over_a": 0.5,
                "ci_low": 0.45,
                "ci_high": 0.55,
                "confidence": 0.97,
                "noise_band": 0.03,
                "verdict": "faster",
                "world_size": 2,
            }
        ]
    ).to_csv(tmp_path / "vs.csv", index=False)
    sweep = pd.DataFrame(
        {
            "variant": ["naive", "flat"],
            "world_size": [2, 2],
            "step_ms": [10.0, 20.0],
            "unstable": [False, False],
        }
    )
    sweep.to_csv(tmp_path / "steps.csv", index=False)
    assert _rules(tmp_path, library=None) == ["sweep row contradicts a verdict"]


def test_phase_findings_state_their_interval_and_record_it(tmp_path):
    """Planted: backward 2.1x the forward with an interval 1.9–2.3 at 96.9% is consistent with
    the FLOP model's 2x; at 75% (three steps) nothing is concluded. The stated interval is
    recorded with the sentence, so check-results has something to hold it to."""
    from perflab.measure.conclusions import conclude_all
    from perflab.measure.tables import phase_findings

    breakdown = pd.DataFrame(
        [
            {
                "preset": "a",
                "backward_over_forward": 2.1,
                "backward_over_forward_ci_low": 1.9,
                "backward_over_forward_ci_high": 2.3,
                "backward_over_forward_ci_level": 0.96875,
                "forward_share": 0.3,
                "backward_share": 0.6,
                "optimizer_share": 0.1,
                "unstable": False,
            },
            {
                "preset": "b",
                "backward_over_forward": 2.6,
                "backward_over_forward_ci_low": 2.2,
                "backward_over_forward_ci_high": 2.9,
                "backward_over_forward_ci_level": 0.75,
                "forward_share": 0.3,
                "backward_share": 0.6,
                "optimizer_share": 0.1,
                "unstable": False,
            },
        ]
    )
    a, b = phase_findings(breakdown)
    assert "consistent with the FLOP model's 2x" in a.sentence and a.verdict == "consistent with"
    assert b.verdict == "too few steps to compare with"
    conclude_all(tmp_path, [a, b])
    saved = pd.read_csv(tmp_path / "conclusions.csv")
    assert saved["confidence"].tolist() == [0.96875, 0.75]
    assert _rules(tmp_path) == []


def test_a_step_that_fits_in_the_cache_is_held_against_its_compute_bound_alone(tmp_path):
    """Row 0 beats its memory bound but fits in the cache: no contradiction; row 1 beats the
    compute bound too; row 2 beats its memory bound without fitting; row 3 knows no cache."""
    pd.DataFrame(
        {
            "tokens_per_s_low": [150.0, 600.0, 150.0, 150.0],
            "roofline_tokens_per_s": [100.0, 100.0, 100.0, 100.0],
            "compute_bound_tokens_per_s": [500.0, 500.0, 500.0, 500.0],
            "step_bytes": [20e6, 20e6, 40e6, 20e6],
            "last_level_cache_bytes": [32 * 2**20, 32 * 2**20, 32 * 2**20, None],
        }
    ).to_csv(tmp_path / "decode.csv", index=False)
    details = list(check_results(tmp_path, library=None)["detail"])
    assert details == [
        "row 1: measured at least 600 tokens/s, bound 500 (compute: the step fits in the "
        "last-level cache)",
        "row 2: measured at least 150 tokens/s, bound 100",
        "row 3: measured at least 150 tokens/s, bound 100",
    ]
