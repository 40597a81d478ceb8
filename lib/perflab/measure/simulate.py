"""Do the comparison's intervals hold the confidence they state? Interleaved rounds simulated.

Each simulated call of a takes ``1 x noise`` and of b ``ratio x noise``; the noise is
multiplicative: log-normal (``sigma``), times a burst of 1.2x to ``burst_max``x with probability
``burst_probability`` on any call, of either side (another process's time slice), and a drift
common to a whole round (a slow phase of the machine, which the paired ratio cancels). As in
``perflab.bench.compare``, a round keeps the faster of each side's two calls, and the rounds go
through the same code (``interleaved_rounds``), fixed or adaptive.

With the same noise on both sides, the median of the rounds' ratios is the true ratio, so a
run's interval covers it or not; over many runs the share that covers it is the actual
coverage, to be held against the stated confidence. A/A runs (ratio 1) give the false-alarm
rate (a verdict of "faster" or "slower"); A/B runs give how often a real difference is found.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from perflab.measure.comparison import NOISE_BAND, interleaved_rounds

# Every sample count a notebook's interval or verdict is computed from (tests/test_coverage.py
# checks the notebooks' parameters against it).
SIMULATED_ROUNDS = (2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 24)
NOISE_MODELS = {
    "quiet": {"sigma": 0.02, "burst_probability": 0.02, "burst_max": 1.5, "drift": 0.05},
    "bursty": {"sigma": 0.05, "burst_probability": 0.15, "burst_max": 3.0, "drift": 0.2},
}


def simulated_round(
    rng: np.random.Generator,
    ratio: float,
    sigma: float,
    burst_probability: float,
    burst_max: float,
    drift: float,
) -> tuple[float, float]:
    """One round's (time of a, time of b): each the faster of two noisy calls."""
    noise = np.exp(sigma * rng.standard_normal(4))
    bursts = np.where(rng.random(4) < burst_probability, rng.uniform(1.2, burst_max, 4), 1.0)
    common = np.exp(drift * rng.standard_normal())
    calls = common * noise * bursts * np.array([1.0, 1.0, ratio, ratio])
    return float(min(calls[0], calls[1])), float(min(calls[2], calls[3]))


def simulate(
    rounds: int,
    *,
    ratio: float = 1.0,
    runs: int = 1000,
    noise: str = "bursty",
    adaptive: bool = False,
    max_rounds: int | None = None,
    noise_band: float = NOISE_BAND,
    seed: int = 0,
) -> pd.DataFrame:
    """``runs`` simulated comparisons of b (``ratio`` x a's time) against a; one row each with
    the ratio, the interval, its stated confidence, whether it covers ``ratio``, the verdict
    and the rounds taken."""
    if noise not in NOISE_MODELS:
        raise ValueError(f"noise must be one of {', '.join(NOISE_MODELS)}, got {noise!r}")
    if not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs must be a positive integer, got {runs!r}")
    model = NOISE_MODELS[noise]
    rng = np.random.default_rng(seed)
    extra = {} if max_rounds is None else {"max_rounds": max_rounds}
    rows = []
    for _ in range(runs):
        result = interleaved_rounds(
            lambda _i: simulated_round(rng, ratio, **model),
            rounds=rounds,
            adaptive=adaptive,
            noise_band=noise_band,
            **extra,
        )
        low, high = result.ci
        rows.append(
            {
                "ratio": result.ratio,
                "ci_low": low,
                "ci_high": high,
                "confidence": result.confidence,
                "covers": low <= ratio <= high,
                "verdict": result.verdict,
                "rounds": result.rounds,
            }
        )
    return pd.DataFrame(rows)


def coverage_table(
    round_counts: Sequence[int],
    *,
    runs: int = 1000,
    noise: str = "bursty",
    adaptive_from: Sequence[int] = (),
    ab_ratio: float = 1.10,
    max_rounds: int | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Per round count (and per adaptive start in ``adaptive_from``, looking up to
    ``max_rounds``, by default ``comparison.MAX_ROUNDS``): the stated confidence,
    the actual coverage of A/A and A/B runs, the A/A false-alarm rate and the share of A/B runs
    (b ``ab_ratio`` x slower) found "slower"."""
    plans = [(n, False) for n in round_counts] + [(n, True) for n in adaptive_from]
    rows = []
    for n, adaptive in plans:
        same = simulate(
            n,
            ratio=1.0,
            runs=runs,
            noise=noise,
            adaptive=adaptive,
            max_rounds=max_rounds,
            seed=seed,
        )
        slower = simulate(
            n,
            ratio=ab_ratio,
            runs=runs,
            noise=noise,
            adaptive=adaptive,
            max_rounds=max_rounds,
            seed=seed + 1,
        )
        both = pd.concat([same, slower])
        rows.append(
            {
                "rounds": (
                    f"adaptive from {n}" + (f" to {max_rounds}" if max_rounds else "")
                    if adaptive
                    else str(n)
                ),
                "noise": noise,
                "stated_confidence": float(both["confidence"].min()),
                "coverage": float(both["covers"].mean()),
                "aa_false_alarms": float(same["verdict"].isin(["faster", "slower"]).mean()),
                "aa_same": float((same["verdict"] == "same").mean()),
                "ab_found_slower": float((slower["verdict"] == "slower").mean()),
                "mean_rounds": float(both["rounds"].mean()),
                "runs": runs,
            }
        )
    return pd.DataFrame(rows)
