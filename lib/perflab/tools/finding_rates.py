"""Do the findings claim only what is there? Each finding function that can state a difference
or a cause is fed simulated data with no effect at all (an A/A study, many draws): the share of
draws in which it still claims one is its false-claim rate, to be held to ``ALPHA``. Fed data
with a planted effect, the share in which it finds it is its power. ``finding_rates`` gives
both for every case of ``CASES``; ``docs/statistics.md`` lists them (``write_rates_doc``) beside
the intervals' coverage, and ``tests/test_findings_aa.py`` holds them. A tool (the top
layer): it runs the findings of every notebook.

The noise is the comparison simulation's bursty model (``perflab.measure.simulate``):
log-normal with occasional bursts of another process's time slice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from perflab.measure.simulate import NOISE_MODELS
from perflab.measure.stats import ALPHA


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
    from perflab.lessons.nb01_benchmarking.warmup import warmup_effect, warmup_finding

    return warmup_finding(warmup_effect(study)).verdict == "slower"


def _warmup_case(steps: int) -> FindingCase:
    return FindingCase(
        "perflab.lessons.nb01_benchmarking.warmup.warmup_finding",
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
    from perflab.measure.stats import median_interval

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
    from perflab.measure.tables import phase_findings

    (finding,) = phase_findings(breakdown)
    return finding.verdict in ("above", "below")


def _phase_case(steps: int) -> FindingCase:
    return FindingCase(
        "perflab.measure.tables.phase_findings",
        f"one preset, {steps} timed steps, backward exactly 2x the forward",
        "backward/forward above or below the FLOP model's 2x",
        "backward 1.0x the forward (half the model)",
        lambda rng: _phase_breakdown(rng, steps, 2.0),
        lambda rng: _phase_breakdown(rng, steps, 1.0),
        _phase_claims,
    )


def _median_calls(rng: np.random.Generator, calls: int, seconds: float) -> float:
    return float(np.median(noisy_seconds(rng, calls, seconds)))


def _ring_sweep(
    rng: np.random.Generator,
    sizes_mb,
    world_sizes,
    steps: int,
    egress_ratio: float,
    all_reduce_over_model: float = 1.0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The alternate ring's sweep as ``ring_sweep`` saves it: each time the median of 2 x
    ``steps`` noisy calls, the ring's of latency + (N-1) S / W, with W at 0.6 GB/s on 2 ranks
    and ``egress_ratio`` times that beyond (1: the ring's model holds), ``all_reduce``'s of
    ``all_reduce_over_model`` times the textbook ring's latency + 2 (N-1)/N S / W (1: Gloo's
    all_reduce is that ring); and its ``fit_ring_model``."""
    from perflab.lessons.nb07_distributed_ddp.ring import fit_ring_model

    rows = []
    for n in world_sizes:
        egress = 0.6e9 * (1 if n == world_sizes[0] else egress_ratio)
        for mb in sizes_mb:
            ring = _median_calls(rng, 2 * steps, 2e-4 + (n - 1) * mb * 1e6 / egress)
            textbook = 2e-4 + 2 * (n - 1) / n * mb * 1e6 / egress
            all_reduce = _median_calls(rng, 2 * steps, all_reduce_over_model * textbook)
            rows.append(
                {
                    "world_size": n,
                    "size_mb": mb,
                    "bytes": mb * 1e6,
                    "status": "ok",
                    "ring_ms": ring * 1e3,
                    "all_reduce_ms": all_reduce * 1e3,
                    "ring_over_all_reduce": ring / all_reduce,
                }
            )
    ring = pd.DataFrame(rows)
    return ring, fit_ring_model(ring)


def _ring_claims(sweep: tuple[pd.DataFrame, pd.DataFrame]) -> bool:
    from perflab.findings.distributed import ring_lines

    return any("does not describe" in line for line in ring_lines(*sweep))


def _textbook_claims(sweep: tuple[pd.DataFrame, pd.DataFrame]) -> bool:
    from perflab.findings.distributed import ring_lines

    return any("not that ring's time" in line for line in ring_lines(*sweep))


def _ring_cases(sizes_mb, world_sizes, steps: int) -> tuple[FindingCase, ...]:
    setting = f"sizes {sizes_mb} MB x {world_sizes} ranks, medians of {2 * steps} calls"
    return (
        FindingCase(
            "perflab.findings.distributed.ring_lines",
            f"{setting}, one W",
            '"one W does not describe the ring\'s times"',
            f"W on {world_sizes[-1]} ranks half that on {world_sizes[0]}",
            lambda rng: _ring_sweep(rng, sizes_mb, world_sizes, steps, 1.0),
            lambda rng: _ring_sweep(rng, sizes_mb, world_sizes, steps, 0.5),
            _ring_claims,
        ),
        FindingCase(
            "perflab.findings.distributed.ring_lines",
            f"{setting}, all_reduce the textbook ring at the ring's W",
            "\"not that ring's time\": Gloo's all_reduce is not the textbook ring",
            "all_reduce 2x the textbook ring's time",
            lambda rng: _ring_sweep(rng, sizes_mb, world_sizes, steps, 1.0),
            lambda rng: _ring_sweep(rng, sizes_mb, world_sizes, steps, 1.0, 2.0),
            _textbook_claims,
        ),
    )


def _ddp_steps(
    rng: np.random.Generator, rounds: int, fastest_factor: float, bucketed_factor: float
) -> pd.DataFrame:
    """Notebook 07's DDP step sweep as ``ddp_sweep`` saves it (its variants and bucket sizes,
    one step of each per round, each round with its own drift): every step the same time but
    the 1 MB bucketed one, ``fastest_factor`` x, and every bucketed one ``bucketed_factor`` x."""
    model = NOISE_MODELS["bursty"]
    variants = [
        ("none", 0, None), ("naive", 0, None), ("flat", 0, None), ("individual", 0, None),
        ("bucketed", 1, 12), ("bucketed", 10, 2), ("bucketed", 100, 1), ("bucketed", 1000, 1),
        ("torch", 25, None),
    ]  # fmt: skip
    drift = np.exp(model["drift"] * rng.standard_normal(rounds))
    rows = []
    for variant, size, buckets in variants:
        factor = 1.0
        if variant == "bucketed":
            factor = bucketed_factor * (fastest_factor if size == 1 else 1.0)
        round_ms = list(drift * noisy_seconds(rng, rounds, 0.1 * factor) * 1e3)
        rows.append(
            {
                "variant": variant,
                "bucket_size_mb": size,
                "buckets": buckets,
                "status": "ok",
                "step_ms": float(np.median(round_ms)),
                "round_ms": json.dumps(round_ms),
            }
        )
    return pd.DataFrame(rows)


def _ddp_claims(key: str) -> Callable[[pd.DataFrame], bool]:
    def claims(steps: pd.DataFrame) -> bool:
        from perflab.distributed.ddp_benchmark import ddp_findings

        found = {f.key: f.verdict for f in ddp_findings(steps)}
        return found[key] in ("faster", "slower")

    return claims


def _ddp_cases(rounds: int) -> tuple[FindingCase, ...]:
    setting = f"notebook 07's 9 variants and bucket sizes, {rounds} rounds, all the same time"
    return (
        FindingCase(
            "perflab.distributed.ddp_benchmark.ddp_findings",
            f"{setting}; the fastest bucket size by median picked from the same rounds",
            '"fastest bucket size" against the next: faster or slower',
            "the 1 MB buckets 0.5x the others",
            lambda rng: _ddp_steps(rng, rounds, 1.0, 1.0),
            lambda rng: _ddp_steps(rng, rounds, 0.5, 1.0),
            _ddp_claims("fastest bucket size"),
        ),
        FindingCase(
            "perflab.distributed.ddp_benchmark.ddp_findings",
            f"{setting}; the fastest bucket size by median against naive",
            '"bucketed vs naive": faster or slower',
            "every bucketed step 0.8x naive's",
            lambda rng: _ddp_steps(rng, rounds, 1.0, 1.0),
            lambda rng: _ddp_steps(rng, rounds, 1.0, 0.8),
            _ddp_claims("bucketed vs naive"),
        ),
    )


def _bucket_overhead(
    rng: np.random.Generator, bucket_counts, rounds: int, per_call_s: float
) -> tuple[dict, pd.DataFrame]:
    """``fit_bucket_overhead`` of bucketed rows whose wait after backward is the median of
    ``rounds`` noisy steps of n_b o + s/(n_b w) (s/w 50 ms); o = 0 and the wait the same at
    every bucket count is "no effect"."""
    from perflab.distributed.ddp_benchmark import fit_bucket_overhead

    # per_call_s = 0 is no model at all: the same wait whatever the bucket count.
    waits = [n * per_call_s + 0.05 / n if per_call_s else 0.05 for n in bucket_counts]
    rows = [
        {
            "variant": "bucketed",
            "status": "ok",
            "buckets": n,
            "gradient_mb": 514.5,
            "sync_ms": 1e3 * _median_calls(rng, rounds, wait),
        }
        for n, wait in zip(bucket_counts, waits, strict=True)
    ]
    no_sweep = pd.DataFrame(columns=["status", "world_size", "size_mb", "algbw_gbps"])
    return fit_bucket_overhead(pd.DataFrame(rows)), no_sweep


def _overhead_claims(fit: tuple[dict, pd.DataFrame]) -> bool:
    from perflab.findings.distributed import overhead_lines

    return "a fit to trust" in overhead_lines(fit[0], fit[1], 2)


def _overhead_case(bucket_counts, rounds: int) -> FindingCase:
    return FindingCase(
        "perflab.findings.distributed.overhead_lines",
        f"bucket counts {list(bucket_counts)}, medians of {rounds} steps, the same wait at every "
        "count",
        '"a fit to trust": the overhead model n_b o + s/(n_b w) describes the waits',
        "waits of n_b x 1 ms + 50 ms / n_b",
        lambda rng: _bucket_overhead(rng, bucket_counts, rounds, 0.0),
        lambda rng: _bucket_overhead(rng, bucket_counts, rounds, 1e-3),
        _overhead_claims,
    )


def _simulated_comparison(rng: np.random.Generator, rounds: int, ratio: float) -> dict:
    """One ``compare`` of b (``ratio`` x a's time) against a in ``rounds`` interleaved rounds
    of the bursty noise: its row."""
    from perflab.measure.comparison import interleaved_rounds
    from perflab.measure.simulate import simulated_round

    model = NOISE_MODELS["bursty"]
    take = lambda _i: simulated_round(rng, ratio, **model)  # noqa: E731
    return interleaved_rounds(take, rounds=rounds).as_row()


#: bytes stored by the original weights over int8's, as in the int8 case
INT8_BYTE_RATIO = 3.0


def _int8_row(rng: np.random.Generator, rounds: int, speedup: float) -> dict:
    result = _simulated_comparison(rng, rounds, 1 / speedup)
    return {
        **result,
        "weight_bytes_original": INT8_BYTE_RATIO * 1e6,
        "weight_bytes_int8": 1e6,
        "tokens_per_s_original": 1000.0,
        "tokens_per_s_int8": 1000.0 / result["ratio_b_over_a"],
        "logits_relative_error": 0.01,
        "first_differing_token": 8,
        "tokens_agreeing": 1.0,
    }


def _int8_claims(row: dict) -> bool:
    from perflab.lessons.nb10_decoding.findings import int8_sentences

    throughput = pd.DataFrame(
        [{"batch": 1, "step": "compiled", "fraction_of_roofline": 0.1,
          "roofline_tokens_per_s": 1e4}]
    )  # fmt: skip
    return len(int8_sentences(row, throughput, 1, 8, "float32")) > 1


def _int8_case(rounds: int) -> FindingCase:
    return FindingCase(
        "perflab.lessons.nb10_decoding.findings.int8_sentences",
        f"{rounds} interleaved rounds, int8 exactly {INT8_BYTE_RATIO:g}x faster, "
        f"{INT8_BYTE_RATIO:g}x fewer bytes",
        "the speed-up is more than the bytes saved",
        f"int8 {1.5 * INT8_BYTE_RATIO:g}x faster",
        lambda rng: _int8_row(rng, rounds, INT8_BYTE_RATIO),
        lambda rng: _int8_row(rng, rounds, 1.5 * INT8_BYTE_RATIO),
        _int8_claims,
    )


#: a grouped-query step's bytes over multi-head's, as in the GQA case
GQA_BYTE_RATIO = 0.6


def _gqa_row(rng: np.random.Generator, rounds: int, time_ratio: float) -> dict:
    return {
        **_simulated_comparison(rng, rounds, time_ratio),
        "kv_cache_bytes_grouped": 1e6,
        "kv_cache_bytes_mha": 4e6,
        "step_bytes_ratio": GQA_BYTE_RATIO,
    }


def _gqa_claims(row: dict) -> bool:
    from perflab.lessons.nb10_decoding.findings import gqa_sentences

    throughput = pd.DataFrame([{"batch": 1, "step": "eager", "fraction_of_roofline": 0.1}])
    return len(gqa_sentences(row, "measured", throughput, 8, 2, 1, 128, 128)) > 1


def _gqa_case(rounds: int) -> FindingCase:
    return FindingCase(
        "perflab.lessons.nb10_decoding.findings.gqa_sentences",
        f"{rounds} interleaved rounds, the time ratio exactly the bytes' {GQA_BYTE_RATIO:g}",
        "less gained than the bytes give",
        "no time gained at all (ratio 1)",
        lambda rng: _gqa_row(rng, rounds, GQA_BYTE_RATIO),
        lambda rng: _gqa_row(rng, rounds, 1.0),
        _gqa_claims,
    )


#: Every finding function that can state a difference, a trend or a cause, at the sizes the
#: notebooks use (``tests/test_findings_aa.py`` checks the notebooks' parameters against them).
WARMUP_STEPS = (24,)
PHASE_STEPS = (6, 10)
#: (sizes in MB, world sizes, timed calls per size) of notebook 07's ring experiment
RING_SIZES = (([1, 2, 8], [2, 4], 5),)
#: notebook 07's DDP rounds (CPU default and full preset)
DDP_ROUNDS = (6, 10)
#: bucket counts of the full preset's 514.5 MB of gradients (lm:768:12) in 1, 10, 100, 1000 MB
#: buckets (the CPU default's give 3 distinct counts, too few for the claim), medians of its 10
#: rounds
OVERHEAD_BUCKETS = ((87, 50, 6, 1), 10)
#: notebook 10's rounds of the int8 and grouped-query comparisons (CPU default, full, lease)
INT8_ROUNDS = (6, 10)
GQA_ROUNDS = (6, 10, 16)
CASES: tuple[FindingCase, ...] = (
    *(_warmup_case(steps) for steps in WARMUP_STEPS),
    *(_phase_case(steps) for steps in PHASE_STEPS),
    *(case for sizes in RING_SIZES for case in _ring_cases(*sizes)),
    *(case for rounds in DDP_ROUNDS for case in _ddp_cases(rounds)),
    _overhead_case(*OVERHEAD_BUCKETS),
    *(_int8_case(rounds) for rounds in INT8_ROUNDS),
    *(_gqa_case(rounds) for rounds in GQA_ROUNDS),
)


def binomial_upper_tail(count: int, draws: int, rate: float) -> float:
    """P(X >= count) for X ~ Binomial(draws, rate): how surprising ``count`` claims in
    ``draws`` would be if the true false-claim rate were ``rate``."""

    def log_term(k: int) -> float:
        log_comb = math.lgamma(draws + 1) - math.lgamma(k + 1) - math.lgamma(draws - k + 1)
        return log_comb + k * math.log(rate) + (draws - k) * math.log1p(-rate)

    return min(1.0, sum(math.exp(log_term(k)) for k in range(count, draws + 1)))


def finding_rates(
    cases: tuple[FindingCase, ...] = CASES, draws: int = 1000, seed: int = 0
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


DOC = Path(__file__).resolve().parents[3] / "docs" / "statistics.md"
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
    ``rates`` (default: ``finding_rates()``, about 10 seconds a case)."""
    text = path.read_text()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    table = rates_markdown(finding_rates() if rates is None else rates)
    path.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
    return path
