"""How sure a timing is: the median's 95% confidence interval, the IQR, and an instability flag.

A shared machine is noisy, so every timing row carries, besides its median, the interquartile
range (IQR, 75th minus 25th percentile of the samples) and a 95% confidence interval of the
median by the percentile bootstrap (Efron & Tibshirani 1993, ch. 13: resample the samples with
replacement, take each resample's median, read the 2.5th and 97.5th percentiles; seeded, so a
row's interval is reproducible). With few samples the interval is wide, as it should be.

**Unstable** (the rule): IQR above 25% of the median, ``torch.utils.benchmark``'s threshold for
its "gross" instability warning (it warns from 10%), or fewer than 3 samples. A conclusion is
never drawn from an unstable row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
UNSTABLE_IQR_FRACTION = 0.25
MIN_STABLE_SAMPLES = 3


def bootstrap_ci(
    values: Sequence[float],
    statistic=np.median,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of ``statistic`` (default: the median) of ``values``."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if values.size == 1:
        return float(values[0]), float(values[0])
    rng = np.random.default_rng(seed)
    resampled = values[rng.integers(0, values.size, size=(resamples, values.size))]
    estimates = statistic(resampled, axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(estimates, [tail, 100 - tail])
    return float(low), float(high)


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


def interval_text(low: float, high: float, scale: float = 1e3, unit: str = "ms") -> str:
    """'12.1–13.4 ms' (or without a unit when ``unit`` is empty): an interval in words."""
    return f"{low * scale:.3g}–{high * scale:.3g}" + (f" {unit}" if unit else "")


def least_squares(columns: Sequence[Sequence[float]], y: Sequence[float]
                  ) -> tuple[np.ndarray, float]:  # fmt: skip
    """Least-squares coefficients of y ~ sum_k c_k columns[k] (include a column of ones for an
    intercept) and the coefficient of determination R^2 = 1 - SS_res / SS_tot (NaN when y
    does not vary)."""
    design = np.column_stack([np.asarray(c, dtype=float) for c in columns])
    target = np.asarray(y, dtype=float)
    coefficients, *_ = np.linalg.lstsq(design, target, rcond=None)
    spread = float(((target - target.mean()) ** 2).sum())
    residual = float(((target - design @ coefficients) ** 2).sum())
    return coefficients, (1 - residual / spread) if spread > 0 else float("nan")
