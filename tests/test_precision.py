import numpy as np
import pytest
import torch

from perflab.lessons.nb03_mixed_precision.precision import (
    ToyModel,
    accumulation_experiment,
    dtype_audit,
    layernorm_sensitivity,
)


def _numpy_sum(accumulator, increment, steps=1000, value=0.01):
    """An independent reference: the same loop in NumPy scalars."""
    total = accumulator(0)
    for _ in range(steps):
        total = accumulator(total + increment(value))
    return float(total)


def test_accumulation_matches_numpy():
    table = accumulation_experiment().set_index(["accumulator", "increment", "added_as"])
    table = table["result"]
    assert table["float32", "float32", "as stored"] == pytest.approx(
        _numpy_sum(np.float32, np.float32)
    )
    assert table["float16", "float16", "as stored"] == _numpy_sum(np.float16, np.float16)
    assert _numpy_sum(np.float16, np.float16) == 9.953125
    implicit = table["float32", "float16", "as stored"]
    assert implicit == pytest.approx(_numpy_sum(np.float32, np.float16))
    # the handout's loops 3 and 4: promotion on += is the same float32 addition as .type()
    assert table["float32", "float16", ".type(float32)"] == implicit
    assert table["float16", "float32", "as stored"] == 9.953125
    assert abs(table["float32", "float32", "as stored"] - 10) < 1e-3 < abs(implicit - 10)


def _autocast_dtypes(model, x, dtype):
    """What autocast produces, module by module, computed directly (not through hooks)."""
    with torch.autocast("cpu", dtype=dtype):
        fc1 = model.fc1(x)
        ln = model.ln(model.relu(fc1))
        logits = model.fc2(ln)
    return {"output of fc1": fc1.dtype, "output of ln": ln.dtype, "logits": logits.dtype}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dtype_audit_reports_what_autocast_produced(dtype):
    torch.manual_seed(0)
    model, x, y = ToyModel(), torch.randn(4, 10), torch.randint(5, (4,))
    audit = dtype_audit(model, x, y, dtype, "cpu").set_index("tensor")["dtype"]
    for tensor, produced in _autocast_dtypes(model, x, dtype).items():
        assert audit[tensor] == str(produced).removeprefix("torch.")
    assert audit["loss"] == "float32"
    assert audit["parameter fc1.weight"] == audit["gradient of fc2.weight"] == "float32"
    assert len(audit) == 4 + 4 + 2 + 4  # parameters, module outputs, logits and loss, gradients


def test_dtype_audit_bad_arguments():
    model, x, y = ToyModel(), torch.randn(4, 10), torch.randint(5, (4,))
    with pytest.raises(ValueError, match="unknown dtype 'half-ish'; valid: float32, bfloat16"):
        dtype_audit(model, x, y, "half-ish", "cpu")
    with pytest.raises(ValueError, match=r"no modules \['fc9'\] in the model; valid: , fc1"):
        dtype_audit(model, x, y, "bfloat16", "cpu", modules=("fc9",))


def test_layernorm_error_grows_with_the_mean_in_low_precision():
    table = layernorm_sensitivity(means=(0.0, 10.0, 100.0), std=0.1, width=256, rows=8)
    errors = table.pivot_table(index="input_mean", columns="dtype", values="max_abs_error")
    assert (errors["float32"] < 2e-3).all()
    for dtype in ("float16", "bfloat16"):
        assert errors[dtype].is_monotonic_increasing
        assert errors.loc[100.0, dtype] > 100 * errors.loc[100.0, "float32"]
    assert errors.loc[0.0, "float16"] < errors.loc[0.0, "bfloat16"]  # more mantissa bits
