"""Compile one Triton kernel for a named GPU target, on any machine, and read what it uses.

Triton's CUDA backend lowers a ``@triton.jit`` function to PTX and, with the ``ptxas`` shipped
in the Triton wheel, to a cubin for a named architecture (``GPUTarget("cuda", 90, 32)`` for
sm_90): no GPU and no CUDA driver are needed. The result carries the shared memory the kernel
needs (Triton's metadata); ``cuobjdump`` (also in the wheel) reads registers and stack bytes
from the cubin, and spill stores and loads are counted in its SASS (``STL`` / ``LDL``: Triton
kernels keep no local arrays, so local-memory traffic is spilling); what it prints is kept
beside Triton's cache (``disassembly``).

The kernel must be a real ``JITFunction``: a process with ``TRITON_INTERPRET=1`` holds
interpreted kernels, which cannot be compiled (``perflab.tools.kernels`` compiles in a child
process). Used by ``perflab.tools.kernels`` (every kernel, every target) and by
``flash_triton``'s autotuner, which drops the configurations that need more shared memory than
the GPU has.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import inspect
import json
import os
import re
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch

from perflab.measure.hardware import GPUS

#: Triton's names of tensor element types (the workbook's kernels take the first three; a
#: student's may take any, ``perflab.tools.adapters.kernel_compile``).
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


def _target(example: str, gpu: str) -> Target:
    spec = GPUS[gpu]
    return Target(f"sm_{spec.arch}", spec.arch, example, spec.max_shared_bytes)


#: One target per architecture of ``perflab.measure.hardware``'s table.
TARGETS = {
    target.name: target
    for target in (
        _target("A100", "A100 SXM4 80GB"),
        _target("H100", "H100 SXM5 80GB"),
        _target("B200", "HGX B200"),
    )
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


def compile_kernel(
    kernel,
    types: dict[str, str],
    constexprs: dict,
    *,
    num_warps: int,
    num_stages: int,
    target: Target,
    divisible: tuple[str, ...] = (),
):
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

    return triton.compile(
        source,
        target=target.gpu_target(),
        options={"num_warps": num_warps, "num_stages": num_stages},
    )


def _cuobjdump() -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


#: A loop of fewer SASS instructions is a wait (a spin on a barrier), not a loop of the kernel.
MIN_LOOP_INSTRUCTIONS = 16
_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", re.IGNORECASE)
_BRANCH = re.compile(r"(?:@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+(?:!?U?P\w+\s*,\s*)?0x([0-9a-f]+)")


def loop_instructions(sass: str) -> list[int]:
    """The SASS instructions in each loop of a kernel, in program order: a branch back to an
    earlier address closes a loop whose body runs from that address to the branch. Only
    outermost loops of at least ``MIN_LOOP_INSTRUCTIONS`` are counted (a barrier's spin-wait
    is a two-instruction loop; the waits that a pipelined loop jumps out to are not counted).
    A static count: what one trip around the loop issues, not a timing."""
    lines = [(int(address, 16), text.strip()) for address, text in _SASS_LINE.findall(sass)]
    # Code after the last unconditional EXIT is out of line (spin-waits, slow paths); its
    # branches back into the body return from it, they do not close loops.
    body_end = max((a for a, text in lines if text == "EXIT"), default=float("inf"))
    loops = []
    for address, instruction in lines:
        branch = _BRANCH.match(instruction)
        if branch and address < body_end:
            end, start = address, int(branch.group(1), 16)
            if start < end and (end - start) // 16 + 1 >= MIN_LOOP_INSTRUCTIONS:
                loops.append((start, end))
    outermost = [
        (a, b)
        for a, b in loops
        if not any(c <= a and b <= d and (c, d) != (a, b) for c, d in loops)
    ]
    return [(end - start) // 16 + 1 for start, end in sorted(set(outermost))]


def disassembly(cubin: bytes) -> tuple[str, str]:
    """``cuobjdump``'s resource usage and SASS of ``cubin``, kept beside Triton's cache (in
    ``perflab-sass/`` of ``TRITON_CACHE_DIR``) under a hash of the cubin and of the
    ``cuobjdump`` that read it: a disassembly is two ``cuobjdump`` runs per kernel, and
    ``perflab check`` and the compile tables read the same kernels again each time Triton's
    cache hands them back."""
    from triton import knobs

    tool = _cuobjdump()
    key = hashlib.sha256(_file_hash(tool).encode() + b"\0" + cubin).hexdigest()
    path = Path(knobs.cache.dir) / "perflab-sass" / f"{key}.json.gz"
    kept = _read_kept(path)
    if kept is not None:
        return kept
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        usage, sass = (
            subprocess.run(
                [tool, option, file.name], capture_output=True, text=True, check=True
            ).stdout
            for option in ("--dump-resource-usage", "--dump-sass")
        )
    _keep(path, [usage, sass])
    return usage, sass


@functools.cache
def _file_hash(path: str) -> str:
    """SHA-256 of a file's bytes, once per process (the tool does not change while it runs)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _read_kept(path: Path) -> tuple[str, str] | None:
    """The two texts kept at ``path``; None when not there, cut short or damaged."""
    try:
        texts = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, zlib.error, ValueError):
        return None
    if isinstance(texts, list) and len(texts) == 2 and all(isinstance(t, str) for t in texts):
        return texts[0], texts[1]
    return None


def _keep(path: Path, texts: list[str]) -> None:
    """Write ``texts`` to ``path`` whole or not at all (a temporary file renamed); a cache
    that cannot be written only costs the next run the disassembly."""
    part = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as part:
            part.write(gzip.compress(json.dumps(texts).encode()))
        os.chmod(part.name, 0o644)  # readable like Triton's own entries, not only by its writer
        os.replace(part.name, path)
    except OSError:
        if part is not None:
            Path(part.name).unlink(missing_ok=True)


def resource_usage(compiled) -> dict:
    """Registers per thread, stack bytes per thread, spill stores and loads (SASS instructions),
    shared memory bytes per block of a compiled kernel, and the SASS instructions of each of
    its loops (``loop_instructions``; the smallest is the unmasked stage of the workbook's
    FlashAttention kernels, whose masked stages are the same code plus masks)."""
    usage, sass = disassembly(compiled.asm["cubin"])
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    if found is None:
        raise RuntimeError(f"cuobjdump printed no resource usage for {compiled.name}:\n{usage}")
    return {
        "registers": int(found.group(1)),
        "stack_bytes": int(found.group(2)),
        "spill_stores": len(re.findall(r"\bSTL(?:\.\w+)*\s", sass)),
        "spill_loads": len(re.findall(r"\bLDL(?:\.\w+)*\s", sass)),
        "shared_bytes": int(compiled.metadata.shared),
        "loop_instructions": " ".join(map(str, loop_instructions(sass))),
        "main_loop_instructions": min(loop_instructions(sass), default=None),
    }


def argument_types(args: dict) -> tuple[dict[str, str], tuple[str, ...]]:
    """Triton types of a launch's runtime arguments (tensors as pointers, ints as i32 or i64,
    floats as fp32) and the names Triton's launcher marks divisible by 16."""
    types, divisible = {}, []
    for name, value in args.items():
        if isinstance(value, torch.Tensor):
            types[name] = "*" + TRITON_DTYPES[value.dtype]
            aligned = value.data_ptr() % 16 == 0
        elif isinstance(value, bool) or not isinstance(value, int | float):
            continue
        elif isinstance(value, int):
            types[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            aligned = value % 16 == 0
        else:
            types[name] = "fp32"
            aligned = False
        if aligned:
            divisible.append(name)
    return types, tuple(divisible)


def configs_that_fit(kernel, configs: list, args: dict, constexprs: dict, target: Target) -> list:
    """The autotune ``configs`` whose compiled ``kernel`` needs no more shared memory than
    ``target`` has, for a launch with runtime ``args`` and compile-time ``constexprs``.

    Each configuration is compiled here for the check (Triton caches the binary on disk, so a
    later run pays nothing; autotuning compiles its own, specialised launch as usual)."""
    types, divisible = argument_types(args)
    kept = []
    for config in configs:
        compiled = compile_kernel(
            kernel,
            types,
            {**constexprs, **config.kwargs},
            num_warps=config.num_warps,
            num_stages=config.num_stages,
            target=target,
            divisible=divisible,
        )
        if compiled.metadata.shared <= target.max_shared_bytes:
            kept.append(config)
    if not kept:
        raise ValueError(
            f"no autotune configuration of {kernel.__name__} fits in {target.max_shared_bytes} "
            f"bytes of shared memory on {target.name} (constexprs {constexprs})"
        )
    return kept
