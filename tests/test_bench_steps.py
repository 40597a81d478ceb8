import json

import pandas as pd
import pytest
import torch

from perflab.bench import BenchConfig, make_step, random_batch, run_benchmark
from perflab.bench.steps import phase_columns
from perflab.implementations.model import PRESETS, TransformerLM
from perflab.lessons.nb01_benchmarking.warmup import warmup_samples
from perflab.measure.tables import phase_breakdown, throughput
from perflab.measure.timer import PhaseClock


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"preset": "tiny"}, "unknown preset 'tiny'; valid: cpu-tiny"),
        ({"mode": "backward"}, "valid: forward, forward-backward, train-step"),
        ({"context_length": 0}, "context_length must be an integer >= 1, got 0"),
        ({"steps": 0}, "steps must be an integer >= 1"),
        ({"warmup": -2}, "warmup must be an integer >= 0"),
        ({"dtype": "half-ish"}, "valid: float32, bfloat16, float16"),
    ],
)
def test_bench_config_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        BenchConfig(**{"preset": "cpu-tiny", "context_length": 8, "mode": "forward", **changes})


def _model_and_batch():
    torch.manual_seed(0)
    model = TransformerLM(PRESETS["cpu-tiny"])
    inputs, targets = random_batch(10_000, 2, 8, torch.device("cpu"))
    return model, inputs, targets


def test_steps_do_what_their_mode_says():
    model, inputs, targets = _model_and_batch()
    make_step(model, inputs, targets, "forward")()
    assert all(p.grad is None for p in model.parameters())

    make_step(model, inputs, targets, "forward-backward")()
    assert all(p.grad is not None for p in model.parameters())

    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    make_step(model, inputs, targets, "train-step", optimizer=optimizer)()
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


def test_train_step_needs_an_optimizer():
    model, inputs, targets = _model_and_batch()
    with pytest.raises(ValueError, match="needs an optimizer"):
        make_step(model, inputs, targets, "train-step")


def test_random_batch_targets_are_the_next_tokens():
    inputs, targets = random_batch(100, 3, 10, torch.device("cpu"), seed=1)
    assert inputs.shape == targets.shape == (3, 10)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    again, _ = random_batch(100, 3, 10, torch.device("cpu"), seed=1)
    assert torch.equal(inputs, again)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_run_benchmark_row(dtype):
    config = BenchConfig(
        "cpu-tiny",
        context_length=16,
        mode="train-step",
        batch_size=2,
        warmup=1,
        steps=2,
        dtype=dtype,
        device="cpu",
    )
    row, timing = run_benchmark(config)
    model = PRESETS["cpu-tiny"]
    assert row["tokens_per_step"] == 32 and row["dtype"] == dtype
    assert row["flops_per_step"] == model.train_step_flops(2, 16)
    assert row["num_parameters"] == model.num_parameters()
    assert row["median_s"] == timing.median and len(timing.samples) == 2
    assert row["achieved_flops_per_s"] == pytest.approx(row["flops_per_step"] / timing.median)


def _results(forward, forward_backward, train_step):
    means = {"forward": forward, "forward-backward": forward_backward, "train-step": train_step}
    phases = {"forward": [1.0, 1.2, 0.8], "backward": [2.0, 2.6, 1.6], "optimizer": [0.5] * 3}
    return pd.DataFrame(
        [
            {
                "preset": "p",
                "mode": m,
                "status": "ok",
                "mean_s": s,
                "std_s": 0.1,
                "median_s": s,
                "tokens_per_s": 100 / s,
                "achieved_flops_per_s": 1e12 / s,
                "unstable": False,
                **(
                    phase_columns(
                        [
                            dict(zip(phases, v, strict=True))
                            for v in zip(*phases.values(), strict=True)
                        ]
                    )
                    if m == "train-step"
                    else {}
                ),
            }
            for m, s in means.items()
        ]
        + [{"preset": "q", "mode": "forward", "status": "oom"}]
    )


def test_phase_breakdown_from_inside_the_step_with_subtraction_beside_it():
    table = phase_breakdown(_results(1.0, 3.0, 3.4))
    row = table.set_index("preset").loc["p"]
    assert (row.forward_s, row.backward_s, row.optimizer_s) == pytest.approx(
        (1.0, 2.0 + 0.2 / 3, 0.5)
    )
    assert row.step_s == pytest.approx(row.forward_s + row.backward_s + row.optimizer_s)
    assert row.forward_share + row.backward_share + row.optimizer_share == pytest.approx(1.0)
    assert row.backward_over_forward == pytest.approx(2.0)  # median of 2.0, 2.1667, 2.0
    assert row.backward_over_forward_ci_low <= 2.0 <= row.backward_over_forward_ci_high
    assert (row.backward_by_subtraction_s, row.optimizer_by_subtraction_s) == pytest.approx(
        (2.0, 0.4)
    )
    assert "q" not in set(table["preset"])


def test_phases_are_measured_inside_each_step_and_add_up():
    config = BenchConfig(
        preset="cpu-tiny",
        context_length=16,
        mode="train-step",
        batch_size=2,
        warmup=1,
        steps=3,
        device="cpu",
    )
    row, timing = run_benchmark(config)
    phases = json.loads(row["phase_samples_s"])
    assert list(phases) == ["forward", "backward", "optimizer"]
    assert all(len(v) == 3 for v in phases.values())
    clocked = [sum(step) for step in zip(*phases.values(), strict=True)]
    assert all(c <= t for c, t in zip(clocked, timing.samples, strict=True))  # inside the step
    total = row["forward_phase_s"] + row["backward_phase_s"] + row["optimizer_phase_s"]
    assert total == pytest.approx(sum(clocked) / 3)


def test_throughput_mfu_against_peak():
    table = throughput(_results(1.0, 3.0, 4.0), peak_flops_per_s=2e12)
    assert table.set_index("mode").loc["forward", "mfu"] == pytest.approx(0.5)
    assert table.set_index("mode").loc["train-step", "mfu"] == pytest.approx(0.125)
    with pytest.raises(ValueError, match="must be positive"):
        throughput(_results(1, 2, 3), 0)


def test_mfu_lines_take_the_best_from_stable_rows_and_claim_no_difference():
    from perflab.measure.tables import mfu_lines

    rates = pd.DataFrame(
        {
            "preset": ["a", "a", "b"],
            "mode": ["forward", "train-step", "train-step"],
            "mfu": [0.9, 0.2, 0.4],
            "unstable": [True, False, False],
        }
    )
    best, by_preset, missing = mfu_lines(rates, ["a", "b", "c"])
    assert best == "best MFU (stable rows): 40.0% (b, train-step); worst: 20.0%"  # not a's 90%
    assert by_preset.startswith("training-step MFU by preset: a 20.0%, b 40.0% (separate")
    assert missing == "no training step (out of memory or failed): c"
    unstable = mfu_lines(rates.assign(unstable=True), ["a", "b"])
    assert unstable[0].startswith("best MFU (all rows, none stable): 90.0%")
    assert "b 40.0% (unstable)" in unstable[1] and len(unstable) == 2


def test_warmup_samples_long_form():
    study = pd.DataFrame({"warmup": [0, 2], "samples_s": [[0.3, 0.1], [0.1, 0.1]]})
    long = warmup_samples(study)
    assert long["step"].tolist() == [0, 1, 0, 1]
    assert long["seconds"].tolist() == [0.3, 0.1, 0.1, 0.1]


def _study(*settings: list[float], warmups=(0, 1, 2)) -> pd.DataFrame:
    return pd.DataFrame({"warmup": list(warmups), "samples_s": [str(list(s)) for s in settings]})


def test_warmup_effect_tests_the_first_step_exactly_and_in_order():
    """The first step's p-value is the share of steps at least as slow (exact under no
    one-off cost); settings are tested in order of warm-up, each only after every earlier one
    was found slower; the first step's weight in its own mean and median is arithmetic."""
    from perflab.lessons.nb01_benchmarking.warmup import first_step_p_value, warmup_effect

    flat = [0.1 + 0.001 * (i % 5) for i in range(23)]
    slow, quiet = [0.4, *flat], [0.1, *flat]
    effect = warmup_effect(_study(slow, slow, quiet)).set_index("warmup")
    assert effect["first_p_value"].tolist() == pytest.approx([1 / 24, 1 / 24, 24 / 24])
    assert effect["first_slower"].tolist() == [True, True, False]
    assert effect.loc[0, "first_over_rest_median"] == pytest.approx(0.4 / 0.102)
    assert effect.loc[0, "mean_with_first_over_without"] == pytest.approx(
        (0.4 + sum(flat)) / 24 / (sum(flat) / 23)
    )
    assert first_step_p_value([0.2, 0.2, 0.1, 0.1]) == 0.5  # a tie counts against the claim
    # Not tested once an earlier setting was not found slower, however slow its first step.
    effect = warmup_effect(_study(quiet, slow, slow)).set_index("warmup")
    assert effect["first_slower"].tolist() == [False, None, None]
    # A setting whose fresh process failed (the sweep's error row: no samples, whether NaN,
    # None or an empty list) is a row of 0 steps, not tested, and no later one is tested.
    for missing in (float("nan"), None, "[]"):
        failed = _study(slow, slow, slow).astype({"samples_s": object})
        failed.loc[1, "samples_s"] = missing
        effect = warmup_effect(failed)
        assert effect["steps"].tolist() == [24, 0, 24]
        assert effect["first_slower"].tolist() == [True, None, None]


def test_a_failed_run_without_warmup_claims_nothing():
    """Without its setting of no warm-up (failed, or not in the study) the finding claims no
    one-off cost, whatever the later settings' first steps did, and says why."""
    from perflab.lessons.nb01_benchmarking.warmup import (
        warmup_conclusion,
        warmup_effect,
        warmup_finding,
    )

    flat = [0.1 + 0.001 * (i % 5) for i in range(23)]
    slow = [0.4, *flat]
    failed = _study(slow, slow, slow).astype({"samples_s": object})
    failed.loc[0, "samples_s"] = float("nan")
    effect = warmup_effect(failed)
    assert warmup_finding(effect).verdict == "inconclusive"
    assert warmup_conclusion(effect).startswith("Without warm-up the run failed")
    later = warmup_effect(_study(slow, slow, warmups=(1, 2)))
    assert warmup_finding(later).verdict == "inconclusive"
    assert "no setting without warm-up" in warmup_conclusion(later)
    ran = warmup_effect(_study(slow, slow, slow))
    assert warmup_finding(ran).verdict == "slower"  # the same steps, run: found


def test_warmup_conclusion_says_what_the_exact_test_shows():
    from perflab.lessons.nb01_benchmarking.warmup import (
        warmup_conclusion,
        warmup_effect,
        warmup_finding,
    )

    flat = [0.1 + 0.001 * (i % 5) for i in range(23)]
    slow, quiet = [0.4, *flat], [0.1, *flat]
    effect = warmup_effect(_study(slow, quiet, quiet))
    text = warmup_conclusion(effect)
    assert text.startswith(
        "Without warm-up the first timed step took 3.92x the median of the 23 steps after it "
        "and was the slowest of 24 (with no one-off cost: probability 4%): it paid a one-off "
        "cost the later steps did not. After 1 warm-up step the first timed step took 0.98x"
    )
    assert "not told from the steps after it" in text and "After 2" not in text
    assert "makes the setting's mean 1.12x" in text
    assert warmup_finding(effect).verdict == "slower"
    # Six steps: even the slowest first step cannot be told at 95%, and nothing is claimed.
    few = warmup_effect(_study(slow[:6], quiet[:6], quiet[:6]))
    text = warmup_conclusion(few)
    assert "6 steps cannot show a slower first step at 95% (at least 20 are needed)" in text
    assert "paid" not in text and warmup_finding(few).verdict == "inconclusive"


def test_the_warmup_finding_passes_check_results(tmp_path):
    from perflab.lessons.nb01_benchmarking.warmup import warmup_effect, warmup_finding
    from perflab.measure.conclusions import conclude_all
    from perflab.tools.check_results import check_results

    flat = [0.1 + 0.001 * (i % 5) for i in range(23)]
    study = _study([0.4, *flat], warmups=(0,))
    (sentence,) = conclude_all(tmp_path, [warmup_finding(warmup_effect(study))])
    assert "paid a one-off cost" in sentence
    assert check_results(tmp_path, library=None).empty


def test_configurations_compared_interleaved_are_named_by_their_difference():
    from dataclasses import replace

    from perflab.bench.steps import compare_configs

    a = BenchConfig(
        preset="cpu-tiny", context_length=8, mode="train-step", batch_size=1, device="cpu"
    )
    result = compare_configs(
        a, replace(a, dtype="bfloat16"), torch.device("cpu"), rounds=3, warmup=1
    )
    assert (result.name_a, result.name_b) == ("float32", "bfloat16")
    assert len(result.times_a) == len(result.times_b) == 3
    # 3 rounds give [min, max] at 75%: too few for any verdict at 95%.
    assert result.confidence == 0.75 and result.verdict == "inconclusive"


def _clock(phases_per_call):
    clock = PhaseClock(torch.device("cpu"))
    clock.steps = [dict(phases) for phases in phases_per_call]
    return clock


def test_phases_are_paired_by_round_from_the_faster_call_of_each():
    from perflab.bench.steps import phase_comparisons
    from perflab.measure.comparison import paired_comparison

    warm = {"forward": 9.0, "backward": 9.0}
    a_calls = [warm] + [{"forward": 1.0, "backward": 2.0}, {"forward": 1.5, "backward": 2.5}] * 3
    b_calls = [warm] + [{"forward": 0.6, "backward": 2.2}, {"forward": 0.5, "backward": 1.9}] * 3
    step = paired_comparison([3.0] * 3, [2.4] * 3, names=("float32", "bfloat16"))
    step = step.with_labels(preset="small")
    phases = {
        c.labels["phase"]: c for c in phase_comparisons(step, _clock(a_calls), _clock(b_calls), 1)
    }
    assert list(phases) == ["forward", "backward"]  # no optimizer phase was recorded
    assert phases["forward"].labels == {"preset": "small", "phase": "forward"}
    # a's faster call is the first (3.0 < 4.0), b's the second (2.4 < 2.8)
    assert phases["forward"].times_a == (1.0,) * 3 and phases["forward"].times_b == (0.5,) * 3
    assert phases["backward"].ratio == pytest.approx(1.9 / 2.0)
    assert phases["forward"].name_b == "bfloat16"
    with pytest.raises(ValueError, match="a clock holds 7 steps; 2 warm-up and 2 x 3 rounds"):
        phase_comparisons(step, _clock(a_calls), _clock(b_calls), warmup=2)


def test_a_compared_steps_phases_come_from_its_own_rounds():
    from dataclasses import replace

    from perflab.bench.steps import compare_configs, phase_comparisons

    a = BenchConfig(
        preset="cpu-tiny", context_length=8, mode="train-step", batch_size=1, device="cpu"
    )
    clocks = (PhaseClock(torch.device("cpu")), PhaseClock(torch.device("cpu")))
    step = compare_configs(
        a, replace(a, dtype="bfloat16"), torch.device("cpu"), rounds=3, warmup=1, clocks=clocks
    )
    phases = {c.labels["phase"]: c for c in phase_comparisons(step, *clocks, warmup=1)}
    assert list(phases) == ["forward", "backward", "optimizer"]
    for phase in phases.values():
        assert len(phase.times_a) == 3 and all(t > 0 for t in phase.times_a + phase.times_b)
    # The kept call's phases lie inside its timed call, and it is the call whose phases sum
    # least: they cannot add up to more than the faster call's time the comparison kept.
    for r in range(3):
        assert sum(phases[p].times_a[r] for p in phases) <= step.times_a[r]
        assert sum(phases[p].times_b[r] for p in phases) <= step.times_b[r]


def test_context_length_must_be_an_integer():
    with pytest.raises(ValueError, match="context_length must be an integer >= 1, got 1.5"):
        BenchConfig("cpu-tiny", context_length=1.5, mode="forward")
    with pytest.raises(ValueError, match="context_length must be an integer >= 1, got 0"):
        BenchConfig("cpu-tiny", context_length=0, mode="forward")


def test_the_model_shape_comes_from_the_preset_unless_given():
    config = BenchConfig(
        "cpu-tiny", context_length=1024, mode="forward", d_model=192, num_heads=3, vocab_size=512
    )
    shape = config.model_config()
    tiny = PRESETS["cpu-tiny"]
    assert (shape.d_model, shape.num_heads, shape.vocab_size) == (192, 3, 512)
    assert (shape.d_ff, shape.num_layers) == (tiny.d_ff, tiny.num_layers)
    assert shape.context_length == 1024  # sized for the context
    assert config.d_ff == tiny.d_ff  # filled in: a configuration always names its shape
    assert BenchConfig("cpu-tiny", context_length=8, mode="forward").d_model == tiny.d_model


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"d_model": 100, "num_heads": 3}, r"d_model \(100\) must be divisible by num_heads \(3\)"),
        ({"vocab_size": 0}, "vocab_size must be an integer >= 1, got 0"),
        ({"head": "chunky"}, "unknown head 'chunky'; valid: plain, fused"),
        ({"attention": "fast"}, "unknown attention 'fast'; valid: naive, flash, sdpa"),
        ({"optimizer": "sgd"}, "unknown optimizer 'sgd'; valid: for-loop, foreach, fused"),
        ({"checkpoint_group": 0}, "checkpoint_group must be an integer >= 1, got 0"),
        ({"compile": "yes"}, "compile must be True or False, got 'yes'"),
    ],
)
def test_shape_and_recipe_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        BenchConfig(**{"preset": "cpu-tiny", "context_length": 8, "mode": "forward", **changes})


def test_command_line_parses_back_to_the_same_configuration():
    from perflab.tools.cli import build_parser

    config = BenchConfig(
        "cpu-tiny",
        context_length=24,
        mode="train-step",
        batch_size=3,
        d_model=96,
        num_heads=3,
        attention="sdpa",
        head="fused",
        optimizer="foreach",
        compile=True,
        checkpoint_group=2,
    )
    args = build_parser().parse_args(["bench", *config.command_line()])
    assert BenchConfig.from_arguments(args) == config
    plain = BenchConfig("cpu-tiny", context_length=24, mode="forward")
    assert "--compile" not in plain.command_line()
    assert "--num-heads" in config.command_line() and "--d-ff" not in config.command_line()
    assert "--checkpoint-group" not in plain.command_line()  # None: not given


def test_a_recipe_round_trips_through_a_configuration():
    from dataclasses import replace

    from perflab.bench.recipe import Recipe

    recipe = Recipe(
        "fused AdamW",
        dtype="bfloat16",
        head="fused",
        attention="flash",
        optimizer="fused",
        compiled=True,
        checkpoint_group=1,
    )
    config = BenchConfig.from_recipe(recipe, "cpu-tiny", 32, "train-step", batch_size=2)
    assert replace(config.recipe, name=recipe.name) == recipe and config.batch_size == 2


def test_the_recipe_flags_reach_the_model_the_optimizer_and_the_loss():
    from perflab.bench.recipe import make_loss, make_optimizer, prepare_model
    from perflab.implementations.attention.flash_torch import flash_attention_torch
    from perflab.implementations.model import cross_entropy

    config = BenchConfig(
        "cpu-tiny",
        context_length=16,
        mode="train-step",
        attention="flash",
        head="fused",
        optimizer="foreach",
        checkpoint_group=1,
    )
    recipe = config.recipe
    torch.manual_seed(0)
    model = TransformerLM(config.model_config()).double()
    prepare_model(model, recipe, torch.device("cpu"))
    assert model.blocks[0].attn.attention_fn is flash_attention_torch
    assert model.checkpointing == ("single", 1)
    assert make_optimizer(model, recipe).defaults["foreach"] is True
    inputs, targets = random_batch(model.config.vocab_size, 2, 16, torch.device("cpu"))
    fused = make_loss(model, recipe, torch.device("cpu"))(inputs, targets)
    assert fused.item() == pytest.approx(cross_entropy(model(inputs), targets).item(), rel=1e-12)


def test_run_benchmark_counts_the_given_shape():
    config = BenchConfig(
        "cpu-tiny",
        context_length=8,
        mode="forward",
        batch_size=1,
        warmup=0,
        steps=1,
        device="cpu",
        num_layers=1,
        vocab_size=300,
    )
    row, _ = run_benchmark(config)
    shape = config.model_config()
    assert (row["num_layers"], row["vocab_size"]) == (1, 300)
    assert row["num_parameters"] == shape.num_parameters()
    assert row["flops_per_step"] == shape.forward_flops(1, 8)


def test_rows_of_an_older_sweep_file_get_the_fields_added_since():
    old = {
        "preset": "cpu-small",
        "context_length": "8",
        "mode": "forward",
        "batch_size": "4",
        "warmup": "5",
        "steps": "10",
        "dtype": "float32",
        "device": "cpu",
    }
    filled = BenchConfig.filled_key(old)
    small = PRESETS["cpu-small"]
    assert (filled["d_model"], filled["vocab_size"]) == (small.d_model, small.vocab_size)
    assert (filled["attention"], filled["head"], filled["compile"]) == ("naive", "plain", False)
    assert filled["checkpoint_group"] is None
    as_written = {k: "" if v is None else str(v) for k, v in filled.items()}  # as the CSV holds
    assert BenchConfig.filled_key({**old, **as_written}) == {"checkpoint_group": None, "model": ""}
    assert BenchConfig.filled_key({**old, "preset": "renamed-since"}) == {}


@pytest.fixture
def course_model(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent / "fixtures"))
    return "course_model:CourseShapedLM"


def test_your_model_class_is_timed_in_the_presets_shape(course_model):
    config = BenchConfig(
        "cpu-tiny",
        context_length=8,
        mode="train-step",
        batch_size=1,
        warmup=0,
        steps=1,
        device="cpu",
        model=course_model,
    )
    row, timing = run_benchmark(config)
    assert row["model"] == course_model and len(timing.samples) == 1
    assert row["num_parameters"] == config.model_config().num_parameters()
    smaller = BenchConfig(
        "cpu-tiny",
        context_length=8,
        mode="forward",
        warmup=0,
        steps=1,
        device="cpu",
        model="course_model:WithoutLMHead",
    )
    shape = smaller.model_config()
    counted = run_benchmark(smaller)[0]["num_parameters"]
    assert counted == shape.num_parameters() - shape.d_model * shape.vocab_size


def test_your_model_class_on_the_command_line(course_model):
    from perflab.tools.cli import build_parser

    config = BenchConfig("cpu-tiny", context_length=8, mode="forward", model=course_model)
    assert config.command_line()[-2:] == ["--model", course_model]
    args = build_parser().parse_args(["bench", *config.command_line()])
    assert BenchConfig.from_arguments(args) == config
    assert "--model" not in BenchConfig("cpu-tiny", context_length=8, mode="forward").command_line()


@pytest.mark.parametrize(
    "model, changes, message",
    [
        ("course_model", {}, "model must be 'package.module:Class', got 'course_model'"),
        ("no_such_module_here:LM", {}, "cannot import 'no_such_module_here' for model"),
        ("course_model:Missing", {}, "course_model has no nn.Module class 'Missing'"),
        ("course_model:NOT_A_MODULE", {}, "has no nn.Module class 'NOT_A_MODULE'"),
        (
            "course_model:WrongArguments",
            {},
            r"cannot build course_model:WrongArguments with the "
            r"course's arguments \(vocab_size, context_length",
        ),
        (
            "course_model:CourseShapedLM",
            {"attention": "sdpa"},
            r"timed as it is: attention='sdpa' apply to perflab's TransformerLM only",
        ),
    ],
)
def test_your_model_class_errors_are_one_line(course_model, model, changes, message):
    with pytest.raises(ValueError, match=message) as raised:
        config = BenchConfig("cpu-tiny", context_length=8, mode="forward", model=model, **changes)
        run_benchmark(config)  # the constructor's arguments are checked when it is built
    assert "\n" not in str(raised.value)
