"""The whole-model compile comparison's set-up (perflab.lessons.nb05_attention_compile.compiled);
the comparison itself runs in notebook 05 under nbval."""

import os

import pytest
import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir

from perflab.lessons.nb05_attention_compile.compiled import (
    _no_compile_caches,
    compile_findings,
    compile_vs_eager,
)


def test_a_cold_compile_writes_its_kernels_to_a_fresh_directory():
    before = cache_dir()
    with _no_compile_caches():
        inside = cache_dir()
        assert inside != before
        assert os.listdir(inside) == []
        assert torch._inductor.config.fx_graph_cache is False
    assert cache_dir() == before
    assert not os.path.exists(inside)


def test_an_unknown_compile_mode_is_named():
    with pytest.raises(
        ValueError,
        match="unknown compile mode 'reduce-overhead'; valid: default, max-autotune-no-cudagraphs",
    ):
        compile_vs_eager(
            "cpu-tiny", 8, 1, torch.device("cpu"), compile_modes=("default", "reduce-overhead")
        )


def test_matmul_shapes_counts_each_distinct_multiplication_once():
    """Planted: two linear layers of different widths called twice each, one of them again on
    a batch of another size: three distinct (operator, shapes) for max-autotune to tune."""
    from perflab.lessons.nb05_attention_compile.compiled import matmul_shapes

    narrow, wide = torch.nn.Linear(8, 4, bias=False), torch.nn.Linear(8, 16, bias=False)
    x, y = torch.randn(3, 8), torch.randn(5, 8)

    def step():
        with torch.no_grad():
            narrow(x), narrow(x), wide(x), wide(x), wide(y)

    assert matmul_shapes(step) == 3


def test_the_default_compile_is_not_thrown_away_by_the_next_mode(monkeypatch):
    """compile_vs_eager resets dynamo once per step mode, not between compile modes: a reset
    after the default's compile made it compile again, unseen, inside the comparison."""
    import perflab.lessons.nb05_attention_compile.compiled as compiled

    events = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: events.append("reset"))
    real = compiled._first_call_s

    def first_call(step, device):
        events.append("compile")
        return real(step, device)

    monkeypatch.setattr(compiled, "_first_call_s", first_call)
    monkeypatch.setattr(compiled, "compare", lambda a, b, **kwargs: _same(kwargs["names"]))
    monkeypatch.setattr(compiled, "COMPILE_MODES", ("default", "other"))
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: model)  # no real compile
    modes = {"modes": ("forward",), "compile_modes": ("default", "other")}
    results = compiled.compile_vs_eager("cpu-tiny", 8, 1, torch.device("cpu"), **modes)
    assert events == ["reset", "compile", "compile"]
    assert all(r.details["matmul_shapes"] > 0 and r.labels["mode"] == "forward" for r in results)
    # eager against each mode, then the other mode against the default, each with its cost
    findings = compiled.compile_findings(results)
    assert [f.key for f in findings] == [
        "compiled model forward",
        "other model forward",
        "other against default forward",
    ]
    assert "compiles in" in findings[-1].sentence and findings[-1].comparison is results[-1]


def _same(names):
    from perflab.measure.comparison import paired_comparison

    return paired_comparison([1.0] * 6, [1.0] * 6, names=names)


def test_the_payback_is_given_with_the_range_its_ratio_interval_allows():
    """10 s of compilation, eager 100 ms a step, compiled 0.5x (interval 0.4-0.6): a step saves
    50 ms (40-60), so it pays back after 200 steps (167-250 by the interval)."""
    from perflab.measure.comparison import Comparison

    faster = Comparison("eager", "compiled", (0.1,) * 6, (0.05,) * 6, 0.5, (0.4, 0.6), 0.03,
                        0.968, 0.95)  # fmt: skip
    (finding,) = compile_findings([faster.with_labels(mode="forward").with_details(compile_s=10.0)])
    assert finding.sentence.endswith(
        "; the 10.0 s of compilation (one compilation timed) pay back after about 200 steps "
        "(167-250 by the ratio's interval)"
    )
