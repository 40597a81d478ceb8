"""Is b faster than a? Two callables timed interleaved, and a verdict computed from an interval.

Timing a and then b lets a slow phase of a shared machine fall on one of them only. Here they
take turns in one process: each round times a, b, b, a or b, a, a, b (chosen at random with a
seeded generator: the symmetric order cancels a drift within the round, the random choice keeps
a periodic disturbance, such as another process's time slice, from locking onto one side),
every call with the device synchronised before and after, after ``warmup`` untimed calls of
each. A round's time of a is the faster of its two calls, likewise b (a disturbance that hits
one call is dropped), and the round gives the paired ratio r = t_b / t_a; a disturbance that
lasts longer than a round slows both sides and cancels in r.

``ratio`` is the median of the rounds' ratios and ``ci`` its 95% percentile-bootstrap interval
over rounds (``perflab.bench.stats``). The verdict (b against a) follows Criterion.rs: "same"
unless the whole interval lies outside the noise band 1 ± ``noise_band`` (default ±3%):
"faster" when the interval lies below 1 - band (b takes less time), "slower" above 1 + band.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from perflab.bench.stats import CONFIDENCE, bootstrap_ci
from perflab.device import synchronize

NOISE_BAND = 0.03
VERDICTS = ("same", "faster", "slower")


@dataclass(frozen=True)
class Comparison:
    """b against a: paired per-round times, the ratio b / a with its interval, the verdict."""

    name_a: str
    name_b: str
    times_a: tuple[float, ...]
    times_b: tuple[float, ...]
    ratio: float  # median over rounds of time_b / time_a
    ci: tuple[float, float]
    noise_band: float
    confidence: float = CONFIDENCE

    @property
    def verdict(self) -> str:
        return verdict(self.ci, self.noise_band)

    @property
    def speedup(self) -> float:
        """time_a / time_b: above 1 when b is faster."""
        return 1 / self.ratio

    def sentence(self) -> str:
        """The conclusion in words, computed from the verdict."""
        return describe_ratio(self.name_a, self.name_b, self.ratio, self.ci, self.noise_band)

    def as_row(self) -> dict:
        """A flat dict for a results table."""
        return {
            "a": self.name_a,
            "b": self.name_b,
            "median_a_s": float(np.median(self.times_a)),
            "median_b_s": float(np.median(self.times_b)),
            "ratio_b_over_a": self.ratio,
            "ci_low": self.ci[0],
            "ci_high": self.ci[1],
            "rounds": len(self.times_a),
            "noise_band": self.noise_band,
            "verdict": self.verdict,
        }


def verdict(ci: tuple[float, float], noise_band: float = NOISE_BAND) -> str:
    """ "faster" / "slower" when the whole interval of time_b / time_a lies below 1 - band /
    above 1 + band; "same" otherwise."""
    low, high = ci
    if high < 1 - noise_band:
        return "faster"
    if low > 1 + noise_band:
        return "slower"
    return "same"


def describe_ratio(name_a: str, name_b: str, ratio: float, ci: tuple[float, float],
                   noise_band: float = NOISE_BAND) -> str:  # fmt: skip
    """'b is 1.80x faster than a (95% CI 1.62–1.97x)'; for the verdict "same", either 'the same
    time within the noise band' (the whole interval inside it) or 'no difference beyond noise
    established' (the interval reaches into the band but does not lie inside it)."""
    low, high = ci
    result = verdict(ci, noise_band)
    if result == "faster":
        return (f"{name_b} is {1 / ratio:.2f}x faster than {name_a} "
                f"(95% CI {1 / high:.2f}–{1 / low:.2f}x)")  # fmt: skip
    if result == "slower":
        return (f"{name_b} is {ratio:.2f}x slower than {name_a} "
                f"(95% CI {low:.2f}–{high:.2f}x)")  # fmt: skip
    if 1 - noise_band <= low and high <= 1 + noise_band:
        return (f"{name_b} and {name_a} take the same time within the ±{noise_band:.0%} noise band "
                f"(time ratio {ratio:.2f}, 95% CI {low:.2f}–{high:.2f})")  # fmt: skip
    return (f"no difference between {name_b} and {name_a} beyond noise is established: time "
            f"ratio {ratio:.2f} (95% CI {low:.2f}–{high:.2f} reaches into the ±{noise_band:.0%} "
            "noise band)")  # fmt: skip


def compare(
    fn_a: Callable[[], object],
    fn_b: Callable[[], object],
    *,
    rounds: int = 20,
    warmup: int = 2,
    device: torch.device | str = "cpu",
    noise_band: float = NOISE_BAND,
    names: tuple[str, str] = ("a", "b"),
    seed: int = 0,
) -> Comparison:
    """Time ``fn_a`` and ``fn_b`` interleaved for ``rounds`` rounds (see the module docstring)
    and return the ``Comparison`` of b against a."""
    if not isinstance(rounds, int) or rounds < 2:
        raise ValueError(f"rounds must be an integer >= 2, got {rounds!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    if not 0 <= noise_band < 1:
        raise ValueError(f"noise_band must be in [0, 1), got {noise_band!r}")
    device = torch.device(device)

    def timed(fn: Callable[[], object]) -> float:
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        return time.perf_counter() - start

    for _ in range(warmup):
        fn_a()
        fn_b()
    order = np.random.default_rng(seed).integers(0, 2, size=rounds)
    times_a, times_b = [], []
    for a_first in order:
        if a_first:
            a1, b1, b2, a2 = timed(fn_a), timed(fn_b), timed(fn_b), timed(fn_a)
        else:
            b1, a1, a2, b2 = timed(fn_b), timed(fn_a), timed(fn_a), timed(fn_b)
        times_a.append(min(a1, a2))
        times_b.append(min(b1, b2))
    return paired_comparison(times_a, times_b, names=names, noise_band=noise_band)


def paired_comparison(times_a, times_b, *, names: tuple[str, str] = ("a", "b"),
                      noise_band: float = NOISE_BAND) -> Comparison:  # fmt: skip
    """The ``Comparison`` of per-round times measured in turns elsewhere (``compare``, or a
    benchmark whose variants take turns, as notebook 07's DDP rounds): element i of both
    sequences must come from the same round."""
    times_a, times_b = np.asarray(times_a, dtype=float), np.asarray(times_b, dtype=float)
    if times_a.shape != times_b.shape or times_a.size < 2:
        raise ValueError(
            f"paired times need the same number (>= 2) of rounds, got {times_a.size} and "
            f"{times_b.size}"
        )
    ratios = times_b / times_a
    return Comparison(
        names[0], names[1], tuple(times_a.tolist()), tuple(times_b.tolist()),
        float(np.median(ratios)), bootstrap_ci(ratios), noise_band,
    )  # fmt: skip


def paired_table(times: dict[str, list[float]], reference: str,
                 label: str = "name") -> pd.DataFrame:  # fmt: skip
    """Each entry of ``times`` (seconds per round, the entries timed in turns within each round)
    against ``reference``: its median, the paired ratio with its 95% interval, and the verdict
    (``paired_comparison``); one row per entry, named in the column ``label``."""
    if reference not in times:
        raise ValueError(f"reference {reference!r} is not among the timed: {', '.join(times)}")
    rows = []
    for name, samples in times.items():
        row = {label: name, "median_ms": float(pd.Series(samples).median()) * 1e3}
        if name != reference:
            result = paired_comparison(times[reference], samples, names=(reference, name))
            row.update(vs_reference=result.ratio, ci_low=result.ci[0], ci_high=result.ci[1],
                       verdict=result.verdict)  # fmt: skip
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


def noise_check(runs: int = 20, *, size: int = 192, rounds: int = 20, burst: bool = False,
                noise_band: float = NOISE_BAND) -> pd.DataFrame:  # fmt: skip
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
