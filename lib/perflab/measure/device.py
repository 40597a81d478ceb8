"""Which device to run on, how to wait for it, how fast it multiplies, and what it is.

``resolve_device("auto")`` is CUDA when present, else CPU, so every notebook runs on a
CPU-only machine. ``describe`` is the metadata saved with every result row.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from importlib import metadata

import torch

#: Names accepted wherever a dtype is given as a string.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
CPU = torch.device("cpu")
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """``"bfloat16"`` (or ``"bf16"``, or ``torch.bfloat16``) -> ``torch.bfloat16``."""
    if isinstance(name, torch.dtype):
        if name in DTYPES.values():
            return name
        raise ValueError(f"unsupported dtype {name}; valid: {', '.join(DTYPES)}")
    key = _DTYPE_ALIASES.get(name, name)
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid: {', '.join(DTYPES)}")
    return DTYPES[key]


def triton_available() -> bool:
    """Whether Triton can be imported here (it ships for Linux only), without importing it:
    importing decides interpreted or compiled for good (``implementations.attention.interpreter``
    decides it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


#: How to get a CUDA build of torch that an older driver can run (PyPI's Linux wheels of torch
#: 2.13 are built for CUDA 13, which needs a recent driver).
CUDA_WHEEL_FIX = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"


@functools.cache
def gpu_hidden_from_torch() -> str | None:
    """The warning to print when ``nvidia-smi`` lists a GPU that torch cannot use (a driver too
    old for this torch's CUDA, or a CPU build of torch), else None. Checked once per process."""
    if torch.cuda.is_available():
        return None
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = [line for line in listed.splitlines() if line.startswith("GPU ")]
    if not gpus:
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return (
        f"nvidia-smi lists {len(gpus)} GPU(s) ({gpus[0].split(' (')[0]}) but torch "
        f"{torch.__version__} ({build}) cannot use them, so perflab runs on the CPU. If the "
        f"driver is older than the build needs, install the CUDA 12.6 build: {CUDA_WHEEL_FIX}"
    )


@functools.cache
def _warn_once_if_gpu_hidden() -> None:
    hidden = gpu_hidden_from_torch()
    if hidden:
        import warnings

        warnings.warn(hidden, RuntimeWarning, stacklevel=3)


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> cuda if available else cpu (saying so, once, when nvidia-smi sees a GPU
    that torch cannot use); ``"cpu"``, ``"cuda"``, ``"cuda:N"`` and, where torch supports it,
    Apple's ``"mps"`` checked."""
    if isinstance(device, torch.device):
        device = str(device)
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        _warn_once_if_gpu_hidden()
        return torch.device("cpu")
    if device == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(
                "device 'mps' requested but this torch cannot use it; valid: auto, cpu"
            )
        return torch.device("mps")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise ValueError(
            f"unknown device {device!r}; valid: auto, cpu, cuda, cuda:N, mps"
        ) from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {device!r} requested but CUDA is not available; valid: auto, cpu"
            )
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r} does not exist; {torch.cuda.device_count()} CUDA devices"
            )
    elif resolved.type != "cpu":
        raise ValueError(f"unsupported device {device!r}; valid: auto, cpu, cuda, cuda:N, mps")
    return resolved


#: The memory a CPU run holds a GPU step against: an H100 80GB, as CUDA reports it (GiB).
REFERENCE_GPU_MEMORY_GIB = 79.2


def gpu_memory_gib(value: float | str, device: torch.device) -> float:
    """A notebook's ``gpu_memory_gib`` resolved: "auto" is the memory of the GPU it runs on
    (as CUDA reports it), or on a CPU ``REFERENCE_GPU_MEMORY_GIB``; a number is itself."""
    if value != "auto":
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"gpu_memory_gib must be 'auto' or a positive number, got {value!r}")
        return float(value)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory / 2**30
    return REFERENCE_GPU_MEMORY_GIB


def synchronize(device: torch.device | str) -> None:
    """Wait until every queued kernel on ``device`` has finished.

    CUDA launches are asynchronous, so a timer that does not synchronise measures launch
    overhead. CPU operators return when done, so there is nothing to wait for.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@functools.cache
def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: torch.device | str) -> str:
    """Human-readable name: the GPU model, or the CPU model for ``cpu``."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return _cpu_model_name()


_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def last_level_cache_bytes(
    device: torch.device | str, cache_dir: str = "/sys/devices/system/cpu/cpu0/cache"
) -> int | None:
    """Size of the device's last-level cache in bytes: a CUDA GPU's L2 (``torch.cuda``), or the
    largest level of a Linux CPU's caches that holds data (``cache_dir`` in sysfs); None where
    it cannot be read or for other devices. A step whose bytes fit in it can read them faster
    than a copy through memory, so a share of a memory roofline above 100% is no error."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size) or None
    if device.type != "cpu":
        return None
    levels = []
    try:
        for index in sorted(os.listdir(cache_dir)):
            path = os.path.join(cache_dir, index)
            if not index.startswith("index"):
                continue
            with open(os.path.join(path, "type")) as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(os.path.join(path, "level")) as f:
                level = int(f.read())
            with open(os.path.join(path, "size")) as f:
                size = f.read().strip()
            unit = size[-1] if size[-1] in "KMG" else ""
            levels.append((level, int(size.removesuffix(unit)) * _SIZE_UNITS[unit]))
    except (OSError, ValueError, IndexError):  # unreadable, or an empty or odd size
        return None
    return max(levels)[1] if levels else None


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def describe(device: torch.device | str) -> dict[str, str | int]:
    """Device and library versions, saved as metadata with every measurement."""
    device = torch.device(device)
    info: dict[str, str | int] = {
        "device": str(device),
        "device_name": device_name(device),
        "cpu_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count() or 0,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": _version("triton"),
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda or ""
        info["cudnn"] = str(torch.backends.cudnn.version())
        info["gpu_count"] = torch.cuda.device_count()
    return info
