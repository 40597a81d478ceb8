"""The fused linear cross-entropy against the plain head (logits, then F.cross_entropy): the
loss and both gradients in float64 on odd sizes and every kind of chunking, padding targets,
bfloat16, bad input, and the memory it saves; then every rung of notebook 09's ladder against the
baseline step."""

import itertools

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from perflab.implementations.model import ModelConfig
from perflab.lessons.nb09_training_step.head_memory import head_peak_memory
from perflab.training import default_chunk_size, fused_linear_cross_entropy
from perflab.training.ladder import Recipe, TrainingStep, check_rung, ladder


def _inputs(tokens, vocab, d, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, d, generator=generator, dtype=dtype, requires_grad=True)
    weight = torch.randn(vocab, d, generator=generator, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,), generator=generator)
    return hidden, weight, targets


def _loss_and_grads(loss_fn, hidden, weight, targets):
    h, w = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    loss = loss_fn(h, w, targets)
    loss.backward()
    return loss.detach(), h.grad, w.grad


def _plain(h, w, t):
    return F.cross_entropy(h @ w.T, t)


@pytest.mark.parametrize("chunk_size", [1, 7, 37, 100, None])
@pytest.mark.parametrize("seed", [0, 1])
def test_equal_to_the_plain_head_in_float64(chunk_size, seed):
    hidden, weight, targets = _inputs(37, 53, 11, seed=seed)  # odd sizes, 37 % 7 != 0
    fused = _loss_and_grads(
        lambda h, w, t: fused_linear_cross_entropy(h, w, t, chunk_size=chunk_size),
        hidden,
        weight,
        targets,
    )
    plain = _loss_and_grads(_plain, hidden, weight, targets)
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_ignored_targets_do_not_count():
    hidden, weight, targets = _inputs(29, 17, 5)
    targets[::3] = -100
    fused = _loss_and_grads(
        lambda h, w, t: fused_linear_cross_entropy(h, w, t, chunk_size=4), hidden, weight, targets
    )
    plain = _loss_and_grads(_plain, hidden, weight, targets)
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert (fused[1][::3] == 0).all()  # an ignored token gets no gradient


def test_every_target_ignored_gives_zero_gradients_as_cross_entropy_does():
    hidden, weight, targets = _inputs(9, 13, 5)
    targets[:] = -100
    fused = _loss_and_grads(
        lambda h, w, t: fused_linear_cross_entropy(h, w, t, chunk_size=4), hidden, weight, targets
    )
    plain = _loss_and_grads(_plain, hidden, weight, targets)
    assert torch.isnan(fused[0]) and torch.isnan(plain[0])  # 0 / 0, as F.cross_entropy
    for a, b in zip(fused[1:], plain[1:], strict=True):
        assert (a == 0).all() and (b == 0).all()


@pytest.mark.parametrize("ignore_index", [-1, 13, 1000])
def test_an_ignore_index_outside_the_vocabulary_is_accepted(ignore_index):
    hidden, weight, targets = _inputs(21, 13, 5)
    targets[::4] = ignore_index
    fused = _loss_and_grads(
        lambda h, w, t: fused_linear_cross_entropy(
            h, w, t, chunk_size=8, ignore_index=ignore_index
        ),
        hidden,
        weight,
        targets,
    )
    plain = _loss_and_grads(
        lambda h, w, t: F.cross_entropy(h @ w.T, t, ignore_index=ignore_index),
        hidden,
        weight,
        targets,
    )
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ignored", [False, True])
def test_equal_to_torchs_own_linear_cross_entropy_in_float64(ignored):
    """torch's F.linear_cross_entropy (its chunked path) as an independent reference."""
    from perflab.lessons.nb09_training_step.head_memory import torch_chunked_loss

    hidden, weight, targets = _inputs(67, 41, 9, seed=3)
    if ignored:
        targets[1::5] = -100
    fused = _loss_and_grads(
        lambda h, w, t: fused_linear_cross_entropy(h, w, t, chunk_size=16), hidden, weight, targets
    )
    theirs = _loss_and_grads(torch_chunked_loss, hidden, weight, targets)
    for a, b in zip(fused, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_the_default_chunk_is_the_measured_one_and_its_bound_is_stated_right():
    """The docstring's examples: 64 tokens in one chunk; at 2048 tokens, chunks of 128."""
    from perflab.implementations.fused_cross_entropy import DEFAULT_CHUNK_TOKENS

    assert DEFAULT_CHUNK_TOKENS == 128
    assert default_chunk_size(64, 10_000, 128) == 64
    assert default_chunk_size(2048, 32_000, 256) == 128


def test_wrong_argument_types_are_one_clear_error():
    import numpy as np

    with pytest.raises(ValueError, match="hidden must be a torch.Tensor, got ndarray"):
        fused_linear_cross_entropy(
            np.zeros((4, 8)), torch.randn(10, 8), torch.zeros(4, dtype=torch.long)
        )
    with pytest.raises(ValueError, match="ignore_index must be an integer"):
        fused_linear_cross_entropy(
            torch.randn(4, 8),
            torch.randn(10, 8),
            torch.zeros(4, dtype=torch.long),
            ignore_index=1.5,
        )


def test_bfloat16_stays_close_to_float32():
    """bf16 inputs, fp32 logits inside: within bf16's rounding of the float32 result."""
    hidden, weight, targets = _inputs(64, 97, 16, dtype=torch.float32)
    reference = _loss_and_grads(_plain, hidden, weight, targets)
    low = _loss_and_grads(
        lambda h, w, t: fused_linear_cross_entropy(h.bfloat16(), w.bfloat16(), t, chunk_size=16),
        hidden,
        weight,
        targets,
    )
    assert low[0].dtype == torch.bfloat16
    torch.testing.assert_close(low[0].float(), reference[0], rtol=2e-2, atol=2e-2)
    for a, b in zip(low[1:], reference[1:], strict=True):
        assert a.dtype == torch.float32  # the leaves' dtype; bf16 flowed through the cast
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-3)


def test_default_chunk_never_holds_more_than_its_tokens_logits():
    tokens, vocab, d = 4096, 32000, 256
    chunk = default_chunk_size(tokens, vocab, d)
    assert chunk == 128 and chunk * vocab <= 4 * tokens * d
    assert default_chunk_size(10, 100, 512) == 10  # never more than the tokens


@pytest.mark.parametrize(
    "args, message",
    [
        (((4, 8), (10, 7), (4,)), "same d"),
        (((4, 8), (10, 8), (5,)), "targets must be integer ids of shape"),
    ],
)
def test_bad_shapes_raise_one_clear_error(args, message):
    h, w, t = args
    with pytest.raises(ValueError, match=message):
        fused_linear_cross_entropy(torch.randn(h), torch.randn(w), torch.zeros(t, dtype=torch.long))


@pytest.mark.parametrize("bad", [-1, 10])
def test_targets_outside_the_vocabulary_raise_one_clear_error(bad):
    targets = torch.tensor([0, bad, 3, -100])
    with pytest.raises(ValueError, match=r"targets must be ids in \[0, 10\) or ignore_index"):
        fused_linear_cross_entropy(torch.randn(4, 8), torch.randn(10, 8), targets)


def test_bad_chunk_size_raises():
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        fused_linear_cross_entropy(
            torch.randn(4, 8), torch.randn(10, 8), torch.zeros(4, dtype=torch.long), chunk_size=0
        )


def test_fused_head_peak_is_below_the_plain_heads():
    """A small instance of the memory benchmark (the notebook prints the full-size one): the
    allocator's peak of forward + backward, fused against plain."""
    table = head_peak_memory(512, 4000, 64).set_index("method")
    assert table.loc["plain", "peak_bytes"] > table.loc["plain", "logits_bytes"]
    assert table.loc["fused", "peak_bytes"] <= 0.25 * table.loc["plain", "peak_bytes"]  # the goal
    assert table.loc["torch chunked", "peak_bytes"] < table.loc["plain", "peak_bytes"]


def test_under_autocast_forward_and_backward_use_the_same_dtype():
    """fp32 leaves under bf16 autocast: the head's matmuls run in bf16 in forward and in
    backward (which autocast does not cover), so backward neither fails on mixed dtypes nor
    strays from the plain head under the same autocast."""
    hidden, weight, targets = _inputs(48, 61, 16, dtype=torch.float32)

    def under_autocast(loss_fn):
        def run(h, w, t):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return loss_fn(h, w, t)

        return run

    fused = _loss_and_grads(
        under_autocast(lambda h, w, t: fused_linear_cross_entropy(h, w, t, chunk_size=8)),
        hidden,
        weight,
        targets,
    )
    plain = _loss_and_grads(
        under_autocast(lambda h, w, t: F.cross_entropy((h @ w.T).float(), t)),
        hidden,
        weight,
        targets,
    )
    assert fused[1].dtype == fused[2].dtype == torch.float32
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-3)


# --- the ladder of notebook 09 ---------------------------------------------------------------


TINY = ModelConfig(
    "ladder-test", d_model=32, d_ff=96, num_layers=2, num_heads=2, vocab_size=97, context_length=64
)
CPU = torch.device("cpu")


def test_each_rung_adds_exactly_one_change():
    recipes = ladder()
    assert recipes[0] == Recipe("baseline", qkv="separate")
    for before, after in itertools.pairwise(recipes):
        changed = [
            f
            for f in (
                "dtype",
                "qkv",
                "head",
                "attention",
                "optimizer",
                "compiled",
                "checkpoint_group",
            )
            if getattr(before, f) != getattr(after, f)
        ]
        assert len(changed) == 1, (after.name, changed)
    picked = ladder(["fused loss head", "bf16 autocast"])
    assert [r.name for r in picked] == ["baseline", "fused loss head", "bf16 autocast"]
    assert picked[1].dtype == "float32" and picked[2].head == "fused"  # in the order given


def test_bad_rungs_and_recipes_raise_one_clear_error():
    with pytest.raises(ValueError, match="unknown rungs"):
        ladder(["fastest"])
    with pytest.raises(ValueError, match=r"rungs \['fused AdamW'\] are given more than once"):
        ladder(["fused AdamW", "foreach AdamW", "fused AdamW"])
    with pytest.raises(ValueError, match="unknown attention 'fast'; valid: naive, flash, sdpa"):
        Recipe("x", attention="fast")


@pytest.mark.parametrize(
    "change",
    [
        {"qkv": "fused"},
        {"head": "fused"},
        {"attention": "flash"},
        {"attention": "sdpa"},
        {"optimizer": "foreach"},
        {"optimizer": "fused"},
        {"checkpoint_group": 1},
    ],
)
def test_every_float_rung_is_the_baseline_in_float64(change):
    """Each optimisation alone, float64 parameters, a fresh batch: loss, gradients and the
    parameters after one AdamW step equal the baseline's to 1e-10."""
    row = check_rung(
        TINY,
        Recipe("one change", **{"qkv": "separate", **change}),
        2,
        16,
        CPU,
        seed=3,
        param_dtype=torch.float64,
        tolerance=1e-10,
    )
    assert row["matches_baseline"], row


def test_the_check_catches_a_rung_that_differs():
    """bf16 against a float64-tight tolerance fails; so does an update from another optimizer
    setting (a ten times larger learning rate), which the gradients alone would not show."""
    row = check_rung(TINY, Recipe("bf16", dtype="bfloat16"), 2, 16, CPU, seed=3, tolerance=1e-10)
    assert not row["matches_baseline"] and row["grad_error"] > 1e-10

    original = torch.optim.AdamW

    def adamw_wrong_when_foreach(params, lr, foreach=None, **kwargs):
        return original(params, lr=10 * lr if foreach else lr, foreach=foreach, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim, "AdamW", adamw_wrong_when_foreach)
        row = check_rung(
            TINY,
            Recipe("foreach", qkv="separate", optimizer="foreach"),
            2,
            16,
            CPU,
            seed=3,
            param_dtype=torch.float64,
            tolerance=1e-10,
        )
    assert row["grad_error"] == 0 and row["update_error"] > 1  # ten times the update
    assert not row["matches_baseline"]


def test_bf16_autocast_rung_is_within_its_stated_tolerance():
    row = check_rung(TINY, ladder(["bf16 autocast"])[1], 2, 16, CPU, seed=4)
    assert row["tolerance"] == 5e-2 and row["matches_baseline"], row
    assert row["grad_error"] > 0  # bf16 really ran


def test_compiled_rung_matches_the_baseline():
    row = check_rung(TINY, Recipe("compiled", compiled=True), 2, 16, CPU, seed=5)
    assert row["matches_baseline"], row


@pytest.mark.parametrize(
    "verdict, peak, kept",
    [
        ("faster", 2, True),
        ("same", 1, True),
        ("same", 2, False),
        ("same", 3, False),
        ("slower", 1, False),
        ("inconclusive", 1, False),
    ],
)
def test_a_change_is_kept_when_faster_or_the_same_with_less_memory(verdict, peak, kept):
    from perflab.training.ladder import keep_rung

    assert keep_rung(verdict, peak_bytes=peak, best_peak_bytes=2) is kept


def test_the_greedy_ladder_tries_each_change_on_the_best_stack_so_far(monkeypatch):
    """Verdicts planted through ``compare``: a faster change is kept and the next is tried on
    it, a slower one is dropped, one that fails the check is dropped untimed."""
    import perflab.training.ladder as ladder_module
    from perflab.measure.comparison import paired_comparison

    planted = {"fused AdamW": 0.5, "foreach AdamW": 2.0, "fused loss head": 0.5}

    def fake_compare(step_a, step_b, *, names, rounds, **kwargs):
        step_a(), step_b()  # the steps still run: each builds on a real model
        ratio = planted[names[1]]
        return paired_comparison([1.0] * 8, [ratio] * 8, names=names)

    real_check = ladder_module.check_rung

    def check(config, recipe, *args, **kwargs):
        row = real_check(config, recipe, *args, **kwargs)
        return {**row, "matches_baseline": recipe.name != "bf16 autocast"}

    monkeypatch.setattr(ladder_module, "compare", fake_compare)
    monkeypatch.setattr(ladder_module, "check_rung", check)
    changes = ["fused AdamW", "foreach AdamW", "bf16 autocast", "fused loss head"]
    greedy, stack = ladder_module.greedy_ladder(TINY, changes, 2, 16, CPU, rounds=8, warmup=0)
    rows = greedy.set_index("rung")
    assert list(greedy["rung"]) == ["baseline", *changes]
    assert rows["kept"].to_dict() == {
        "baseline": True,
        "fused AdamW": True,
        "foreach AdamW": False,
        "bf16 autocast": False,
        "fused loss head": True,
    }
    assert rows.loc["foreach AdamW", "tried_on"] == "fused AdamW"
    assert rows.loc["fused loss head", "tried_on"] == "fused AdamW"  # not on foreach's
    assert pd.isna(rows.loc["bf16 autocast", "verdict"])  # failed its check: not timed
    assert "beyond its tolerance" in rows.loc["bf16 autocast", "reason"]
    assert (stack.name, stack.optimizer, stack.head, stack.dtype) == (
        "fused AdamW + fused loss head",
        "fused",
        "fused",
        "float32",
    )
    assert (
        rows.loc["fused AdamW", "verdict"] == "faster" and rows.loc["fused AdamW", "vs_best"] == 0.5
    )
    assert (greedy["peak_bytes"].dropna() > 0).all() and rows["first_step_s"].notna().all()
    with pytest.raises(ValueError, match="unknown rungs"):
        ladder_module.greedy_ladder(TINY, ["fastest"], 2, 16, CPU)


def test_a_rungs_first_step_is_timed_between_synchronisations(monkeypatch):
    """first_step_s holds a compiled rung's compile and its first step's kernels: on a GPU the
    launches return before the kernels finish, so the clock needs a synchronisation on both
    sides of that step."""
    import perflab.training.ladder as ladder_module
    from perflab.measure.comparison import paired_comparison

    log = []
    real_step = ladder_module.TrainingStep.step

    def logged_step(self):
        log.append("step")
        return real_step(self)

    monkeypatch.setattr(ladder_module, "synchronize", lambda device: log.append("sync"))
    monkeypatch.setattr(ladder_module.TrainingStep, "step", logged_step)
    monkeypatch.setattr(
        ladder_module,
        "compare",
        lambda a, b, *, names, **kwargs: paired_comparison([1.0] * 8, [0.5] * 8, names=names),
    )
    ladder_module.greedy_ladder(TINY, ["fused AdamW"], 2, 16, CPU, rounds=8, warmup=0)
    assert any(log[i : i + 3] == ["sync", "step", "sync"] for i in range(len(log)))


def test_a_kept_change_replaces_an_earlier_one_of_the_same_field(monkeypatch):
    import perflab.training.ladder as ladder_module
    from perflab.lessons.nb09_training_step.ladder_traces import greedy_bound_table
    from perflab.measure.comparison import paired_comparison

    def faster(step_a, step_b, *, names, **kwargs):
        return paired_comparison([1.0] * 8, [0.5] * 8, names=names)

    monkeypatch.setattr(ladder_module, "compare", faster)
    greedy, stack = ladder_module.greedy_ladder(TINY, ["SDPA", "FlashAttention"], 2, 16, CPU)
    assert list(greedy["kept"]) == [True, True, True]
    assert (stack.name, stack.attention) == ("FlashAttention", "flash")
    assert greedy_bound_table(greedy, steps=1).empty  # no traces were recorded


def test_the_kept_stack_is_timed_against_the_baseline_in_turns():
    from perflab.training.ladder import stack_against_baseline

    stack = Recipe("fused AdamW", optimizer="fused")
    result = stack_against_baseline(TINY, stack, 2, 16, CPU, rounds=2, warmup=0)
    assert (result.name_a, result.name_b) == ("baseline", "fused AdamW")
    # 2 rounds give a 50% interval: no verdict can be drawn from it, whatever the times.
    assert result.confidence == 0.5 and result.verdict == "inconclusive"
    assert len(result.times_a) == len(result.times_b) == 2


def test_byte_tokenizer_round_trips_any_text():
    from perflab.lessons.nb09_training_step.data import ByteTokenizer

    tokenizer = ByteTokenizer()
    text = "First Citizen: café, naïve — ✓"
    ids = tokenizer.encode(text)
    assert max(ids) < tokenizer.vocab_size and tokenizer.decode(ids) == text
    assert len(ids) == len(text.encode("utf-8"))


def test_every_data_path_gives_the_same_batches():
    from perflab.lessons.nb09_training_step.data import DATA_PATHS, batches, read_corpus

    text = read_corpus()[:5000]
    modes = ("tokenise every step", "pre-tokenised", "DataLoader, 1 worker")
    got = {mode: list(batches(mode, text, 3, 16, 4, seed=7)) for mode in modes}
    reference = got["pre-tokenised"]
    assert len(reference) == 4 and "DataLoader, 2 workers" in DATA_PATHS
    for mode, found in got.items():
        for (x, y), (rx, ry) in zip(found, reference, strict=True):
            assert torch.equal(x, rx) and torch.equal(y, ry), mode
    x, y = reference[0]
    assert x.shape == (3, 16) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


def test_bad_data_path_and_short_corpus_raise():
    from perflab.lessons.nb09_training_step.data import batches

    with pytest.raises(ValueError, match="unknown data path 'fast'; valid: tokenise every step"):
        next(batches("fast", "abc", 1, 4, 1))
    with pytest.raises(ValueError, match="fewer than a window of 17"):
        next(batches("pre-tokenised", "too short", 1, 16, 1))


def test_data_path_steps_time_every_mode_in_every_round():
    from perflab.lessons.nb09_training_step.data import data_path_steps, read_corpus
    from perflab.measure.comparison import paired_table

    byte_model = ModelConfig(
        "bytes", d_model=32, d_ff=64, num_layers=1, num_heads=2, vocab_size=256, context_length=32
    )
    run = TrainingStep(byte_model, Recipe("baseline"), 2, 16, CPU)
    times = data_path_steps(
        run, read_corpus()[:4000], rounds=3, modes=("tokenise every step", "pre-tokenised")
    )
    assert set(times) == {"synthetic", "tokenise every step", "pre-tokenised"}
    assert all(len(t) == 3 for t in times.values())
    table = paired_table(times, "synthetic", label="data_path").set_index("data_path")
    # 3 rounds give [min, max] at 75%: every verdict is "inconclusive", never "same".
    assert set(table["verdict"].dropna()) == {"inconclusive"}
    assert (table["confidence"].dropna() == 0.75).all()
    with pytest.raises(ValueError, match="vocabulary of at least 256"):
        data_path_steps(TrainingStep(TINY, Recipe("baseline"), 2, 16, CPU), "x" * 100, 2)


def test_gradient_accumulation_equals_the_full_batch_in_float64():
    run = TrainingStep(TINY, Recipe("baseline"), 4, 16, CPU, seed=2, param_dtype=torch.float64)
    full_loss = run.loss_and_backward()
    full = [p.grad.clone() for p in run.model.parameters()]
    split_loss = run.loss_and_backward(micro_batches=4)
    for a, b in zip((p.grad for p in run.model.parameters()), full, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(split_loss, full_loss, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="micro_batches must divide the batch of 4"):
        run.step(micro_batches=3)


def test_batch_and_accumulation_tables():
    from perflab.training.step_profile import accumulation_table, batch_size_table

    sizes = batch_size_table(TINY, [1, 4], 16, CPU, steps=2)
    assert list(sizes["tokens"]) == [16, 64] and (sizes["peak_bytes"] > 0).all()
    accumulated = accumulation_table(TINY, 4, [1, 4], 16, CPU, steps=2)
    assert list(accumulated["micro_batch"]) == [4, 1]
    # Activations of a quarter of the batch at a time: a lower peak.
    assert accumulated["peak_bytes"].iloc[1] < accumulated["peak_bytes"].iloc[0]


def test_small_defects_are_one_clear_error_or_work():
    from perflab.training.ladder import tolerance_for

    assert tolerance_for("bf16") == tolerance_for("bfloat16") == tolerance_for(torch.bfloat16)
    assert tolerance_for("float16") == tolerance_for("fp16")
    with pytest.raises(ValueError, match="rungs must be a list of change names"):
        ladder("fused QKV")


def test_window_offsets_reach_the_last_valid_start_and_no_further():
    from perflab.lessons.nb09_training_step.data import _offsets

    assert set(_offsets(17, 16, 50, seed=0).tolist()) == {0}  # exactly one window fits
    starts = set(_offsets(20, 16, 400, seed=0).tolist())
    assert starts == {0, 1, 2, 3}  # 20 - 17 = 3 is the last start whose window fits
    with pytest.raises(ValueError, match="16 tokens, fewer than a window of 17"):
        _offsets(16, 16, 1, seed=0)


def test_chunk_size_sweep_and_the_comparison_with_torchs_head():
    from perflab.lessons.nb09_training_step.head_memory import (
        chunk_size_sweep,
        compare_with_torch_head,
    )

    sweep = chunk_size_sweep(256, 1000, 32, [32, 256], steps=2, warmup=0).set_index("chunk_size")
    assert list(sweep.index) == [32, 256]
    # a chunk of 32 tokens holds 8x fewer logits at a time than one of all 256
    assert sweep.loc[32, "peak_bytes"] < sweep.loc[256, "peak_bytes"]
    assert sweep["default"].sum() <= 1 and sweep["median_ci_level"].iloc[0] == 0.5
    result = compare_with_torch_head(128, 500, 16, rounds=2)
    assert result.rounds == 2 and result.verdict == "inconclusive"  # 2 rounds: 50%
    with pytest.raises(ValueError, match="chunk_sizes must be positive integers"):
        chunk_size_sweep(8, 10, 4, [0])
