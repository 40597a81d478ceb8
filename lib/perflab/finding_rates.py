"""Do the findings claim only what is there? Each finding function that can state a difference
or a cause is fed simulated data with no effect at all (an A/A study, many draws): the share of
draws in which it still claims one is its false-claim rate, to be held to ``ALPHA``. Fed data
with a planted effect, the share in which it finds it is its power. ``finding_rates`` gives
both for every case of ``CASES``; ``docs/statistics.md`` lists them (``write_rates_doc``) beside
the intervals' coverage, and ``tests/test_findings_aa.py`` holds them. A tool (the top
layer): it runs the findings of every notebook.

The noise is the comparison simulation's bursty model (``perflab.bench.simulate``):
log-normal with occasional bursts of another process's time slice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perflab.bench.simulate import NOISE_MODELS

#: The false-claim rate every finding is held to.
ALPHA = 0.05


def noisy_seconds(rng: np.random.Generator, size: int, median_s: float = 0.01) -> np.ndarray:
    """``size`` step times around ``median_s`` with the bursty noise of ``NOISE_MODELS``."""
    model = NOISE_MODELS["bursty"]
    noise = np.exp(rng.normal(0.0, model["sigma"], size))
    bursts = rng.random(size) < model["burst_probability"]
    noise[bursts] *= rng.uniform(1.2, model["burst_max"], bursts.sum())
    return median_s * noise


@dataclass(frozen=True)
class FindingCase:
    """One finding function under test: how to draw its input with no effect and with a
    planted one, and whether its output claims an effect."""

    finding: str  # the function, module.name
    setting: str  # the sizes simulated (the notebooks' parameters)
    claim: str  # what counts as claiming an effect
    planted_effect: str
    no_effect: Callable[[np.random.Generator], object]
    with_effect: Callable[[np.random.Generator], object]
    claims: Callable[[object], bool]


def _warmup_study(rng: np.random.Generator, steps: int, first_step_factor: float):
    study = pd.DataFrame({"warmup": [0, 1, 2]})
    samples = [noisy_seconds(rng, steps) for _ in range(3)]
    samples[0][0] *= first_step_factor
    return study.assign(samples_s=[list(s) for s in samples])


def _warmup_claims(study: pd.DataFrame) -> bool:
    from perflab.bench.warmup import warmup_effect, warmup_finding

    return warmup_finding(warmup_effect(study)).verdict == "slower"


def _warmup_case(steps: int) -> FindingCase:
    return FindingCase(
        "perflab.bench.warmup.warmup_finding",
        f"3 warm-up settings x {steps} timed steps",
        'verdict "slower": the first timed step paid a one-off cost',
        "the first timed step without warm-up 3x",
        lambda rng: _warmup_study(rng, steps, 1.0),
        lambda rng: _warmup_study(rng, steps, 3.0),
        _warmup_claims,
    )


def _phase_breakdown(rng: np.random.Generator, steps: int, ratio: float) -> pd.DataFrame:
    """One preset's ``phase_breakdown`` row from ``steps`` simulated steps whose backward
    takes ``ratio`` times the forward, each phase with its own noise."""
    from perflab.bench.stats import median_interval

    forward = noisy_seconds(rng, steps)
    ratios = ratio * noisy_seconds(rng, steps) / forward
    interval = median_interval(ratios)
    return pd.DataFrame(
        [
            {
                "preset": "simulated",
                "backward_over_forward": float(np.median(ratios)),
                "backward_over_forward_ci_low": interval.low,
                "backward_over_forward_ci_high": interval.high,
                "backward_over_forward_ci_level": interval.level,
                "forward_share": 0.3,
                "backward_share": 0.6,
                "optimizer_share": 0.1,
                "unstable": False,
            }
        ]
    )


def _phase_claims(breakdown: pd.DataFrame) -> bool:
    from perflab.bench.tables import phase_findings

    (finding,) = phase_findings(breakdown)
    return finding.verdict in ("above", "below")


def _phase_case(steps: int) -> FindingCase:
    return FindingCase(
        "perflab.bench.tables.phase_findings",
        f"one preset, {steps} timed steps, backward exactly 2x the forward",
        "backward/forward above or below the FLOP model's 2x",
        "backward 1.0x the forward (half the model)",
        lambda rng: _phase_breakdown(rng, steps, 2.0),
        lambda rng: _phase_breakdown(rng, steps, 1.0),
        _phase_claims,
    )


def _ring_sweep(
    rng: np.random.Generator, sizes_mb, world_sizes, steps: int, egress_ratio: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The alternate ring's sweep as ``ring_sweep`` saves it, each time the median of
    ``steps`` noisy calls of latency + (N-1) S / W, with W at 0.6 GB/s on 2 ranks and
    ``egress_ratio`` times that beyond (1: the model holds), and its ``fit_ring_model``."""
    from perflab.distributed.ring import fit_ring_model

    rows = []
    for n in world_sizes:
        egress = 0.6e9 * (1 if n == world_sizes[0] else egress_ratio)
        for mb in sizes_mb:
            seconds = 2e-4 + (n - 1) * mb * 1e6 / egress
            median = float(np.median(noisy_seconds(rng, steps, seconds)))
            rows.append(
                {
                    "world_size": n,
                    "size_mb": mb,
                    "bytes": mb * 1e6,
                    "status": "ok",
                    "ring_ms": median * 1e3,
                    "ring_over_all_reduce": n / 2,
                }
            )
    ring = pd.DataFrame(rows)
    return ring, fit_ring_model(ring)


def _ring_claims(sweep: tuple[pd.DataFrame, pd.DataFrame]) -> bool:
    from perflab.distributed.findings import ring_lines

    return any("does not describe" in line for line in ring_lines(*sweep))


def _ring_case(sizes_mb, world_sizes, steps: int) -> FindingCase:
    return FindingCase(
        "perflab.distributed.findings.ring_lines",
        f"sizes {sizes_mb} MB x {world_sizes} ranks, medians of {steps} calls, one W",
        '"one W does not describe the ring\'s times"',
        f"W on {world_sizes[-1]} ranks half that on {world_sizes[0]}",
        lambda rng: _ring_sweep(rng, sizes_mb, world_sizes, steps, 1.0),
        lambda rng: _ring_sweep(rng, sizes_mb, world_sizes, steps, 0.5),
        _ring_claims,
    )


#: Every finding function that can state a difference, a trend or a cause, at the sizes the
#: notebooks use (``tests/test_findings_aa.py`` checks the notebooks' parameters against them).
WARMUP_STEPS = (24,)
PHASE_STEPS = (6, 10)
#: (sizes in MB, world sizes, timed calls per size) of notebook 07's ring experiment
RING_SIZES = (([1, 2, 8], [2, 4], 5),)
CASES: tuple[FindingCase, ...] = (
    *(_warmup_case(steps) for steps in WARMUP_STEPS),
    *(_phase_case(steps) for steps in PHASE_STEPS),
    *(_ring_case(*sizes) for sizes in RING_SIZES),
)


def binomial_upper_tail(count: int, draws: int, rate: float) -> float:
    """P(X >= count) for X ~ Binomial(draws, rate): how surprising ``count`` claims in
    ``draws`` would be if the true false-claim rate were ``rate``."""

    def log_term(k: int) -> float:
        log_comb = math.lgamma(draws + 1) - math.lgamma(k + 1) - math.lgamma(draws - k + 1)
        return log_comb + k * math.log(rate) + (draws - k) * math.log1p(-rate)

    return min(1.0, sum(math.exp(log_term(k)) for k in range(count, draws + 1)))


def finding_rates(
    cases: tuple[FindingCase, ...] = CASES, draws: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """Per case: the share of ``draws`` no-effect draws in which the finding claims an effect
    (``false_claims``), whether that count is consistent with a rate of at most ``ALPHA``
    (its binomial upper tail at ``ALPHA`` above 0.001), and the share of planted-effect draws
    in which it finds it (``finds_planted``)."""
    rows = []
    for index, case in enumerate(cases):
        rng = np.random.default_rng([seed, index])
        false = sum(case.claims(case.no_effect(rng)) for _ in range(draws))
        found = sum(case.claims(case.with_effect(rng)) for _ in range(draws))
        rows.append(
            {
                "finding": case.finding,
                "setting": case.setting,
                "claim": case.claim,
                "planted effect": case.planted_effect,
                "draws": draws,
                "false_claims": false / draws,
                "within_alpha": binomial_upper_tail(false, draws, ALPHA) > 1e-3,
                "finds_planted": found / draws,
            }
        )
    return pd.DataFrame(rows)


DOC = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"
BEGIN, END = "<!-- finding rates: begin -->", "<!-- finding rates: end -->"


def rates_markdown(rates: pd.DataFrame) -> str:
    """The rates as the markdown table ``docs/statistics.md`` holds between its markers."""
    lines = [
        "| finding | simulated | counts as a claim | false claims, no effect (consistent "
        f"with at most {ALPHA:.0%}) | planted effect | found |",
        "|---|---|---|---|---|---|",
    ]
    for row in rates.to_dict("records"):
        within = "yes" if row["within_alpha"] else "**no**"
        lines.append(
            f"| `{row['finding']}` | {row['setting']} | {row['claim']} | "
            f"{row['false_claims']:.1%} of {row['draws']} ({within}) | {row['planted effect']} "
            f"| {row['finds_planted']:.1%} |"
        )
    return "\n".join(lines)


def write_rates_doc(path: Path = DOC, rates: pd.DataFrame | None = None) -> Path:
    """Replace the table between ``BEGIN`` and ``END`` in ``docs/statistics.md`` with
    ``rates`` (default: ``finding_rates()``, about 20 seconds a case)."""
    text = path.read_text()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    table = rates_markdown(finding_rates() if rates is None else rates)
    path.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    return path
