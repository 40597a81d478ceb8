"""The noise-aware comparison and the timing statistics. The A/A and A/B runs are the issue's
acceptance tests: identical work must read "same" (at most 1 false alarm in 10, also under a
burst of competing work) and twice the work must always read "slower" with a ratio near 2."""

import numpy as np
import pytest

from perflab.bench import Timing, compare
from perflab.bench.comparison import describe_ratio, noise_check, paired_comparison, verdict
from perflab.bench.stats import bootstrap_ci, is_unstable


@pytest.mark.parametrize("burst", [False, True], ids=["quiet", "burst"])
def test_identical_work_reads_same_and_double_work_reads_slower(burst):
    table = noise_check(runs=10, burst=burst)
    same = table[table["test"] == "A/A"]
    assert (same["verdict"] != "same").sum() <= 1, same[["ratio_b_over_a", "ci_low", "ci_high"]]
    double = table[table["test"] == "A/B 2x"]
    assert (double["verdict"] == "slower").all(), double
    assert double["ratio_b_over_a"].between(1.7, 2.3).all(), double["ratio_b_over_a"]


def test_verdict_is_decided_by_the_whole_interval_against_the_band():
    assert verdict((0.90, 0.96)) == "faster"
    assert verdict((0.90, 0.98)) == "same"  # reaches into the ±3% band
    assert verdict((1.04, 1.50)) == "slower"
    assert verdict((0.50, 1.50)) == "same"
    assert verdict((1.02, 1.06), noise_band=0.01) == "slower"


def test_sentences_follow_the_verdict():
    assert describe_ratio("eager", "compiled", 0.5, (0.45, 0.55)) == (
        "compiled is 2.00x faster than eager (95% CI 1.82–2.22x)"
    )
    assert describe_ratio("fp32", "bf16", 1.8, (1.6, 2.0)).startswith("bf16 is 1.80x slower")
    assert "the same time within the ±3% noise band" in describe_ratio("a", "b", 1.0, (0.98, 1.02))
    assert "no difference between b and a beyond noise is established" in describe_ratio(
        "a", "b", 0.93, (0.89, 0.99)
    )


def test_paired_times_give_the_ratio_of_each_round():
    result = paired_comparison([1.0, 2.0, 4.0], [2.0, 4.0, 8.0], names=("x", "y"))
    assert result.ratio == 2.0 and result.ci == (2.0, 2.0) and result.verdict == "slower"
    with pytest.raises(ValueError, match="same number"):
        paired_comparison([1.0, 2.0], [1.0])


def test_bad_arguments_are_one_clear_error():
    with pytest.raises(ValueError, match="rounds must be an integer >= 2"):
        compare(lambda: None, lambda: None, rounds=1)
    with pytest.raises(ValueError, match="noise_band"):
        compare(lambda: None, lambda: None, noise_band=1.5)


def test_bootstrap_interval_of_the_median():
    rng = np.random.default_rng(1)
    values = rng.normal(10.0, 1.0, size=200)
    low, high = bootstrap_ci(values)
    assert low < np.median(values) < high and high - low < 0.6
    assert bootstrap_ci([3.0]) == (3.0, 3.0)
    assert bootstrap_ci(values) == bootstrap_ci(values)  # seeded: reproducible


def test_instability_rule():
    assert not is_unstable([1.0, 1.01, 0.99, 1.02, 1.0])
    assert is_unstable([1.0, 1.5, 0.7, 2.0, 1.0])  # IQR far above 25% of the median
    assert is_unstable([1.0, 1.0])  # too few samples


def test_timing_rows_carry_the_interval_and_the_flag():
    row = Timing((1.0, 1.1, 0.9, 1.0, 1.05), warmup=1).summary()
    assert row["median_ci_low_s"] <= row["median_s"] <= row["median_ci_high_s"]
    assert row["iqr_s"] == pytest.approx(0.05)
    assert row["unstable"] is False


def test_noise_check_command_prints_the_rates(capsys):
    from perflab.cli import main

    assert main(["noise-check", "--runs", "2"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("A/A false alarms: ") and " of 2; A/B 2x detected: " in last


def test_least_squares_recovers_a_plane_and_its_r2():
    import numpy as np

    from perflab.bench.stats import least_squares

    x = np.arange(1.0, 9.0)
    exact = 2.0 + 3.0 * x - 0.5 / x
    coefficients, r2 = least_squares([np.ones_like(x), x, 1 / x], exact)
    assert np.allclose(coefficients, [2.0, 3.0, -0.5]) and r2 == pytest.approx(1.0)
    noisy = exact + np.where(x % 2 == 0, 1.0, -1.0)
    assert least_squares([np.ones_like(x), x, 1 / x], noisy)[1] < 1.0
    assert np.isnan(least_squares([np.ones_like(x)], np.full_like(x, 3.0))[1])


def test_paired_table_against_a_reference():
    from perflab.bench.comparison import paired_table

    times = {"ref": [1.0, 1.1, 0.9, 1.0, 1.05], "double": [2.0, 2.2, 1.8, 2.0, 2.1],
             "same": [1.0, 1.1, 0.9, 1.0, 1.05]}  # fmt: skip
    table = paired_table(times, "ref", label="path").set_index("path")
    assert table.loc["ref", "median_ms"] == pytest.approx(1000.0)
    assert table.loc["ref", "verdict"] != table.loc["ref", "verdict"]  # NaN: no comparison
    assert table.loc["double", "vs_reference"] == pytest.approx(2.0)
    assert table.loc["double", "verdict"] == "slower"
    assert table.loc["same", "vs_reference"] == pytest.approx(1.0)
    assert table.loc["same", "verdict"] == "same"
    with pytest.raises(ValueError, match="reference 'nope' is not among the timed: ref, double"):
        paired_table(times, "nope")
