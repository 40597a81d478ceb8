"""The one table of GPU datasheet figures (perflab.measure.hardware), held against its own
sources."""

import re

import pytest

from perflab.measure.hardware import GPUS, HANDOUT_B200, datasheet_for, gpu


@pytest.mark.parametrize("spec", GPUS.values(), ids=lambda spec: spec.name)
def test_each_dense_peak_is_half_the_sparse_figure_its_source_quotes(spec):
    """Datasheets print tensor-core peaks with 2:4 sparsity; training runs dense, at half."""
    found = re.search(
        r"([\d,.]+) (TFLOPS|PFLOPS) with sparsity( over (\d) GPUs| over (\d+))?", spec.source
    )
    assert found, spec.source
    value = float(found.group(1).replace(",", "")) * (1e12 if found.group(2) == "TFLOPS" else 1e15)
    gpus = int(found.group(4) or found.group(5) or 1)
    assert spec.bf16_flops == pytest.approx(value / gpus / 2)


@pytest.mark.parametrize("spec", GPUS.values(), ids=lambda spec: spec.name)
def test_nvlink_is_half_the_bidirectional_figure(spec):
    found = re.search(r"NVLink(?: \d)? ([\d.,]+) (GB|TB)/s", spec.source)
    assert found, spec.source
    both = float(found.group(1).replace(",", "")) * (1e9 if found.group(2) == "GB" else 1e12)
    assert spec.nvlink_bytes_per_s == pytest.approx(both / 2)


def test_device_names_find_their_family():
    assert datasheet_for("NVIDIA H100 80GB HBM3").name == "H100 SXM5 80GB"
    assert datasheet_for("NVIDIA H200").memory_bytes == 141e9
    assert datasheet_for("NVIDIA B200").name == "HGX B200"
    assert datasheet_for("NVIDIA GB200").bf16_flops == HANDOUT_B200.bf16_flops
    assert datasheet_for("cpu") is None and datasheet_for("NVIDIA GeForce RTX 4090") is None


def test_unknown_gpu_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown GPU 'V100'; valid: A100 SXM4 80GB"):
        gpu("V100")
