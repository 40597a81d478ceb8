"""The sources' claims beside ours: every claim's own arithmetic redone from its figures, every
answer read from a committed result (none typed), docs/sources.md rendered from both, and the
write-up's appendix showing them."""

from pathlib import Path

import pandas as pd
import pytest

from perflab.tools.claims import (
    CLAIMS,
    DOC_HEADER,
    SOURCES,
    Conclusion,
    GpuOnly,
    NotMeasured,
    Rows,
    _activation_peak_rows,
    _allreduce_rows,
    _attention_growth_rows,
    _holds,
    _statistics_rows,
    attention_growth,
    claims_table,
    markdown_table,
    ours_cells,
)
from perflab.tools.report import Source
from perflab.tools.writeup import writeup_source

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "data" / "results"


def _check(fragment: str) -> str:
    (claim,) = [c for c in CLAIMS if fragment in c.claim]
    return claim.check()


def test_the_sources_own_figures_give_what_the_audit_found():
    assert "32,768x" in _check("256 KB")  # "33x" in the source
    assert "2.3–3.6x" in _check("trace capture")  # "2.6–3.1x" in the source
    assert "4.8–15.6x" in _check("give 2–3x")  # "2–3x" in the source
    assert "6.25 MiB" in _check("residual stream") and "10 MiB" in _check("residual stream")
    assert "6.3 GB" in _check("640 MB") and "1.35 bytes" in _check("135 MB")
    at_8k, at_16k = attention_growth()
    assert (round(min(at_8k), 1), round(max(at_8k), 1)) == (29.4, 59.1)  # "~80x"
    assert (round(min(at_16k)), round(max(at_16k))) == (115, 233)  # "~315x"


def test_a_check_says_holds_only_when_the_figures_give_the_stated_number():
    assert _check("45.9%").endswith("holds") and "does not hold" not in _check("var_mean")
    assert "does not hold" not in _check("6.1%")
    assert _holds(57.05, 57, 0.05) == "holds" and _holds(56.95, 57, 0.05) == "holds"
    assert _holds(57.06, 57, 0.05) == _holds(56.9, 57, 0.05) == "does not hold (stated 57)"
    table = {16: ((1.0, 1.0), (80.0, 80.0), (315.0, 315.0))}  # a table that would bear it out
    assert attention_growth(table) == ([80.0, 80.0], [315.0, 315.0])


def test_every_claim_names_a_known_source_and_an_answer():
    assert {c.source for c in CLAIMS} == set(SOURCES)
    assert all(c.ours and c.basis in ("measured", "estimated") for c in CLAIMS)


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.claim[:40])
def test_every_answer_measures_the_claims_quantity_or_says_why_not(claim):
    """An answer of another quantity (a LayerNorm's time beside a claim about tokens/s end to
    end) is a wrong answer: each answer names what it measures, and it is the claim's, or the
    answer says it is not measured here and why."""
    assert claim.quantity.strip()
    for ours in claim.ours:
        if isinstance(ours, (GpuOnly, NotMeasured)):
            assert len(ours.why.split()) >= 5, ours
        else:
            assert ours.quantity == claim.quantity, (claim.claim, ours)


def test_the_statistics_and_activation_rows_answer_their_own_quantity():
    """Planted: the statistics in one pass against two (the kernels' own times), and the peak
    growing with the layers without checkpointing (the activations a layer keeps)."""
    statistics = pd.DataFrame(
        {"statistic": ["mean", "var", "var_mean"], "median_s": [0.001, 0.002, 0.0024]}
    )
    assert _statistics_rows(statistics) == (
        "the statistics alone: var_mean 2.400 ms against mean 1.000 ms + var 2.000 ms = "
        "3.000 ms, 0.80x (separate medians, not interleaved: no verdict)"
    )
    depth = pd.DataFrame(
        {
            "layers": [4, 4, 16, 16],
            "strategy": ["none", "nested", "none", "nested"],
            "peak_bytes": [30e6, 10e6, 90e6, 12e6],
        }
    )
    assert _activation_peak_rows(depth) == (
        "without checkpointing the peak of a block stack's forward and backward grows 5.0 MB a "
        "layer from 4 to 16 layers, to 90.0 MB (the activations kept for backward and the "
        "temporaries live at the peak, not told apart)"
    )


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.claim[:40])
def test_every_answer_resolves_to_a_committed_result(claim):
    for ours in claim.ours:
        cells = ours_cells(ours, COMMITTED)
        assert cells, f"{ours} finds nothing in {COMMITTED}"
        if not isinstance(ours, (GpuOnly, NotMeasured)):
            assert all((COMMITTED / where.split(" ")[0]).exists() for where, _ in cells)


def test_answers_are_read_from_the_results_not_typed(tmp_path):
    folder = tmp_path / "10_decoding" / "some-cpu"
    folder.mkdir(parents=True)
    from perflab.measure.paths import library_tree

    pd.DataFrame(
        {
            "key": ["int8 weights", "int8 other"],
            "sentence": ["int8 is 9.99x faster", "second"],
            "library_tree": library_tree(),  # measured by this library: quoted as it is
        }
    ).to_csv(folder / "conclusions.csv", index=False)
    found = ours_cells(Conclusion("10_decoding", "int8", "q"), tmp_path)
    assert found == [
        ("10_decoding/some-cpu", "int8 is 9.99x faster"),
        ("10_decoding/some-cpu", "second"),
    ]
    # rows of older code say so, with their commit
    pd.DataFrame(
        {
            "key": ["int8 weights"],
            "sentence": ["old"],
            "library_tree": "a" * 40,  # "0" * 40 reads back as 0: a prefix
            "commit": "abc1234",
        }
    ).to_csv(folder / "conclusions.csv", index=False)
    ((_, old),) = ours_cells(Conclusion("10_decoding", "int8", "q"), tmp_path)
    assert old == "old [measured by older code at commit abc1234, not this library: what it " \
        "measured may differ]"  # fmt: skip
    pd.DataFrame(
        {"key": ["int8 weights", "int8 other"], "sentence": ["int8 is 9.99x faster", "second"]}
    ).to_csv(folder / "conclusions.csv", index=False)
    assert ours_cells(Conclusion("10_decoding", "absent", "q"), tmp_path) == []
    assert ours_cells(Rows("01_benchmarking", "timings", len, "q"), tmp_path) == []

    def answered_here(ours):
        keys = ("int8 weights", "int8 other")
        return isinstance(ours, (GpuOnly, NotMeasured)) or (
            isinstance(ours, Conclusion)
            and ours.notebook == "10_decoding"
            and any(key.startswith(ours.key) for key in keys)
        )

    table = claims_table(tmp_path)
    answered = set(table.loc[table["answers"].map(bool), "claim"])
    assert answered == {c.claim for c in CLAIMS if any(answered_here(o) for o in c.ours)}
    assert "not saved" in markdown_table(tmp_path)


def test_docs_sources_is_rendered_from_the_committed_results():
    expected = DOC_HEADER + markdown_table(COMMITTED)
    assert (ROOT / "docs" / "sources.md").read_text() == expected, (
        "docs/sources.md differs from perflab.tools.claims and data/results: render it again with "
        "python -c 'from perflab.tools.claims import write_doc; write_doc()'"
    )
    assert "not saved" not in expected


def test_the_writeup_appendix_holds_the_claims_beside_each_folder(tmp_path):
    from perflab.measure.paths import library_tree

    folder = tmp_path / "cpu" / "01_benchmarking" / "amd-epyc"
    folder.mkdir(parents=True)
    pd.DataFrame(
        {
            "key": ["backward/forward"],
            "sentence": ["backward 1.23x the forward"],
            "library_tree": [library_tree()],
        }
    ).to_csv(folder / "conclusions.csv", index=False)
    text, _ = writeup_source("2026", [Source("cpu", tmp_path / "cpu")], tmp_path / "out")
    appendix = text[text.index("The sources' claims beside ours") :]
    assert "backward 1.23x the forward (01_benchmarking/amd-epyc)" in appendix
    assert "32,768x" in appendix and "not saved" in appendix


def test_row_summaries_take_what_a_gpu_run_saves():
    """A GPU run's attention rows where the longest length ran out of memory at one head
    dimension and not the other, and an all-reduce sweep of one message size: each summary
    says what it can (growth per head dimension up to its own longest length; no growth from
    one size) instead of stopping ``write_doc``."""
    rows = []
    for head_dim, lengths in ((64, (1024, 4096, 16384)), (128, (1024, 4096))):
        for n in lengths:
            rows.append((head_dim, n, "ok", n / 1000, n * n))
    rows.append((128, 16384, "out of memory", None, None))
    table = pd.DataFrame(
        rows, columns=["head_dim", "seq_len", "status", "end_to_end_s", "peak_bytes"]
    )
    table["implementation"] = "naive"
    summary = _attention_growth_rows(table)
    assert "d=64: n=1024 to 16384 (16x): time 16.0x, peak memory 256x" in summary
    assert "d=128: n=1024 to 4096 (4x): time 4.0x, peak memory 16.0x" in summary
    same = table[table["seq_len"] < 16384]
    assert _attention_growth_rows(same).startswith("naive attention from n=1024 to 4096 (4x)")

    sweep = pd.DataFrame(
        {
            "world_size": [2, 2],
            "size_mb": [64, 64],
            "status": ["ok", "error"],
            "time_ms": [5.0, None],
        }
    )
    assert (
        _allreduce_rows(sweep)
        == "Gloo all-reduce measured at one message size (64 MB) only: no growth to state"
    )
