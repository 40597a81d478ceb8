"""The noise-aware comparison and the timing statistics. The A/A and A/B runs on this machine:
identical work must not read "faster" or "slower" (at most 1 false alarm in 10, also under a
burst of competing work) and twice the work must always read "slower", with a ratio near 2 in
at least 9 runs of 10 (a burst of the shared machine during one run's rounds moved one median
ratio to 3.0 in a clean-clone CI run: still "slower", but not near 2).
The stated confidences are checked by simulation in test_coverage.py."""

import re
import time

import numpy as np
import pytest

from perflab.bench import Timing, compare
from perflab.measure.comparison import describe_ratio, noise_check, paired_comparison, verdict
from perflab.measure.stats import (
    apart,
    is_unstable,
    level_text,
    median_interval,
    order_statistic_level,
    outward,
    rounded,
    with_estimate,
)


@pytest.mark.parametrize("burst", [False, True], ids=["quiet", "burst"])
def test_identical_work_reads_same_and_double_work_reads_slower(burst):
    table = noise_check(runs=10, burst=burst)
    same = table[table["test"] == "A/A"]
    false_alarms = same["verdict"].isin(["faster", "slower"])
    assert false_alarms.sum() <= 1, same[["ratio_b_over_a", "ci_low", "ci_high"]]
    double = table[table["test"] == "A/B 2x"]
    assert (double["verdict"] == "slower").all(), double
    assert (~double["ratio_b_over_a"].between(1.7, 2.3)).sum() <= 1, double["ratio_b_over_a"]


def test_four_verdicts_from_the_whole_interval_against_the_band():
    assert verdict((0.90, 0.96)) == "faster"
    assert verdict((0.90, 0.98)) == "inconclusive"  # reaches into the ±3% band
    assert verdict((1.04, 1.50)) == "slower"
    assert verdict((0.50, 1.50)) == "inconclusive"
    assert verdict((0.98, 1.02)) == "same"  # the whole interval inside the band
    assert verdict((1.02, 1.06), noise_band=0.01) == "slower"
    assert verdict((1.02, 1.06)) == "inconclusive"  # excludes 1 but not the band: not "same"
    # An interval below the confidence asked for concludes nothing, however far it lies.
    assert verdict((0.40, 0.50), confidence=0.75) == "inconclusive"


def test_an_interval_is_printed_rounded_outward_and_off_the_edges_it_does_not_reach():
    assert outward(1.02996, 1.43001) == "1.02–1.44"  # to nearest: 1.03–1.43
    assert outward(0.97, 1.03) == "0.97–1.03"  # two-decimal ends stay as they are
    assert outward(0.57, 1.13) == "0.57–1.13"  # not 0.56: 0.57 * 100 is 56.99999999999999
    assert outward(1.02996, 1.43001, decimals=3) == "1.029–1.431"
    assert outward(float("nan"), 1.0) == "nan–1.00"
    assert outward(1.0304, 1.43, edges=(0.97, 1.03)) == "1.0304–1.4300"  # not on the edge 1.03
    assert outward(0.9712, 1.01, edges=(0.97, 1.03)) == "0.971–1.010"
    assert outward(0.5, 2.5, edges=(0.97, 1.03)) == "0.50–2.50"  # across both: nothing to add
    assert outward(-0.001, 1e300).startswith("-0.01–1")  # no overflow
    assert outward(0.123456789, 0.2, decimals=8) == "0.12345678–0.20000000"
    # closer to an edge than six places show: every digit
    assert outward(1.0300004, 1.5, edges=(0.97, 1.03)) == "1.0300004–1.5"
    assert outward(1 / 0.97 + 5e-8, 1.5, edges=(1 / 1.03, 1 / 0.97)) == f"{1 / 0.97 + 5e-8!r}–1.5"
    # the point at the interval's places: inside it, not 1.03 beside 1.0304–1.5000
    assert with_estimate(1.0304, 1.0304, 1.5, edges=(0.97, 1.03)) == ("1.0304", "1.0304–1.5000")
    assert with_estimate(1.21, 1.02996, 1.43001) == ("1.21", "1.02–1.44")
    # an end within 12 digits of an edge it clears: compared as it is, so every digit
    faster = describe_ratio("a", "b", 0.6, (0.5, 1 / 1.030927835052))
    assert "(95% CI 1.030927835052–2.0x)" in faster
    assert outward(1.0300000000001, 1.5, edges=(0.97, 1.03)) == "1.0300000000001–1.5"
    assert rounded(0.2504, 2, "down") == "0.25" and rounded(0.2504, 2, "up") == "0.26"
    assert rounded(1.02 - 1, 2, "up") == "0.02"  # 0.020000000000000018: float noise, not above
    with pytest.raises(ValueError, match="way must be one of down, up, nearest, got 'out'"):
        rounded(1.0, 2, "out")


def test_two_numbers_are_printed_apart_on_their_own_sides():
    assert apart(3.1993, 3.196) == ("3.199", "3.196")  # at two places: 3.19 and 3.20
    assert apart(0.2496, 0.25, decimals=3) == ("0.2496", "0.2500")
    assert apart(1.2, 1.3) == ("1.20", "1.30") and apart(4.0, 4.0) == ("4.00", "4.00")
    assert apart(1.0 + 1e-12, 1.0) == (repr(1.0 + 1e-12), "1.0")  # closer than six places
    assert apart(np.float64(0.25000005), 0.25, 3) == ("0.25000005", "0.25")  # not np.float64(...)


def test_a_printed_interval_holds_the_measured_one_and_reads_as_its_verdict():
    """Intervals whose ends lie near the ±3% band's edges: the sentence's interval holds the
    measured one, and where it lies against the band (outside, inside, across an edge) is what
    the verdict says. Rounded to the nearest, 1.0299–1.43 read as outside the band under an
    inconclusive verdict (notebook 08's ZeRO step)."""
    rng = np.random.default_rng(0)
    for _ in range(4000):
        low, high = np.sort(rng.choice([0.97, 1.0, 1.03], 2) + rng.uniform(-0.008, 0.008, 2))
        result = verdict((low, high))
        sentence = describe_ratio("a", "b", (low + high) / 2, (low, high))
        printed = re.search(r"CI (\d+\.\d+)–(\d+\.\d+)", sentence)
        p_low, p_high = float(printed.group(1)), float(printed.group(2))
        point = re.search(r"(\d+\.\d+)x (?:faster|slower)|time ratio (\d+\.\d+)", sentence)
        assert p_low <= float(point.group(1) or point.group(2)) <= p_high, sentence
        if result == "faster":  # printed as a speed-up: 1 / high to 1 / low, above 1 / 0.97
            assert p_low <= 1 / high and p_high >= 1 / low and p_low > 1 / 0.97, sentence
            continue
        assert p_low <= low and p_high >= high, sentence
        if result == "slower":
            assert p_low > 1.03, sentence
        elif result == "same":
            assert 0.97 <= p_low and p_high <= 1.03, sentence
        else:  # reaches across an edge of the band: neither inside it nor outside
            assert p_low < 1.03 and p_high > 0.97, sentence
            assert p_low < 0.97 or p_high > 1.03, sentence


def test_sentences_follow_the_verdict_and_state_the_real_level():
    assert describe_ratio("eager", "compiled", 0.5, (0.45, 0.55)) == (
        "compiled is 2.00x faster than eager (95% CI 1.81–2.23x)"  # ends rounded outward
    )
    assert describe_ratio("fp32", "bf16", 1.8, (1.6, 2.0), confidence=0.96875).startswith(
        "bf16 is 1.80x slower than fp32 (96.8% CI"
    )
    assert "the same time within the ±3% noise band" in describe_ratio("a", "b", 1.0, (0.98, 1.02))
    unsure = describe_ratio("a", "b", 1.05, (1.02, 1.06))
    assert "is not established" in unsure and "no difference" not in unsure
    few = describe_ratio("a", "b", 0.5, (0.4, 0.6), confidence=0.75)
    assert "not established" in few and "75% CI" in few and "more rounds" in few


def test_paired_times_give_the_ratio_of_each_round_and_its_real_confidence():
    result = paired_comparison([1.0, 2.0, 4.0], [2.0, 4.0, 8.0], names=("x", "y"))
    assert result.ratio == 2.0 and result.ci == (2.0, 2.0)
    assert result.confidence == 0.75 and result.verdict == "inconclusive"  # 3 rounds: 75%
    six = paired_comparison([1.0] * 6, [2.0, 2.1, 1.9, 2.0, 2.2, 1.8])
    assert six.confidence == pytest.approx(0.96875) and six.ci == (1.8, 2.2)
    assert six.verdict == "slower" and six.as_row()["confidence"] == six.confidence
    with pytest.raises(ValueError, match="same number"):
        paired_comparison([1.0, 2.0], [1.0])


def test_bad_arguments_are_one_clear_error():
    with pytest.raises(ValueError, match="rounds must be an integer >= 2"):
        compare(lambda: None, lambda: None, rounds=1)
    with pytest.raises(ValueError, match="noise_band"):
        compare(lambda: None, lambda: None, noise_band=1.5)


def test_order_statistic_interval_of_the_median():
    rng = np.random.default_rng(1)
    values = rng.normal(10.0, 1.0, size=200)
    interval = median_interval(values)
    assert interval.low < np.median(values) < interval.high and interval.high - interval.low < 0.6
    assert 0.95 <= interval.level < 0.96  # the narrowest interval that reaches 95%
    # Few samples: [min, max] with the level it gives, never called 95%.
    assert tuple(median_interval([3.0, 1.0, 2.0])) == (1.0, 3.0)
    assert median_interval([3.0, 1.0, 2.0]).level == 0.75
    assert median_interval([3.0]).level == 0.0
    assert (
        order_statistic_level(5, 1) == 1 - 2 / 32 and order_statistic_level(10, 2) == 1 - 22 / 1024
    )
    assert (
        level_text(0.96875) == "96.8%" and level_text(0.95) == "95%" and level_text(0.75) == "75%"
    )
    with pytest.raises(ValueError, match="at least one value"):
        median_interval([])


def test_instability_rule():
    assert not is_unstable([1.0, 1.01, 0.99, 1.02, 1.0])
    assert is_unstable([1.0, 1.5, 0.7, 2.0, 1.0])  # IQR far above 25% of the median
    assert is_unstable([1.0, 1.0])  # too few samples


def test_timing_rows_carry_the_interval_and_the_flag():
    row = Timing((1.0, 1.1, 0.9, 1.0, 1.05), warmup=1).summary()
    assert row["median_ci_low_s"] <= row["median_s"] <= row["median_ci_high_s"]
    assert row["median_ci_level"] == pytest.approx(0.9375)  # [min, max] of 5
    assert row["iqr_s"] == pytest.approx(0.05)
    assert row["unstable"] is False


def test_noise_check_command_prints_the_rates(capsys):
    from perflab.tools.cli import main

    assert main(["noise-check", "--runs", "2"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("A/A false alarms: ") and " of 2; A/B 2x detected: " in last


def test_least_squares_recovers_a_plane_and_its_r2():
    import numpy as np

    from perflab.measure.stats import least_squares

    x = np.arange(1.0, 9.0)
    exact = 2.0 + 3.0 * x - 0.5 / x
    coefficients, r2 = least_squares([np.ones_like(x), x, 1 / x], exact)
    assert np.allclose(coefficients, [2.0, 3.0, -0.5]) and r2 == pytest.approx(1.0)
    noisy = exact + np.where(x % 2 == 0, 1.0, -1.0)
    assert least_squares([np.ones_like(x), x, 1 / x], noisy)[1] < 1.0
    assert np.isnan(least_squares([np.ones_like(x)], np.full_like(x, 3.0))[1])


def test_paired_table_against_a_reference():
    from perflab.measure.comparison import paired_table

    times = {
        "ref": [1.0, 1.1, 0.9, 1.0, 1.05, 1.0],
        "double": [2.0, 2.2, 1.8, 2.0, 2.1, 2.0],
        "same": [1.0, 1.1, 0.9, 1.0, 1.05, 1.0],
    }
    table = paired_table(times, "ref", label="path").set_index("path")
    assert table.loc["ref", "median_ms"] == pytest.approx(1000.0)
    assert table.loc["ref", "verdict"] != table.loc["ref", "verdict"]  # NaN: no comparison
    assert table.loc["double", "vs_reference"] == pytest.approx(2.0)
    assert table.loc["double", "verdict"] == "slower"
    assert table.loc["same", "vs_reference"] == pytest.approx(1.0)
    assert table.loc["same", "verdict"] == "same"
    assert table.loc["same", "confidence"] == pytest.approx(0.96875)
    # 5 rounds give [min, max] at 93.75%: too few for a verdict at 95%.
    five = paired_table({k: v[:5] for k, v in times.items()}, "ref").set_index("name")
    assert five.loc["double", "verdict"] == "inconclusive"
    with pytest.raises(ValueError, match="reference 'nope' is not among the timed: ref, double"):
        paired_table(times, "nope")


def test_adaptive_rounds_stop_at_a_verdict_or_the_budget():
    import torch

    from perflab.measure.comparison import first_look_rounds, look_schedule

    assert look_schedule(8, 48) == [8, 16, 32, 48] and first_look_rounds() == 8
    x = torch.randn(160, 160, generator=torch.Generator().manual_seed(0))

    def once():
        x @ x

    def four_times():
        for _ in range(4):
            x @ x

    found = compare(once, four_times, rounds=2, budget_s=60)
    assert found.verdict == "slower" and found.rounds == 8 and found.looks == 1
    assert found.confidence == 0.95  # at least 95% whichever look stops (Bonferroni)
    assert "95% CI" in found.sentence()
    # A budget smaller than one look still takes the first look, then stops.
    import time

    start = time.perf_counter()
    same = compare(once, once, rounds=8, budget_s=1e-3)
    assert same.rounds == 8 and same.looks == 1 and time.perf_counter() - start < 30
    with pytest.raises(ValueError, match="budget_s must be a positive number"):
        compare(once, once, budget_s=0)


def test_the_looks_are_planned_from_the_budget():
    from perflab.measure.comparison import planned_max_rounds

    # Up to 48 rounds from 6: caps 6, 12, 24, 48; the longest schedule that fits is taken.
    assert planned_max_rounds(6, 48, fits=lambda n: True) == 48
    assert planned_max_rounds(6, 48, fits=lambda n: n <= 30) == 24
    assert planned_max_rounds(6, 48, fits=lambda n: n <= 13) == 12
    assert planned_max_rounds(6, 48, fits=lambda n: False) == 6  # at least the first look

    # A round of about 2 x (1 + 1) ms and a budget of 10 s: all looks up to 48 rounds are
    # planned; a tiny budget plans one look (95% at that look, not 95% / 4).
    def nap():
        time.sleep(1e-3)

    roomy = compare(nap, nap, rounds=6, budget_s=10)
    assert roomy.planned_looks == 4  # 8, 16, 32, 48 rounds
    calm = compare(nap, nap, rounds=6, budget_s=1e-3)
    assert calm.planned_looks == calm.looks == 1 and calm.rounds == 6 and calm.confidence == 0.95


@pytest.mark.parametrize(
    "rounds, max_rounds, budget_s, warmup",
    [(4, 48, 1e-6, 1), (4, 4, 10.0, 0), (5, 5, 10.0, 1), (2, 2, 10.0, 0)],
)
def test_adaptive_rounds_from_fewer_rounds_than_the_first_look(
    rounds, max_rounds, budget_s, warmup
):
    """Adaptive rounds start at first_look_rounds (6 or more) whatever ``rounds`` says; the
    round order once held only max(rounds, max_rounds) entries, and the sixth round raised
    IndexError."""
    from perflab.measure.stats import max_level

    calls = []
    result = compare(
        lambda: calls.append("a"),
        lambda: calls.append("b"),
        rounds=rounds,
        max_rounds=max_rounds,
        budget_s=budget_s,
        warmup=warmup,
    )
    fewest = next(n for n in range(2, 50) if max_level(n) >= 0.95)  # 6: a 95% interval at all
    assert result.rounds >= fewest > rounds
    assert calls.count("a") == calls.count("b") == 2 * (warmup + result.rounds) - warmup


def test_each_comparison_draws_its_own_round_order_and_records_it():
    """Two comparisons with the default seed interleave in different orders (a shared order's
    imbalance would bias every comparison alike under a trend within the rounds); the recorded
    seed replays an order exactly."""

    def order_of(**kwargs):
        calls = []
        result = compare(
            lambda: calls.append("a"), lambda: calls.append("b"), rounds=40, warmup=0, **kwargs
        )
        return "".join(calls), result

    first, result = order_of()
    second, other = order_of()
    assert first != second and result.seed != other.seed
    assert order_of(seed=result.seed)[0] == first
    assert result.as_row()["order_seed"] == result.seed


def test_labels_and_details_travel_with_a_comparison_into_its_row():
    from perflab.measure.comparison import comparison_frame, paired_comparison

    plain = paired_comparison([2.0] * 6, [1.0] * 6, names=("a", "b"))
    labelled = plain.with_labels(seq_len=64).with_details(max_abs_diff=0.5)
    assert plain.labels == {} and plain.details == {}  # a new comparison, the old one unchanged
    assert labelled == plain  # the same measurement: labels and details are not compared
    row = labelled.as_row()
    assert list(row)[0] == "seq_len" and list(row)[-1] == "max_abs_diff"
    table = comparison_frame([labelled, plain.with_labels(seq_len=128)])
    assert table["seq_len"].tolist() == [64, 128] and table["sentence"].iloc[0] == plain.sentence()
    with pytest.raises(
        TypeError, match=r"takes Comparisons \(labels go in with_labels\), got tuple"
    ):
        comparison_frame([({"seq_len": 64}, plain)])
