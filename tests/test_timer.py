import math
import time

import pytest

from perflab.bench import Timing, time_fn


def test_statistics_of_known_samples():
    timing = Timing(samples=(3.0, 1.0, 5.0, 2.0, 4.0), warmup=0)
    assert timing.mean == 3.0
    assert timing.std == pytest.approx(math.sqrt(2.5))  # sample std, ddof=1
    assert timing.median == 3.0
    assert (timing.min, timing.max) == (1.0, 5.0)
    # Linear interpolation between order statistics: 1 + 0.2*4 = 1.8, 1 + 0.8*4 = 4.2.
    assert timing.p20 == pytest.approx(1.8)
    assert timing.p80 == pytest.approx(4.2)
    summary = timing.summary()
    assert summary["median_s"] == 3.0 and summary["steps"] == 5 and "timing_method" in summary


def test_single_sample_has_zero_spread():
    timing = Timing(samples=(0.5,), warmup=3)
    assert timing.std == 0.0 and timing.p20 == timing.p80 == 0.5


def test_synchronises_around_every_timed_step_and_not_during_warmup():
    events = []
    timing = time_fn(
        lambda: events.append("fn"), warmup=2, steps=3, sync=lambda: events.append("sync")
    )
    assert events == ["fn", "fn"] + ["sync", "fn", "sync"] * 3
    assert len(timing.samples) == 3 and timing.warmup == 2


def test_sleep_workload_is_timed_at_least_as_long_as_it_sleeps():
    timing = time_fn(lambda: time.sleep(0.02), warmup=1, steps=5)
    assert timing.min >= 0.02
    # Loose upper bound: a 20 ms sleep that takes 10x longer means the timer counts something else.
    assert timing.median < 0.2


def test_work_proportional_to_size_takes_proportionally_longer():
    def spin(n):
        return lambda: sum(range(n))

    small = time_fn(spin(20_000), warmup=1, steps=5)
    large = time_fn(spin(400_000), warmup=1, steps=5)
    assert large.median > 5 * small.median


@pytest.mark.parametrize("warmup, steps", [(-1, 5), (0, 0), (1, 2.5), (True, 3)])
def test_bad_counts_raise(warmup, steps):
    with pytest.raises(ValueError, match="must be an integer"):
        time_fn(lambda: None, warmup=warmup, steps=steps)
