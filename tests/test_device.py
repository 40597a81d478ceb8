import pytest
import torch

from perflab.measure.crosscheck import compare_timers, matmul_size_for
from perflab.measure.device import describe, last_level_cache_bytes, parse_dtype, resolve_device
from perflab.measure.peak import measure_peak_matmul

CPU = torch.device("cpu")


def test_auto_device_is_cuda_only_when_present():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA is not available; valid: auto, cpu"):
        resolve_device("cuda")


def test_unknown_device_and_dtype():
    with pytest.raises(ValueError, match="valid: auto, cpu, cuda"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="valid: float32, bfloat16, float16"):
        parse_dtype("int4")
    assert parse_dtype("bf16") is torch.bfloat16 and parse_dtype(torch.float16) is torch.float16


def test_describe_names_device_and_versions():
    info = describe("cpu")
    assert info["device"] == "cpu" and info["torch"] == torch.__version__
    assert info["device_name"] and info["cpu_threads"] >= 1


def test_peak_matmul_reports_the_fastest_size():
    peak = measure_peak_matmul(CPU, sizes=(64, 128), warmup=1, steps=3)
    assert peak.size in (64, 128) and peak.dtype == "float32"
    assert peak.flops_per_s == pytest.approx(2 * peak.size**3 / peak.best_s)  # a peak: the best
    assert peak.median_flops_per_s <= peak.flops_per_s and peak.steps == 3
    with pytest.raises(ValueError, match="positive ints"):
        measure_peak_matmul(CPU, sizes=())


def test_matmul_size_for_a_target_time():
    # 2 n^3 = 0.01 s * 2e11 FLOP/s -> n^3 = 1e9 -> n = 1000
    assert matmul_size_for(0.01, 2e11) == 1000


def test_compare_timers_table():
    (theirs,) = compare_timers(192, CPU, warmup=1, steps=5, rounds=2)  # no do_bench on a CPU
    assert theirs.name_a == "perflab.bench.time_fn" and theirs.labels == {"n": 192}
    assert theirs.name_b == "torch.utils.benchmark.Timer.blocked_autorange"
    assert theirs.rounds == 2 and theirs.confidence == 0.5
    # Both timed the same 192 x 192 matmul: a timer of another size (8x the work at twice n)
    # or of nothing would be far outside this; per-call overhead is well inside it.
    assert 0.25 < theirs.ratio < 4


def test_a_gpu_that_torch_cannot_use_is_said_once_with_the_fix(tmp_path, monkeypatch):
    """nvidia-smi lists a GPU, torch sees none (a driver too old for the CUDA 13 wheels, or a
    CPU build): "auto" still resolves to the CPU, with one warning naming the fix."""
    import perflab.measure.device as device

    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0000)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device.gpu_hidden_from_torch.cache_clear()
    device._warn_once_if_gpu_hidden.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="nvidia-smi lists 1 GPU.*whl/cu126"):
            assert resolve_device("auto") == torch.device("cpu")
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert resolve_device("auto") == torch.device("cpu")  # said once only
    finally:
        device.gpu_hidden_from_torch.cache_clear()
        device._warn_once_if_gpu_hidden.cache_clear()


def test_mps_where_torch_cannot_use_it_is_a_clear_error():
    if torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    with pytest.raises(ValueError, match="device 'mps' requested but this torch cannot use it"):
        resolve_device("mps")


def test_gpu_memory_is_read_from_the_device_or_the_reference_h100(monkeypatch):
    from types import SimpleNamespace

    from perflab.measure.device import REFERENCE_GPU_MEMORY_GIB, gpu_memory_gib

    assert gpu_memory_gib("auto", torch.device("cpu")) == REFERENCE_GPU_MEMORY_GIB
    assert gpu_memory_gib(40, torch.device("cpu")) == 40.0
    monkeypatch.setattr(
        torch.cuda,
        "get_device_properties",
        lambda device: SimpleNamespace(total_memory=141 * 2**30),
    )
    assert gpu_memory_gib("auto", torch.device("cuda", 0)) == 141.0  # an H200, read
    with pytest.raises(ValueError, match="gpu_memory_gib must be 'auto' or a positive number"):
        gpu_memory_gib("80GB", torch.device("cpu"))


def _sysfs_caches(folder, caches):
    for index, (level, kind, size) in enumerate(caches):
        entry = folder / f"index{index}"
        entry.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size)):
            (entry / name).write_text(f"{value}\n")
    return str(folder)


def test_the_last_level_cache_is_the_largest_level_that_holds_data(tmp_path):
    caches = [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K")]
    full = _sysfs_caches(tmp_path / "full", [*caches, (3, "Unified", "32768K")])
    assert last_level_cache_bytes("cpu", full) == 32 * 2**20
    (tmp_path / "full" / "index3" / "size").write_text("2M\n")
    assert last_level_cache_bytes("cpu", full) == 2 * 2**20
    assert last_level_cache_bytes("cpu", str(tmp_path / "missing")) is None
    # An instruction cache larger than the data cache at the last level holds no data.
    split = _sysfs_caches(tmp_path / "split", [(1, "Data", "32K"), (1, "Instruction", "64K")])
    assert last_level_cache_bytes("cpu", split) == 32 * 2**10


def test_a_gpus_last_level_cache_is_its_l2(monkeypatch):
    """The CUDA path, with the device's properties faked (an H100 reports 50 MiB of L2)."""
    props = type("Properties", (), {"L2_cache_size": 50 * 2**20})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    assert last_level_cache_bytes("cuda:0") == 50 * 2**20
