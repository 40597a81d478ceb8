"""perflab check-results: each rule finds its contradiction, and clean results pass."""

import pandas as pd
import pytest

from perflab.bench.checks import check_results
from perflab.bench.comparison import paired_comparison
from perflab.bench.conclusions import UNSTABLE_SENTENCE, conclude
from perflab.cli import main


def _timings(low_small, high_small, low_large, high_large):
    common = {"mode": "train-step", "dtype": "float32", "context_length": 64, "batch_size": 4,
              "device": "cpu", "status": "ok"}  # fmt: skip
    return pd.DataFrame([
        {"preset": "cpu-tiny", "median_ci_low_s": low_small, "median_ci_high_s": high_small,
         **common},
        {"preset": "cpu-small", "median_ci_low_s": low_large, "median_ci_high_s": high_large,
         **common},
    ])  # fmt: skip


def test_clean_results_pass(tmp_path):
    _timings(0.10, 0.12, 0.11, 0.30).to_csv(tmp_path / "timings.csv", index=False)
    pd.DataFrame({"forward_share": [0.3], "ratio": [1.2], "step_s": [0.1]}).to_csv(
        tmp_path / "other.csv", index=False
    )
    assert check_results(tmp_path).empty
    assert main(["check-results", str(tmp_path)]) == 0


def test_each_rule_finds_its_contradiction(tmp_path, capsys):
    _timings(0.20, 0.22, 0.10, 0.12).to_csv(tmp_path / "timings.csv", index=False)
    pd.DataFrame({"optimizer_phase_s": [-0.01], "mfu": [1.3], "compiled_over_eager": [0.0],
                  "status": ["ok"]}).to_csv(tmp_path / "phases.csv", index=False)  # fmt: skip
    pd.DataFrame({"x_s": [-5.0], "status": ["oom"]}).to_csv(tmp_path / "oom.csv", index=False)
    concluded = {"key": "k", "sentence": "b is 2x faster", "verdict": "faster", "unstable": True}
    pd.DataFrame([concluded]).to_csv(tmp_path / "conclusions.csv", index=False)
    pd.DataFrame({"batch": [1, 2], "tokens_per_s_low": [90.0, 300.0],
                  "roofline_tokens_per_s": [100.0, 200.0]}).to_csv(tmp_path / "decode.csv",
                                                                    index=False)  # fmt: skip
    found = check_results(tmp_path)
    assert sorted(found["rule"]) == sorted([
        "larger preset faster", "negative time", "share out of bounds", "ratio not positive",
        "conclusion from an unstable measurement", "above the roofline",
    ])  # fmt: skip
    assert "row 1: measured at least 300 tokens/s, bound 200" in " ".join(found["detail"])
    assert main(["check-results", str(tmp_path)]) == 1
    assert "6 contradictions" in capsys.readouterr().out


def test_conclusions_are_computed_and_never_from_unstable_rows(tmp_path):
    comparison = paired_comparison([1.0, 1.0, 1.0], [0.5, 0.5, 0.5], names=("eager", "compiled"))
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
