"""Compile one Triton kernel for a named GPU target, on any machine, and read what it uses.

Triton's CUDA backend lowers a ``@triton.jit`` function to PTX and, with the ``ptxas`` shipped
in the Triton wheel, to a cubin for a named architecture (``GPUTarget("cuda", 90, 32)`` for
sm_90): no GPU and no CUDA driver are needed. The result carries the shared memory the kernel
needs (Triton's metadata); ``cuobjdump`` (also in the wheel) reads registers and stack bytes
from the cubin, and spill stores and loads are counted in its SASS (``STL`` / ``LDL``: Triton
kernels keep no local arrays, so local-memory traffic is spilling).

The kernel must be a real ``JITFunction``: a process with ``TRITON_INTERPRET=1`` holds
interpreted kernels, which cannot be compiled (``perflab.attention.aot`` compiles in a child
process). Used by ``aot`` (every kernel, every target) and by ``flash_triton``'s autotuner,
which drops the configurations that need more shared memory than the GPU has.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import torch

#: Triton's names of tensor element types (the workbook's kernels take the first three; a
#: student's may take any, ``perflab.adapters.kernel_compile``).
TRITON_DTYPES = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
    torch.int8: "i8", torch.int16: "i16", torch.int32: "i32", torch.int64: "i64",
    torch.uint8: "u8", torch.bool: "i1",
}  # fmt: skip


@dataclass(frozen=True)
class Target:
    """A GPU architecture to compile for, with its per-block shared memory limit (the opt-in
    maximum, CUDA programming guide, table "technical specifications per compute capability")."""

    name: str  # "sm_90"
    arch: int  # compute capability as Triton writes it: 90
    example: str  # a GPU of that architecture
    max_shared_bytes: int

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.arch, 32)


TARGETS = {
    "sm_80": Target("sm_80", 80, "A100", 163 * 1024),
    "sm_90": Target("sm_90", 90, "H100", 227 * 1024),
    "sm_100": Target("sm_100", 100, "B200", 227 * 1024),
}


def kernel_source(kernel) -> str:
    """The Python source of a Triton kernel, through its ``triton.autotune`` and ``triton.jit``
    wrappers (compiled or interpreted), for showing next to the prose that explains it."""
    function = kernel
    while hasattr(function, "fn"):
        function = function.fn
    if not callable(function):
        raise ValueError(f"not a Triton kernel or a function: {kernel!r}")
    return inspect.getsource(function)


def get_target(name: str) -> Target:
    """``TARGETS[name]``, or one clear error naming the valid targets."""
    if name not in TARGETS:
        raise ValueError(f"unknown GPU target {name!r}; valid: {', '.join(TARGETS)}")
    return TARGETS[name]


def compile_kernel(kernel, types: dict[str, str], constexprs: dict, *, num_warps: int,
                   num_stages: int, target: Target, divisible: tuple[str, ...] = ()):  # fmt: skip
    """``triton.compile`` of ``kernel`` for ``target``.

    ``types`` gives every runtime argument's Triton type ("*fp16", "i32", "fp32"),
    ``constexprs`` every compile-time one; ``divisible`` names the arguments known to be
    multiples of 16 (aligned pointers, strides), as Triton's launcher specializes them.
    """
    from triton.compiler import ASTSource

    names = kernel.arg_names
    missing = [n for n in names if n not in types and n not in constexprs]
    if missing:
        raise ValueError(f"{kernel.__name__}: no type or value for arguments {missing}")
    signature = {n: "constexpr" if n in constexprs else types[n] for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in divisible}
    source = ASTSource(kernel, signature, constexprs=dict(constexprs), attrs=attrs)
    import triton

    return triton.compile(source, target=target.gpu_target(),
                          options={"num_warps": num_warps, "num_stages": num_stages})  # fmt: skip


def _cuobjdump() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def resource_usage(compiled) -> dict:
    """Registers per thread, stack bytes per thread, spill stores and loads (SASS instructions)
    and shared memory bytes per block of a compiled kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([_cuobjdump(), "--dump-resource-usage", cubin.name],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        sass = subprocess.run([_cuobjdump(), "--dump-sass", cubin.name],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    if found is None:
        raise RuntimeError(f"cuobjdump printed no resource usage for {compiled.name}:\n{usage}")
    return {
        "registers": int(found.group(1)),
        "stack_bytes": int(found.group(2)),
        "spill_stores": len(re.findall(r"\bSTL(?:\.\w+)*\s", sass)),
        "spill_loads": len(re.findall(r"\bLDL(?:\.\w+)*\s", sass)),
        "shared_bytes": int(compiled.metadata.shared),
    }
