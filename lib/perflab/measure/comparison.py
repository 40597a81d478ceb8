"""Is b faster than a? Two callables timed interleaved, and a verdict computed from an interval.

Timing a and then b lets a slow phase of a shared machine fall on one of them only. Here they
take turns in one process: each round times a, b, b, a or b, a, a, b (chosen at random, from a
seed drawn afresh for each comparison and recorded in it: the symmetric order cancels a drift
within the round, the random choice keeps a periodic disturbance, such as another process's
time slice, from locking onto one side, and a fresh seed keeps every comparison from sharing one
order, whose imbalance a trend within the rounds would then bias the same way every time),
every call with the device synchronised before and after, after ``warmup`` untimed calls of
each. A round's time of a is the faster of its two calls, likewise b (a disturbance that hits
one call is dropped), and the round gives the paired ratio r = t_b / t_a; a disturbance that
lasts longer than a round slows both sides and cancels in r.

``ratio`` is the median of the rounds' ratios and ``ci`` its distribution-free interval
(``perflab.measure.stats.median_interval``), whose real ``confidence`` the ``Comparison`` carries:
6 rounds give 96.8%, 3 rounds only 75%. Four verdicts (b against a), in the manner of
Criterion.rs's noise threshold: "faster" when the whole interval lies below 1 - band (b takes
less time), "slower" when it lies above 1 + band, "same" when it lies inside 1 ± band (default
±3%), and "inconclusive" otherwise, or whenever the interval's confidence is below the 95% asked
for (fewer than 6 rounds). The levels are claims, tested by simulation
(``perflab.measure.simulate``, ``tests/test_coverage.py``).

**Adaptive rounds** (``budget_s``): the rounds are looked at after ``rounds``, 2 x, 4 x ... up to
``max_rounds``, stopping at the first conclusive verdict or when the next look would overrun
the time budget. Looking several times and stopping when it looks conclusive would inflate the
false alarms, so each look's interval is taken at 1 - alpha / (number of planned looks)
(Bonferroni): whichever look stops, the reported interval holds with at least the stated
confidence. The looks are planned before the first timed round, from the fastest warm-up
round's time: only those that fit the budget count (``planned_max_rounds``), so a budget that
holds two looks pays alpha / 2 at each, not alpha / 4 for looks that could never come. For any
number K of planned looks, each at 1 - alpha / K, the reported interval holds with at least
1 - alpha; the plan comes from the warm-up's duration, not from any timed ratio, so the bound
holds whichever K is planned (as long as the warm-up's time says nothing of the ratios to come).
``Comparison.planned_looks`` records K.
"""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from perflab.measure.device import synchronize
from perflab.measure.stats import (
    CONFIDENCE,
    ROUNDS,
    is_unstable,
    level_text,
    max_level,
    median_interval,
    with_estimate,
)

NOISE_BAND = 0.03
VERDICTS = ("same", "faster", "slower", "inconclusive")
MAX_ROUNDS = 48
#: Rounds of each of ``noise_check``'s comparisons: more than ``ROUNDS``, so that its A/B arm
#: (a 2x slow-down) is found under competing load as well, not only on a quiet machine.
NOISE_CHECK_ROUNDS = 20


@dataclass(frozen=True)
class Comparison:
    """b against a: paired per-round times, the ratio b / a with its interval and that
    interval's real confidence, the verdict."""

    name_a: str
    name_b: str
    times_a: tuple[float, ...]
    times_b: tuple[float, ...]
    ratio: float  # median over rounds of time_b / time_a
    ci: tuple[float, float]
    noise_band: float
    confidence: float  # what the interval gives (at least this, for adaptive rounds)
    required: float = CONFIDENCE  # what a verdict asks for
    looks: int = 1  # how often the rounds were looked at (adaptive rounds: more than one)
    planned_looks: int = 1  # the looks the Bonferroni level was divided over (adaptive rounds)
    seed: int | None = None  # of the round order (``compare``; None: rounds measured elsewhere)
    #: What it was measured under ({"seq_len": 4096}): a row's first columns.
    labels: dict = field(default_factory=dict, compare=False)
    #: What was measured beside the times (a compilation's seconds, the largest difference of
    #: the two sides' outputs): a row's last columns.
    details: dict = field(default_factory=dict, compare=False)

    @property
    def rounds(self) -> int:
        return len(self.times_a)

    @property
    def median_a_s(self) -> float:
        return float(np.median(self.times_a))

    @property
    def median_b_s(self) -> float:
        return float(np.median(self.times_b))

    @property
    def verdict(self) -> str:
        return verdict(self.ci, self.noise_band, self.confidence, self.required)

    @property
    def speedup(self) -> float:
        """time_a / time_b: above 1 when b is faster."""
        return 1 / self.ratio

    def sentence(self) -> str:
        """The conclusion in words, computed from the verdict."""
        return describe_ratio(
            self.name_a,
            self.name_b,
            self.ratio,
            self.ci,
            self.noise_band,
            self.confidence,
            self.required,
        )

    def with_labels(self, **labels) -> Comparison:
        """This comparison with ``labels`` added to what it was measured under."""
        return dataclasses.replace(self, labels={**self.labels, **labels})

    def with_details(self, **details) -> Comparison:
        """This comparison with ``details`` added to what was measured beside the times."""
        return dataclasses.replace(self, details={**self.details, **details})

    def as_row(self) -> dict:
        """A flat dict for a results table: the labels, the times, ratio, interval and verdict,
        then the details."""
        return {
            **self.labels,
            "a": self.name_a,
            "b": self.name_b,
            "median_a_s": self.median_a_s,
            "median_b_s": self.median_b_s,
            "ratio_b_over_a": self.ratio,
            "ci_low": self.ci[0],
            "ci_high": self.ci[1],
            "confidence": self.confidence,
            "rounds": self.rounds,
            "looks": self.looks,
            "planned_looks": self.planned_looks,
            "noise_band": self.noise_band,
            "verdict": self.verdict,
            "order_seed": self.seed,
            **self.details,
        }


def band_edges(noise_band: float = NOISE_BAND) -> tuple[float, float]:
    """The noise band's edges as time ratios b / a (their inverses are the edges of a speed-up
    a / b): a printed interval's end must not land on one that the measured end does not reach
    (``stats.outward``)."""
    return 1 - noise_band, 1 + noise_band


def verdict(
    ci: tuple[float, float],
    noise_band: float = NOISE_BAND,
    confidence: float = CONFIDENCE,
    required: float = CONFIDENCE,
) -> str:
    """ "faster" / "slower" when the whole interval of time_b / time_a lies below 1 - band /
    above 1 + band, "same" when it lies inside 1 ± band, "inconclusive" otherwise or when the
    interval's ``confidence`` is below the ``required`` one."""
    low, high = ci
    if confidence < required - 1e-12:
        return "inconclusive"
    if high < 1 - noise_band:
        return "faster"
    if low > 1 + noise_band:
        return "slower"
    if 1 - noise_band <= low and high <= 1 + noise_band:
        return "same"
    return "inconclusive"


def describe_ratio(
    name_a: str,
    name_b: str,
    ratio: float,
    ci: tuple[float, float],
    noise_band: float = NOISE_BAND,
    confidence: float = CONFIDENCE,
    required: float = CONFIDENCE,
) -> str:
    """'b is 1.80x faster than a (95% CI 1.62–1.97x)' with the interval's real level; 'the same
    time within the ±3% noise band' only when the whole interval lies inside it; otherwise 'not
    established' with the reason (the interval reaches past the band, or too few rounds)."""
    low, high = ci
    level = level_text(confidence)
    result = verdict(ci, noise_band, confidence, required)
    edges = band_edges(noise_band)
    if result == "faster":  # as a speed-up: a / b, its interval 1 / high to 1 / low
        speedup, interval = with_estimate(
            1 / ratio, 1 / high, 1 / low, edges=tuple(1 / edge for edge in edges)
        )
        return f"{name_b} is {speedup}x faster than {name_a} ({level} CI {interval}x)"
    shown, interval = with_estimate(ratio, low, high, edges=edges)
    if result == "slower":
        return f"{name_b} is {shown}x slower than {name_a} ({level} CI {interval}x)"
    if result == "same":
        return (
            f"{name_b} and {name_a} take the same time within the ±{noise_band:.0%} noise band "
            f"(time ratio {shown}, {level} CI {interval})"
        )
    if confidence < required - 1e-12:
        reason = (
            f"the interval's confidence is {level}, below the {level_text(required)} a "
            "verdict needs: more rounds"
        )
    else:
        reason = f"the interval is neither outside nor inside the ±{noise_band:.0%} noise band"
    return (
        f"a difference between {name_b} and {name_a} is not established (time ratio "
        f"{shown}, {level} CI {interval}: {reason})"
    )


def look_schedule(rounds: int, max_rounds: int) -> list[int]:
    """The round counts at which adaptive rounds look: ``rounds``, doubling, up to and
    including ``max_rounds``."""
    looks = [rounds]
    while looks[-1] < max_rounds:
        looks.append(min(2 * looks[-1], max_rounds))
    return looks


def _per_look_confidence(looks: int, confidence: float) -> float:
    return 1 - (1 - confidence) / looks


def first_look_rounds(max_rounds: int = MAX_ROUNDS, confidence: float = CONFIDENCE) -> int:
    """The fewest rounds that can reach a verdict at the first look of adaptive rounds (8 for
    95% with looks up to 48 rounds)."""
    rounds = 2
    while max_level(rounds) < _per_look_confidence(
        len(look_schedule(rounds, max_rounds)), confidence
    ):
        rounds += 1
    return rounds


def planned_max_rounds(
    rounds: int, max_rounds: int, fits: Callable[[int], bool], confidence: float = CONFIDENCE
) -> int:
    """The last look of the longest schedule (``look_schedule`` from ``rounds``, doubling, up to
    one of its own looks) whose rounds ``fits`` (rounds -> bool, e.g. within a time budget); the
    first look's count when none fits, since a comparison takes at least its first look."""
    caps = look_schedule(rounds, max_rounds)
    for cap in reversed(caps):  # the schedule's last look is the cap, or its first look if longer
        if fits(look_schedule(max(rounds, first_look_rounds(cap, confidence)), cap)[-1]):
            return cap
    return caps[0]


def compare(
    fn_a: Callable[[], object],
    fn_b: Callable[[], object],
    *,
    rounds: int = ROUNDS,
    warmup: int = 2,
    device: torch.device | str = "cpu",
    noise_band: float = NOISE_BAND,
    names: tuple[str, str] = ("a", "b"),
    seed: int | None = None,
    budget_s: float | None = None,
    max_rounds: int = MAX_ROUNDS,
    confidence: float = CONFIDENCE,
) -> Comparison:
    """Time ``fn_a`` and ``fn_b`` interleaved (see the module docstring) and return the
    ``Comparison`` of b against a: ``rounds`` rounds, or with ``budget_s`` adaptive rounds from
    ``rounds`` (at least ``first_look_rounds``) up to ``max_rounds``, or fewer looks when the
    fastest warm-up round says that only fewer fit the budget (``planned_max_rounds``; with
    ``warmup=0`` nothing is known of a round's time, and all looks up to ``max_rounds`` are
    planned). ``seed`` fixes the round order (default: a fresh one, recorded in the result)."""
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 2:
        raise ValueError(f"rounds must be an integer >= 2, got {rounds!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    if not 0 <= noise_band < 1:
        raise ValueError(f"noise_band must be in [0, 1), got {noise_band!r}")
    if budget_s is not None and not budget_s > 0:
        raise ValueError(f"budget_s must be a positive number of seconds or None, got {budget_s!r}")
    if budget_s is not None and not (isinstance(max_rounds, int) and max_rounds >= rounds):
        raise ValueError(f"max_rounds must be an integer >= rounds ({rounds}), got {max_rounds!r}")
    device = torch.device(device)

    def timed(fn: Callable[[], object]) -> float:
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        return time.perf_counter() - start

    started = time.perf_counter()
    warm = []
    for _ in range(warmup):
        warm.append(timed(fn_a) + timed(fn_b))
    if budget_s is not None and warm:  # plan the looks from the fastest warm-up's round time
        per_round, spent = 2 * min(warm), time.perf_counter() - started

        def fits(n: int) -> bool:
            return spent + n * per_round <= budget_s

        max_rounds = planned_max_rounds(rounds, max_rounds, fits, confidence)
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    # One draw per round as it comes: the rounds taken depend on the looks (adaptive rounds
    # take at least first_look_rounds, which can exceed rounds and max_rounds).
    order = np.random.default_rng(seed)
    timing_started = time.perf_counter()

    def take_round(index: int) -> tuple[float, float]:
        if order.integers(0, 2):
            a1, b1, b2, a2 = timed(fn_a), timed(fn_b), timed(fn_b), timed(fn_a)
        else:
            b1, a1, a2, b2 = timed(fn_b), timed(fn_a), timed(fn_a), timed(fn_b)
        return min(a1, a2), min(b1, b2)

    def within_budget(done: int, next_look: int) -> bool:
        per_round = (time.perf_counter() - timing_started) / done
        return time.perf_counter() - started + per_round * (next_look - done) <= budget_s

    result = interleaved_rounds(
        take_round,
        rounds=rounds,
        adaptive=budget_s is not None,
        max_rounds=max_rounds,
        may_continue=within_budget,
        names=names,
        noise_band=noise_band,
        confidence=confidence,
    )
    return dataclasses.replace(result, seed=seed)


def interleaved_rounds(
    take_round: Callable[[int], tuple[float, float]],
    *,
    rounds: int,
    adaptive: bool = False,
    max_rounds: int = MAX_ROUNDS,
    may_continue: Callable[[int, int], bool] = lambda done, next_look: True,
    names: tuple[str, str] = ("a", "b"),
    noise_band: float = NOISE_BAND,
    confidence: float = CONFIDENCE,
) -> Comparison:
    """The rounds of a comparison and when to stop: ``take_round(i)`` gives round i's times of a
    and b (``compare`` times them; ``perflab.measure.simulate`` draws them). Fixed: ``rounds``
    rounds. Adaptive: looks at ``look_schedule``, each at the Bonferroni level, until a
    conclusive verdict, the last look, or ``may_continue(rounds_done, next_look)`` says no."""
    if not adaptive:
        times = [take_round(i) for i in range(rounds)]
        return paired_comparison(
            *zip(*times, strict=True), names=names, noise_band=noise_band, confidence=confidence
        )
    looks = look_schedule(max(rounds, first_look_rounds(max_rounds, confidence)), max_rounds)
    level = _per_look_confidence(len(looks), confidence)
    times: list[tuple[float, float]] = []
    for looked, target in enumerate(looks, start=1):
        times += [take_round(i) for i in range(len(times), target)]
        result = paired_comparison(
            *zip(*times, strict=True), names=names, noise_band=noise_band, confidence=level
        )
        if (
            looked == len(looks)
            or result.verdict != "inconclusive"
            or not may_continue(target, looks[looked])
        ):
            break
    # Whichever look stopped, its interval holds with at least 1 - alpha (Bonferroni over the
    # planned looks): the Comparison states that overall level; its verdict is the look's.
    overall = confidence if result.confidence >= level - 1e-12 else result.confidence
    return Comparison(
        result.name_a,
        result.name_b,
        result.times_a,
        result.times_b,
        result.ratio,
        result.ci,
        noise_band,
        overall,
        confidence,
        looked,
        len(looks),
    )


def paired_comparison(
    times_a,
    times_b,
    *,
    names: tuple[str, str] = ("a", "b"),
    noise_band: float = NOISE_BAND,
    confidence: float = CONFIDENCE,
) -> Comparison:
    """The ``Comparison`` of per-round times measured in turns elsewhere (``compare``, or a
    benchmark whose variants take turns, as notebook 07's DDP rounds): element i of both
    sequences must come from the same round. The interval is the narrowest whose level reaches
    ``confidence`` (or [min, max] with its lower level, and the verdict "inconclusive")."""
    times_a, times_b = np.asarray(times_a, dtype=float), np.asarray(times_b, dtype=float)
    if times_a.shape != times_b.shape or times_a.size < 2:
        raise ValueError(
            f"paired times need the same number (>= 2) of rounds, got {times_a.size} and "
            f"{times_b.size}"
        )
    ratios = times_b / times_a
    interval = median_interval(ratios, confidence)
    return Comparison(
        names[0],
        names[1],
        tuple(times_a.tolist()),
        tuple(times_b.tolist()),
        float(np.median(ratios)),
        (interval.low, interval.high),
        noise_band,
        interval.level,
        confidence,
    )


def comparison_frame(comparisons: Iterable[Comparison]) -> pd.DataFrame:
    """One row per comparison, the same columns everywhere: ``Comparison.as_row()`` (its
    labels, times, verdict and details) and its sentence."""
    rows = []
    for result in comparisons:
        if not isinstance(result, Comparison):
            raise TypeError(
                f"comparison_frame takes Comparisons (labels go in with_labels), "
                f"got {type(result).__name__}"
            )
        rows.append({**result.as_row(), "sentence": result.sentence()})
    return pd.DataFrame(rows)


def paired_table(
    times: dict[str, list[float]], reference: str, label: str = "name"
) -> pd.DataFrame:
    """Each entry of ``times`` (seconds per round, the entries timed in turns within each round)
    against ``reference``: its median, the paired ratio with its interval and that interval's
    confidence, and the verdict (``paired_comparison``), and whether its own times are
    ``unstable``; one row per entry, named in the column ``label``."""
    if reference not in times:
        raise ValueError(f"reference {reference!r} is not among the timed: {', '.join(times)}")
    rows = []
    for name, samples in times.items():
        row = {
            label: name,
            "median_ms": float(pd.Series(samples).median()) * 1e3,
            "unstable": is_unstable(samples),
        }
        if name != reference:
            result = paired_comparison(times[reference], samples, names=(reference, name))
            row.update(
                vs_reference=result.ratio,
                ci_low=result.ci[0],
                ci_high=result.ci[1],
                confidence=result.confidence,
                rounds=result.rounds,
                verdict=result.verdict,
            )
        rows.append(row)
    return pd.DataFrame(rows)


@contextlib.contextmanager
def competing_work(processes: int = 2, seconds: float = 120) -> Iterator[None]:
    """Busy-looping Python processes for the duration of the block (stopped on exit, and by
    themselves after ``seconds``): a burst of competing work on a shared machine."""
    loop = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(processes)]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def noise_check(
    runs: int = 20,
    *,
    size: int = 192,
    rounds: int = NOISE_CHECK_ROUNDS,
    burst: bool = False,
    noise_band: float = NOISE_BAND,
) -> pd.DataFrame:
    """``runs`` A/A comparisons (the same matmul on both sides: any verdict but "same" is a
    false alarm) and ``runs`` A/B comparisons (b does the matmul twice: the verdict must be
    "slower", the ratio near 2), optionally under a burst of competing work; one row each."""
    x = torch.randn(size, size, generator=torch.Generator().manual_seed(0))

    def once() -> None:
        x @ x

    def twice() -> None:
        x @ x
        x @ x

    rows = []
    with competing_work() if burst else contextlib.nullcontext():
        for kind, fn_b in (("A/A", once), ("A/B 2x", twice)):
            for run in range(runs):
                result = compare(once, fn_b, rounds=rounds, noise_band=noise_band, seed=run)
                rows.append({"test": kind, "run": run, "burst": burst, **result.as_row()})
    return pd.DataFrame(rows)
