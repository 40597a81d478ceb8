"""Run a perflab rank function under torchrun (one machine or several):

    torchrun --nproc-per-node 2 -m perflab.distributed \
        perflab.lessons.nb07_distributed_ddp.allreduce_benchmark:check_allreduce_rank

Arguments after the function are parsed as JSON (``'[1, 10]'``, ``'"toy"'``, ``3``) and passed
positionally; rank 0 prints what it returned.
"""

from __future__ import annotations

import importlib
import json
import sys

import torch.distributed as dist

from perflab.distributed.launch import init_process_group_from_env

USAGE = "usage: torchrun --nproc-per-node N -m perflab.distributed MODULE:FUNCTION [JSON_ARG ...]"


def _resolve(target: str):
    module_name, _, function_name = target.partition(":")
    if not module_name or not function_name:
        raise SystemExit(f"error: expected MODULE:FUNCTION, got {target!r}\n{USAGE}")
    try:
        return getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise SystemExit(f"error: cannot load {target!r}: {error}\n{USAGE}") from None


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(USAGE)
    fn = _resolve(argv[0])
    try:
        args = [json.loads(arg) for arg in argv[1:]]
    except json.JSONDecodeError as error:
        raise SystemExit(f"error: arguments must be JSON ({error})\n{USAGE}") from None
    init_process_group_from_env()
    try:
        result = fn(*args)
        if dist.get_rank() == 0:
            print(json.dumps(result, default=str))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
