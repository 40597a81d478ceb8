"""How sure a timing is: the median's confidence interval with the level it really has, the IQR,
and an instability flag.

**The interval of a median** is distribution-free (the order-statistic interval; Hahn & Meeker
1991, sec. 5.2; Conover 1999, sec. 3.2): for n independent samples sorted x(1) <= ... <= x(n),
the interval [x(k), x(n+1-k)] misses the population median only when at least n+1-k samples lie
on one side of it, so its confidence is exactly 1 - 2 P(B <= k-1) with B ~ Binomial(n, 1/2),
whatever the distribution of the noise (bursts included). The largest k whose confidence
reaches the one asked for is taken. Few samples cannot reach 95%: [min, max] of 3 samples is a
75% interval, of 5 a 93.8% one, of 6 a 96.9% one; the interval then carries the level it does
give (``Interval.level``), and a verdict asks for at least 95% (``perflab.measure.comparison``).
(The percentile bootstrap this module used before returns [min, max] of 3 samples and called it
95%; simulated, it covered the median 75% of the time: ``perflab.measure.simulate``.)

**Unstable** (the rule): IQR above 25% of the median, ``torch.utils.benchmark``'s threshold for
its "gross" instability warning (it warns from 10%), or fewer than 3 samples. A conclusion is
never drawn from an unstable row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Context, Decimal
from math import comb, isfinite

import numpy as np

#: The false-claim rate every test and finding is held to; an interval's confidence is 1 - ALPHA.
ALPHA = 0.05
CONFIDENCE = 0.95
UNSTABLE_IQR_FRACTION = 0.25
MIN_STABLE_SAMPLES = 3


@dataclass(frozen=True)
class Interval:
    """[low, high] and the confidence ``level`` with which it holds the median."""

    low: float
    high: float
    level: float

    def __iter__(self):  # low, high = interval
        return iter((self.low, self.high))

    def text(self, scale: float = 1.0, unit: str = "", digits: int = 3) -> str:
        """'12.1–13.4 ms (97% CI)': the interval with its real level."""
        shown = interval_text(self.low, self.high, scale, unit, digits)
        return f"{shown} ({level_text(self.level)} CI)"


def order_statistic_level(n: int, k: int) -> float:
    """Confidence that [x(k), x(n+1-k)] of n samples holds the median: 1 - 2 P(B <= k-1),
    B ~ Binomial(n, 1/2)."""
    if not 1 <= k <= (n + 1) // 2:
        raise ValueError(f"k must be in [1, {(n + 1) // 2}] for n = {n}, got {k}")
    tail = sum(comb(n, i) for i in range(k)) / 2**n
    return max(0.0, 1 - 2 * tail)


def max_level(n: int) -> float:
    """The most confidence n samples can give a median's interval: that of [min, max]."""
    return order_statistic_level(n, 1) if n >= 1 else 0.0


def rounds_for(confidence: float = CONFIDENCE) -> int:
    """The fewest samples whose [min, max] reaches ``confidence`` (6 for 95%)."""
    n = 1
    while max_level(n) < confidence:
        n += 1
    return n


#: Rounds (interleaved, paired) a comparison or a timing takes unless told otherwise, the
#: library's one default: the fewest whose median's interval can reach ``CONFIDENCE``.
ROUNDS = rounds_for(CONFIDENCE)


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The narrowest order-statistic interval of the median of ``values`` whose level is at
    least ``confidence``, or [min, max] with its lower level when the samples are too few."""
    values = np.sort(np.asarray(values, dtype=float))
    if values.size == 0:
        raise ValueError("median_interval needs at least one value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    n, k = values.size, 1
    while k + 1 <= (n + 1) // 2 and order_statistic_level(n, k + 1) >= confidence:
        k += 1
    return Interval(float(values[k - 1]), float(values[n - k]), order_statistic_level(n, k))


def level_text(level: float) -> str:
    """A confidence level in words, rounded down so that it never claims more than it has:
    0.95 as '95%', 0.96875 as '96.8%', 0.75 as '75%'; a missing one (a row saved before levels
    were recorded) as 'level not recorded'."""
    if level is None or not np.isfinite(level):
        return "level not recorded"
    percent = 100 * level
    if abs(percent - round(percent)) < 1e-9:
        return f"{round(percent)}%"
    return f"{np.floor(percent * 10) / 10:.1f}%"


def iqr(values: Sequence[float]) -> float:
    """75th minus 25th percentile."""
    q1, q3 = np.percentile(np.asarray(values, dtype=float), [25, 75])
    return float(q3 - q1)


def is_unstable(values: Sequence[float]) -> bool:
    """The module's rule: IQR > 25% of the median, or fewer than 3 samples."""
    values = np.asarray(values, dtype=float)
    if values.size < MIN_STABLE_SAMPLES:
        return True
    return iqr(values) > UNSTABLE_IQR_FRACTION * float(np.median(values))


def interval_text(
    low: float, high: float, scale: float = 1e3, unit: str = "ms", digits: int = 3
) -> str:
    """'12.1–13.4 ms' (or without a unit when ``unit`` is empty): an interval in words."""
    return f"{low * scale:.{digits}g}–{high * scale:.{digits}g}" + (f" {unit}" if unit else "")


#: The most decimal places ``outward`` and ``apart`` add to keep a printed number off an edge.
MOST_PLACES = 6


def rounded(value: float, places: int, way: str = "nearest") -> str:
    """``value`` to ``places`` decimals, rounded "down", "up" or to the "nearest", from its
    shortest form cut to 12 significant digits (0.57, even a float32's, is 0.57, not the binary
    0.5699..., so "down" keeps it; 1.02 - 1 is 0.02, not 0.020000000000000018); no "-0.00"."""
    ways = {"down": ROUND_FLOOR, "up": ROUND_CEILING, "nearest": ROUND_HALF_EVEN}
    if way not in ways:
        raise ValueError(f"way must be one of {', '.join(ways)}, got {way!r}")
    number = _twelve_digits(value)
    if not isfinite(number):
        return f"{number:.{places}f}"
    step, digits = Decimal(1).scaleb(-places), Context(prec=400)  # 1e308 has 309 digits
    text = Decimal(repr(number)).quantize(step, rounding=ways[way], context=digits)
    return str(abs(text) if text.is_zero() else text)


def _twelve_digits(value: float) -> float:
    """``value`` from its shortest form (a float32's too) to 12 significant digits: what
    ``rounded`` and ``outward_places`` hold a number to; closer than that to an edge, a
    measured ratio is on it."""
    try:
        number = float(str(value))  # a float32's shortest form, not its widened binary value
    except ValueError:  # an int's or a bool's str, say: its value as it is
        number = float(value)
    return float(f"{number:.12g}")


def outward_places(low: float, high: float, decimals: int = 2, edges=()) -> int | None:
    """The fewest places, from ``decimals`` up to ``MOST_PLACES``, at which ``low`` rounded down
    and ``high`` rounded up land on none of ``edges`` that they do not reach; None when no such
    places exist (an end closer to an edge than ``MOST_PLACES`` can show). The rounded ends are
    held to 12 significant digits (``rounded``), the ends themselves compared as they are."""
    for places in range(decimals, max(decimals, MOST_PLACES) + 1):
        lo, hi = (float(rounded(low, places, "down")), float(rounded(high, places, "up")))
        if not any(low > edge >= lo or high < edge <= hi for edge in edges):
            return places
    return None


def with_estimate(
    point: float, low: float, high: float, decimals: int = 2, edges=()
) -> tuple[str, str]:
    """A point estimate and its interval, '1.21' and '1.02–1.44': the interval rounded outward
    (``outward_places``: it holds the measured one and lands on no edge it does not reach), the
    point to the nearest at the same places, so that it prints inside the printed interval. Where
    no places suffice, every digit of each (``repr``)."""
    places = outward_places(low, high, decimals, edges)
    if places is None:
        return repr(float(point)), f"{float(low)!r}–{float(high)!r}"
    interval = f"{rounded(low, places, 'down')}–{rounded(high, places, 'up')}"
    return rounded(point, places), interval


def outward(low: float, high: float, decimals: int = 2, edges=()) -> str:
    """'1.02–1.44': an interval's ends rounded away from its middle (the low end down, the high
    end up), so that the printed interval holds the measured one: 1.0299–1.4301 as 1.02–1.44,
    not 1.03–1.43, which would look outside a ±3% noise band that it reaches into. With
    ``edges`` (a band's 0.97 and 1.03), more places where an end would print on an edge it
    does not reach: 1.0304–1.43 as 1.0304–1.4300, not 1.03–1.43 (``with_estimate``)."""
    return with_estimate(low, low, high, decimals, edges)[1]


def apart(value: float, other: float, decimals: int = 2) -> tuple[str, str]:
    """``value`` and ``other`` printed each rounded toward the other, at the fewest places (up
    to ``MOST_PLACES``) at which they still differ, so that 'at least X, more than Y' reads as
    the numbers are: 3.1993 and 3.196 as 3.199 and 3.196 (at two places, 3.19 and 3.20)."""
    above = value > other
    for places in range(decimals, MOST_PLACES + 1):
        texts = (
            rounded(value, places, "down" if above else "up"),
            rounded(other, places, "up" if above else "down"),
        )
        shown = float(texts[0]) - float(texts[1])
        if value == other or (shown > 0 if above else shown < 0):
            return texts
    return repr(float(value)), repr(float(other))  # closer than MOST_PLACES: every digit


def least_squares(
    columns: Sequence[Sequence[float]], y: Sequence[float]
) -> tuple[np.ndarray, float]:
    """Least-squares coefficients of y ~ sum_k c_k columns[k] (include a column of ones for an
    intercept) and the coefficient of determination R^2 = 1 - SS_res / SS_tot (NaN when y
    does not vary)."""
    design = np.column_stack([np.asarray(c, dtype=float) for c in columns])
    target = np.asarray(y, dtype=float)
    coefficients, *_ = np.linalg.lstsq(design, target, rcond=None)
    spread = float(((target - target.mean()) ** 2).sum())
    residual = float(((target - design @ coefficients) ** 2).sum())
    return coefficients, (1 - residual / spread) if spread > 0 else float("nan")
