"""Compile the Triton kernels an adapter launched for real GPUs (sm_80 A100, sm_90 H100),
without a GPU, and read what each needs: registers, spills, shared memory against the limit.

The launches were recorded while the kernels ran (interpreted on a CPU), so every argument's
type and every constexpr is what the adapter really passes. An interpreted kernel cannot be
compiled, so the compiling happens in a child process started with ``TRITON_INTERPRET=0``
(``python -m perflab.tools.adapters.kernel_compile``, with the environment ``perflab.tools.kernels``
compiles in) that imports the adapters again, finds each kernel by its source file and name,
and compiles one launch and target per usable core at a time (``map_forked``). A kernel the
compiler rejects, or that needs more shared memory than the target has, fails; a kernel the
checker cannot rebuild (not found, a launch it could not describe) is an error, the
checker's and not the kernel's.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

from perflab.measure.processes import end_group_with_caller, map_forked, own_group
from perflab.tools.adapters.rows import CheckRow

#: The GPU targets every recorded kernel is compiled for.
COMPILE_TARGETS = ("sm_80", "sm_90")


def compile_rows(
    spec: str, launches: list[dict], targets=COMPILE_TARGETS, timeout_s: float = 600
) -> list[CheckRow]:
    """One row per (kernel launch, target), compiled in a child process (and its workers)."""
    if not launches:
        return []
    from perflab.tools.kernels import compiler_environment

    request = json.dumps({"spec": spec, "launches": launches, "targets": list(targets)})
    failed = CheckRow("triton kernels", "compile for " + ", ".join(targets), status="error")
    command = [sys.executable, "-m", "perflab.tools.adapters.kernel_compile"]
    with own_group(command, compiler_environment()) as child:
        try:
            stdout, stderr = child.communicate(request, timeout=timeout_s)
        except subprocess.TimeoutExpired:  # leaving the block kills the child and its workers
            failed.detail = f"the compiling process took more than {timeout_s:g} s"
            return [failed]
    if child.returncode != 0:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        failed.detail = f"the compiling process failed: {last}"
        return [failed]
    return _worst_per_kernel(
        [CheckRow(**row) for row in json.loads(stdout.strip().splitlines()[-1])]
    )


def _worst_per_kernel(rows: list[CheckRow]) -> list[CheckRow]:
    """One row per (kernel, target): a failure if any launch failed, else the launch that
    needs the most shared memory, with how many distinct launches were compiled."""
    groups: dict[tuple, list[CheckRow]] = {}
    for row in rows:
        groups.setdefault((row.adapter, row.check), []).append(row)
    worst = []
    for group in groups.values():
        failed = [row for row in group if row.status != "pass"]
        row = failed[0] if failed else max(group, key=lambda r: r.error)
        row.detail = f"{len(group)} launch signature(s); worst: {row.detail}"
        worst.append(row)
    return worst


def _find_kernel(module_name: str, file: str | None, name: str):
    """The kernel ``name`` of the module loaded from ``file`` (the adapters file itself may be
    loaded under another module name here than in the parent), else of ``module_name``."""
    import importlib

    from triton.runtime.jit import JITFunction

    module = (file and _module_of(file)) or importlib.import_module(module_name)
    kernel = getattr(module, name)
    while not isinstance(kernel, JITFunction) and hasattr(kernel, "fn"):
        kernel = kernel.fn  # through triton.autotune / triton.heuristics
    if not isinstance(kernel, JITFunction):
        raise TypeError(f"{module_name}.{name} is not a triton.jit kernel")
    return kernel


@functools.cache
def _module_of(file: str):
    """The loaded module whose file is ``file``: by the path as recorded, else by resolved
    paths (``loading.file_of``, the rule the adapters were loaded by). Kept per file: every
    launch and target of a kernel asks again, and resolving means system calls for each loaded
    module (``sys.modules``: every module of the process, torch's and Triton's among them)."""
    from pathlib import Path

    from perflab.tools.adapters.loading import file_of

    modules = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None)]
    same = [m for m in modules if m.__file__ == file]
    if not same:
        wanted = Path(file).resolve()
        same = [m for m in modules if file_of(m) == wanted]
    return same[0] if same else None


def _signature(args: dict) -> tuple[dict, dict, tuple]:
    """(types, constexprs, divisible-by-16 names) of a recorded launch (``describe_launch``)."""
    types, constexprs, divisible = {}, {}, []
    for name, (kind, *rest) in args.items():
        if kind == "constexpr":
            constexprs[name] = rest[0]
        elif kind == "constexpr dtype":
            import triton.language as tl

            constexprs[name] = tl.dtype(rest[0])
        elif kind in ("tensor", "int"):
            types[name] = ("*" if kind == "tensor" else "") + rest[0]
            if rest[1]:
                divisible.append(name)
        elif kind == "bool":
            types[name] = "i1"
        elif kind == "float":
            types[name] = "fp32"
        else:  # None: Triton specialises it away as a constant
            constexprs[name] = None
    return types, constexprs, tuple(divisible)


def _compile_one(launch: dict, target_name: str) -> dict:
    from perflab.measure.triton_compile import compile_kernel, get_target, resource_usage

    target = get_target(target_name)
    label = f"{launch['name']} ({launch['module']})"
    check = f"compiles for {target.name} ({target.example})"
    from triton.compiler.errors import CompilationError

    try:
        kernel = _find_kernel(launch["module"], launch.get("file"), launch["name"])
        types, constexprs, divisible = _signature(launch["args"])
    except Exception as error:  # the checker could not rebuild the launch
        return {"adapter": label, "check": check, "status": "error", "detail": _line(error)}
    try:
        compiled = compile_kernel(
            kernel,
            types,
            constexprs,
            num_warps=launch["num_warps"],
            num_stages=launch["num_stages"],
            target=target,
            divisible=divisible,
        )
        usage = resource_usage(compiled)
    except (CompilationError, RuntimeError) as error:  # the compiler (or an MLIR pass) rejects it
        return {"adapter": label, "check": check, "status": "fail", "detail": _line(error)}
    except Exception as error:
        return {"adapter": label, "check": check, "status": "error", "detail": _line(error)}
    shared, limit = usage["shared_bytes"], target.max_shared_bytes
    keys = ", ".join(f"{k}={v}" for k, v in constexprs.items())
    detail = (
        f"{usage['registers']} registers, {usage['spill_stores']} spill stores, "
        f"shared {shared / 1024:.1f} of {limit / 1024:.0f} KiB; {keys}"
    )
    return {
        "adapter": label,
        "check": check,
        "error": float(shared),
        "tolerance": float(limit),
        "status": "pass" if shared <= limit else "fail",
        "detail": detail,
    }


def _line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return text[-1][:300]


def main() -> None:
    request = json.loads(sys.stdin.read())
    from perflab.tools.adapters.loading import load_adapters

    end_group_with_caller()
    load_adapters(request["spec"])  # puts the student's package on sys.path, as in the parent
    pairs = [(launch, target) for launch in request["launches"] for target in request["targets"]]
    print(json.dumps(list(map_forked(_compile_pair, pairs))))


def _compile_pair(pair: tuple[dict, str]) -> dict:
    return _compile_one(*pair)


if __name__ == "__main__":
    main()
