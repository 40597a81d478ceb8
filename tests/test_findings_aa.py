"""Every finding function that can state a difference or a cause, fed data with no effect (its
false claims held to 5%) and with a planted effect (found in most draws); the rates in
docs/statistics.md are the ones computed here; the notebooks' sizes are the ones simulated."""

import ast

import pytest

from perflab.settings import FULL_SIZES, LEASE_SIZES, parameter_names
from perflab.tools.finding_rates import (
    ALPHA,
    BEGIN,
    DDP_ROUNDS,
    DOC,
    END,
    GQA_ROUNDS,
    INT8_ROUNDS,
    OVERHEAD_BUCKETS,
    PHASE_STEPS,
    RING_SIZES,
    WARMUP_STEPS,
    binomial_upper_tail,
    finding_rates,
    rates_markdown,
)


@pytest.fixture(scope="module")
def rates():
    return finding_rates()


def test_findings_claim_an_effect_without_one_at_most_5_percent_and_find_a_planted_one(rates):
    assert rates["within_alpha"].all(), rates
    assert (rates["finds_planted"] > 0.5).all(), rates  # most draws


def test_docs_statistics_lists_the_rates_computed_here(rates):
    text = DOC.read_text()
    assert text.split(BEGIN)[1].split(END)[0].strip() == rates_markdown(rates)


def test_the_consistency_check_rejects_a_rate_above_alpha():
    assert binomial_upper_tail(100, 2000, ALPHA) > 1e-3  # 5.0%: consistent
    assert binomial_upper_tail(140, 2000, ALPHA) < 1e-3  # 7.0%: not
    assert binomial_upper_tail(0, 10, ALPHA) == 1.0


def test_the_warmup_study_sizes_of_notebook_01_are_simulated():
    from perflab.tools.cli import NOTEBOOKS_DIR

    source = (NOTEBOOKS_DIR / "01_benchmarking.py").read_text()
    assert "warmup_study_steps" in parameter_names("01_benchmarking")
    default = int(source.split("\nwarmup_study_steps = ")[1].split()[0])
    full = FULL_SIZES["01_benchmarking"].get("warmup_study_steps", default)
    lease = LEASE_SIZES["01_benchmarking"].get("warmup_study_steps", full)
    assert {default, full, lease} <= set(WARMUP_STEPS)


def test_the_phase_study_sizes_of_notebook_01_are_simulated():
    from perflab.tools.cli import NOTEBOOKS_DIR

    source = (NOTEBOOKS_DIR / "01_benchmarking.py").read_text()
    default = int(source.split("\nsteps = ")[1].split()[0])
    full = FULL_SIZES["01_benchmarking"]["steps"]
    lease = LEASE_SIZES["01_benchmarking"].get("steps", full)
    assert {default, full, lease} <= set(PHASE_STEPS)


def _parameter(source: str, name: str):
    return ast.literal_eval(source.split(f"\n{name} = ")[1].split("#")[0].strip())


def _sizes(notebook: str, name: str) -> set:
    """A parameter's value in the notebook, its full preset and its lease preset."""
    from perflab.tools.cli import NOTEBOOKS_DIR

    default = _parameter((NOTEBOOKS_DIR / f"{notebook}.py").read_text(), name)
    full = FULL_SIZES[notebook].get(name, default)
    return {default, full, LEASE_SIZES[notebook].get(name, full)}


def test_notebook_07s_ddp_rounds_are_simulated():
    assert _sizes("07_distributed_ddp", "rounds") <= set(DDP_ROUNDS)


def test_the_overhead_fit_is_simulated_at_the_full_presets_bucket_counts():
    from perflab.distributed.toy import toy_model
    from perflab.implementations.ddp import plan_buckets
    from perflab.tools.cli import NOTEBOOKS_DIR

    full = FULL_SIZES["07_distributed_ddp"]
    source = (NOTEBOOKS_DIR / "07_distributed_ddp.py").read_text()
    sizes = full.get("bucket_sizes_mb", _parameter(source, "bucket_sizes_mb"))
    params = [p for p in toy_model(full["ddp_model"], 0).parameters() if p.requires_grad]
    counts = tuple(len(plan_buckets(params, size)) for size in sizes)
    assert OVERHEAD_BUCKETS == (counts, full["rounds"])


def test_notebook_10s_int8_and_grouped_query_rounds_are_simulated():
    assert _sizes("10_decoding", "rounds") <= set(INT8_ROUNDS)
    assert _sizes("10_decoding", "gqa_rounds") <= set(GQA_ROUNDS)


def test_notebook_07s_ring_experiment_is_simulated_at_its_cpu_sizes():
    from perflab.tools.cli import NOTEBOOKS_DIR

    source = (NOTEBOOKS_DIR / "07_distributed_ddp.py").read_text()

    def parameter(name):
        return _parameter(source, name)

    sizes = (
        parameter("ring_sizes_mb"),
        parameter("ring_world_sizes"),
        parameter("allreduce_steps"),
    )
    assert sizes in RING_SIZES
