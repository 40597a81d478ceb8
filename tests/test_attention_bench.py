"""The FlashAttention speed table of notebook 06 (perflab.bench.attention_timing.flash_speed): each
implementation's device and host time per call, and each against SDPA interleaved; checked
here on small CPU shapes (its GPU rows come from a lease, .ci/gpu-check)."""

import time

import pytest
import torch

from perflab.bench.attention_timing import attention_flops, flash_speed, host_ms
from perflab.measure.comparison import comparison_frame

CPU = torch.device("cpu")


def test_host_time_is_per_call_in_milliseconds():
    """Planted: a call that sleeps 3 ms on the host takes at least 3 ms of host time, and not
    30 times that (each call counted once)."""
    assert 3 <= host_ms(lambda: time.sleep(0.003), CPU, calls=5) < 90


def test_flash_speed_rows_and_the_comparisons_against_sdpa():
    timed, versus = flash_speed(
        ["sdpa", "flash_torch", "naive"],
        heads=[2],
        seq_lens=[32, 64],
        head_dim=16,
        dtype="float32",
        device=CPU,
        rounds=2,
        max_seq_len={"flash_torch": 32},
    )
    assert sorted(zip(timed["implementation"], timed["seq_len"], strict=True)) == [
        ("flash_torch", 32),
        ("naive", 32),
        ("naive", 64),
        ("sdpa", 32),
        ("sdpa", 64),
    ]
    flops = attention_flops(2, 64, 64, 16, True)["end_to_end"]
    row = timed[(timed["implementation"] == "naive") & (timed["seq_len"] == 64)].iloc[0]
    assert row["tflops"] == pytest.approx(flops / row["device_ms"] / 1e9)
    assert set(timed["method"]) == {"perflab time_fn"}
    versus = comparison_frame(versus)
    assert sorted(zip(versus["b"], versus["seq_len"], strict=True)) == [
        ("flash_torch", 32),
        ("naive", 32),
        ("naive", 64),
    ]
    assert set(versus["a"]) == {"sdpa"} and (versus["rounds"] == 2).all()


def test_your_implementations_take_the_limit_of_perflabs_of_their_kind():
    """A student's implementations run up to perflab's limit of the same kind; with none there
    (the full and lease sizes set none for flash_triton: an H200 lease met a KeyError here),
    they run at every length, and a limit of their own wins."""
    from perflab.bench.attention_timing import attention_configs

    def lengths(limits):
        configs = attention_configs(
            implementations=["flash_torch", "yours_pytorch", "yours_triton"], batch=1,
            head_dims=[16], seq_lens=[64, 128, 256], dtypes=["float32"], warmup=0, steps=1,
            device=CPU, max_seq_len=limits,
        )  # fmt: skip
        found = {}
        for config in configs:
            found.setdefault(config["implementation"], []).append(config["seq_len"])
        return found

    limited = lengths({"flash_torch": 128, "flash_triton": 64})
    assert limited == {"flash_torch": [64, 128], "yours_pytorch": [64, 128], "yours_triton": [64]}
    assert lengths({"flash_torch": 128})["yours_triton"] == [64, 128, 256]
    assert lengths({"flash_torch": 128, "yours_pytorch": 256})["yours_pytorch"] == [64, 128, 256]
    assert lengths(None)["yours_pytorch"] == [64, 128, 256]
    assert lengths({"flash_torch": 128, "yours_pytorch": None})["yours_pytorch"] == [64, 128, 256]


@pytest.mark.parametrize("limit", [0, -128, 1.5, "1024", True])
def test_a_length_limit_below_one_or_not_whole_is_one_clear_error(limit):
    """A limit of 0 used to run every length, as None does; now it names the implementation
    and what is valid, in both the grid and the comparison against SDPA."""
    from perflab.bench.attention_timing import attention_configs, flash_speed

    message = r"max_seq_len\['flash_torch'\] must be a whole number of tokens >= 1 or None"
    with pytest.raises(ValueError, match=message):
        attention_configs(
            implementations=["flash_torch"], batch=1, head_dims=[16], seq_lens=[64],
            dtypes=["float32"], warmup=0, steps=1, device=CPU, max_seq_len={"flash_torch": limit},
        )  # fmt: skip
    with pytest.raises(ValueError, match=message):
        flash_speed(["flash_torch"], heads=[1], seq_lens=[64], head_dim=16, dtype="float32",
                    device=CPU, rounds=2, max_seq_len={"flash_torch": limit})  # fmt: skip


def test_limits_not_given_as_a_mapping_are_one_clear_error():
    """``-p max_seq_len flash_torch=1024`` (not a literal) arrives as a string."""
    from perflab.bench.attention_timing import length_limits

    with pytest.raises(ValueError, match=r"max_seq_len must map implementation names to limits"):
        length_limits("flash_torch=1024")
    assert length_limits(None) == {}
    assert length_limits({"flash_torch": None, "naive": 4096}) == {
        "flash_torch": None,
        "naive": 4096,
    }
