"""float16 loss scaling (perflab.lessons.nb03_mixed_precision.loss_scaling): unscaled float16
gradients flush to zero where float32's do not and a loss scale keeps them, bfloat16 flushes none;
GradScaler skips the steps whose scaled gradients overflow, halving the scale, and those steps leave
the weights alone."""

import pytest

from perflab.implementations.model import ModelConfig, get_preset
from perflab.lessons.nb03_mixed_precision.loss_scaling import (
    byte_vocabulary,
    gradient_underflow,
    train_with_scaler,
)

SMALL = ModelConfig(
    "loss-scaling-test",
    d_model=32,
    d_ff=64,
    num_layers=1,
    num_heads=2,
    vocab_size=64,
    context_length=64,
)


def test_float16_flushes_gradients_that_a_loss_scale_keeps():
    table = gradient_underflow(byte_vocabulary(get_preset("cpu-tiny")), 8, 64)
    table = table.set_index(["dtype", "loss_scale"])
    unscaled, scaled = table.loc[("float16", 1.0)], table.loc[("float16", 2.0**16)]
    assert unscaled["flushed"] > 0 and scaled["flushed"] < unscaled["flushed"]
    assert scaled["max_relative_error"] < unscaled["max_relative_error"]
    assert (table.loc["bfloat16", "flushed"] == 0).all()
    assert (table["nonfinite"] == 0).all() and (table["tokens"] == 8 * 64).all()


def test_the_unscaled_float16_error_grows_with_the_tokens_a_mean_divides_by():
    few, many = (
        gradient_underflow(SMALL, batch, 64).set_index(["dtype", "loss_scale"]) for batch in (1, 64)
    )
    error = "max_relative_error"
    assert many.loc[("float16", 1.0), error] > 2 * few.loc[("float16", 1.0), error]
    assert many.loc[("float16", 2.0**16), error] < many.loc[("float16", 1.0), error] / 2


def test_the_scaler_skips_overflowing_steps_and_halves_its_scale():
    steps = train_with_scaler(SMALL, 2, 16, 10, init_scale=2.0**24)
    skipped = steps[steps["skipped"]]
    assert len(skipped) >= 1 and skipped["step"].tolist() == list(range(len(skipped)))
    assert not skipped["parameters_moved"].any()  # a skipped step leaves the weights alone
    after = steps[~steps["skipped"]]
    assert len(after) >= 1 and after["parameters_moved"].all()
    # each skip halves the scale; once a step goes through it stays (growth after 2000)
    assert steps["scale"].iloc[len(skipped)] == 2.0**24 / 2 ** len(skipped)
    assert not train_with_scaler(SMALL, 2, 16, 2, init_scale=1.0)["skipped"].any()


def test_bad_sizes_are_one_clear_error():
    with pytest.raises(ValueError, match="need batch_size >= 1"):
        gradient_underflow(SMALL, 0, 8)
    with pytest.raises(ValueError, match="positive scales"):
        gradient_underflow(SMALL, 2, 8, scales=(0.0,))
    with pytest.raises(ValueError, match="steps must be >= 1"):
        train_with_scaler(SMALL, 2, 8, 0)
