import pandas as pd
import pytest
import torch

from perflab.bench import BenchConfig, make_step, random_batch, run_benchmark
from perflab.bench.tables import phase_breakdown, throughput
from perflab.bench.warmup import warmup_samples
from perflab.model import PRESETS, TransformerLM


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"preset": "tiny"}, "unknown preset 'tiny'; valid: cpu-tiny"),
        ({"mode": "backward"}, "valid: forward, forward-backward, train-step"),
        ({"context_length": 513}, "valid: 1 to 512"),
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
            }
            for m, s in means.items()
        ]
        + [{"preset": "q", "mode": "forward", "status": "oom"}]
    )


def test_phase_breakdown_subtracts_modes():
    table = phase_breakdown(_results(1.0, 3.0, 3.5))
    row = table.set_index("preset").loc["p"]
    assert (row.forward_s, row.backward_s, row.optimizer_s, row.step_s) == (1.0, 2.0, 0.5, 3.5)
    assert "q" not in set(table["preset"])


def test_throughput_mfu_against_peak():
    table = throughput(_results(1.0, 3.0, 4.0), peak_flops_per_s=2e12)
    assert table.set_index("mode").loc["forward", "mfu"] == pytest.approx(0.5)
    assert table.set_index("mode").loc["train-step", "mfu"] == pytest.approx(0.125)
    with pytest.raises(ValueError, match="must be positive"):
        throughput(_results(1, 2, 3), 0)


def test_warmup_samples_long_form():
    study = pd.DataFrame({"warmup": [0, 2], "samples_s": [[0.3, 0.1], [0.1, 0.1]]})
    long = warmup_samples(study)
    assert long["step"].tolist() == [0, 1, 0, 1]
    assert long["seconds"].tolist() == [0.3, 0.1, 0.1, 0.1]


def test_warmup_effect_ratios():
    from perflab.bench.warmup import warmup_effect

    study = pd.DataFrame(
        {"warmup": [0, 5], "samples_s": ["[0.4, 0.1, 0.1, 0.2]", "[0.1, 0.1, 0.1, 0.2]"]}
    )
    effect = warmup_effect(study).set_index("warmup")
    assert effect.loc[0, "first_over_warm_median"] == pytest.approx(4.0)
    assert effect.loc[0, "mean_over_warm"] == pytest.approx(0.8 / 0.5)
    assert effect.loc[0, "median_over_warm"] == pytest.approx(0.15 / 0.1)
    assert effect.loc[5].tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0])


def test_dtype_speedup():
    from perflab.bench.tables import dtype_speedup

    rows = pd.DataFrame(
        [{"preset": "p", "mode": "train-step", "status": "ok", "dtype": d, "median_s": s}
         for d, s in (("float32", 2.0), ("bfloat16", 0.5))]
    )  # fmt: skip
    table = dtype_speedup(rows)
    assert table.loc[0, "speedup_bfloat16"] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="no float16 rows"):
        dtype_speedup(rows, baseline="float16")


def test_context_length_must_be_an_integer():
    with pytest.raises(ValueError, match="context_length must be an integer >= 1, got 1.5"):
        BenchConfig("cpu-tiny", context_length=1.5, mode="forward")
    with pytest.raises(ValueError, match="context_length must be an integer >= 1, got 0"):
        BenchConfig("cpu-tiny", context_length=0, mode="forward")
