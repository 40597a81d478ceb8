"""How the Triton FlashAttention's kernels (``flash_triton``) get their tiles: autotuned on a
GPU over the configurations ``flash_configs`` keeps (pruned, on a GPU that table was not
compiled for, to those that fit its shared memory), fixed 16 x 16 tiles in the interpreter, or
one configuration pinned by a correctness check (``pinned_config``).

Read ``flash_triton`` first: it launches what this module hands it.
"""

from __future__ import annotations

import contextlib

import torch

from perflab.implementations.attention.flash_configs import (
    KERNELS,
    VERIFIED_ARCHS,
    autotune_configs,
    configs_for,
    kept_configs,
)
from perflab.implementations.attention.interpreter import INTERPRETED, INTERPRETER_TILE, triton
from perflab.measure.triton_compile import Target, argument_types, configs_that_fit

#: Compile-time flags from the chosen tiles: a length that is a multiple of its tile compiles
#: no bounds masks.
_EVEN = {
    "EVEN_Q": lambda args: args["N_Q"] % args["BQ"] == 0,
    "EVEN_K": lambda args: args["N_K"] % args["BK"] == 0,
}


def _current_target() -> Target:  # GPU-only
    from triton.runtime import driver

    device = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(device)
    shared = driver.active.utils.get_device_properties(device)["max_shared_mem"]
    return Target(
        f"sm_{major}{minor}", 10 * major + minor, torch.cuda.get_device_name(device), shared
    )


def _pruner(kernel, name: str):
    """``early_config_prune`` for ``triton.autotune``, run on the autotuner's cache misses only
    (GPU-only): the configurations ``flash_configs`` keeps for this kernel, head dimension and
    element size; on a GPU whose architecture that table was not compiled for, only those that
    also fit its shared memory (compiled here to see, once per argument types)."""
    checked: dict[tuple, list] = {}

    def prune(configs, named_args, **kwargs):
        kept = configs_for(name, kwargs["D"], named_args["Q"].element_size(), configs)
        target = _current_target()
        if target.arch in VERIFIED_ARCHS:
            return kept
        constexprs = {k: v for k, v in kwargs.items() if k in kernel.arg_names}
        constexprs.update(EVEN_Q=False, EVEN_K=False)  # the most code: every mask compiled in
        runtime = {k: v for k, v in named_args.items() if k not in constexprs}
        types, divisible = argument_types(runtime)
        key = (tuple(sorted(types.items())), divisible, tuple(sorted(constexprs.items())))
        if key not in checked:
            checked[key] = configs_that_fit(kernel, kept, runtime, constexprs, target)
        return checked[key]

    return prune


#: What the autotuner keys its choice on. The batch (batch x heads) enters as its bucket
#: (``batch_bucket``): one head and sixteen heads fill the GPU's multiprocessors differently
#: (at 4k tokens and 128-row tiles, 32 programs against 512 on 132 SMs), so each gets its own
#: tuning; without it, the first shape tuned would choose the tiles of every later one.
AUTOTUNE_KEY = ("N_Q", "N_K", "D", "IS_CAUSAL", "BATCH_BUCKET")


def batch_bucket(batch: int) -> int:
    """The batch (batch x heads) as the autotuner's key sees it: the next power of two, so
    that 15 and 16 heads share a tuning and 1 and 16 do not."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    return 1 << (batch - 1).bit_length()


def tuned(kernel, name: str):
    """``kernel`` with its EVEN_* flags derived from the tiles, autotuned on a GPU over
    ``flash_configs``' configurations; in the interpreter, run with fixed small tiles."""
    with_flags = triton.heuristics(_EVEN)(kernel)
    if INTERPRETED:
        return with_flags
    return triton.autotune(
        configs=autotune_configs(name),
        key=list(AUTOTUNE_KEY),
        prune_configs_by={"early_config_prune": _pruner(kernel, name)},
    )(with_flags)


#: Tile sizes passed explicitly in the interpreter; the autotuner picks them on a GPU.
_FIXED_TILES = {"BQ": INTERPRETER_TILE, "BK": INTERPRETER_TILE} if INTERPRETED else {}
#: The configuration of correctness checks on a GPU (see ``pinned_config``): None pins, for each
#: kernel, the first configuration ``flash_configs`` keeps for the launch's head dimension and
#: element size (its smallest tiles, compiled by the search for every target).
CHECK_CONFIG = None
_pinned: list = []
#: While ``recorded_launches`` runs: (kernel name, (BQ, BK, num_warps, num_stages)) of each
#: launch with pinned tiles, so a check can show the configuration it asked for is the one run.
_launches: list | None = None


Config = tuple[int, int, int, int]


def _check_tiles(config: Config) -> None:
    bq, bk = config[:2]
    if bq not in (16, 32, 64, 128) or bk not in (16, 32, 64, 128):
        raise ValueError(f"tile sizes must be 16, 32, 64 or 128, got BQ={bq} BK={bk}")


@contextlib.contextmanager
def pinned_config(config: Config | dict[str, Config] | None = CHECK_CONFIG):
    """Inside the block, the kernels run with one (BQ, BK, num_warps, num_stages), with the
    first kept configuration of each kernel (None), or, given {kernel name: configuration}
    (names of ``flash_configs.KERNELS``), the named kernels with theirs and the others with
    their first kept one, instead of being autotuned (GPU; the interpreter always runs
    16 x 16 tiles).

    Autotuning compiles every configuration of all three kernels for each new input shape and
    dtype (~0.9 s a compile): right for a benchmark, far too slow for a correctness check over
    many odd shapes. A check pins a configuration; ``tests/test_flash_attention.py`` checks
    every configuration the autotuner may pick this way."""
    if isinstance(config, dict):
        unknown = sorted(set(config) - set(KERNELS))
        if unknown:
            raise ValueError(f"unknown kernels {unknown}; valid: {', '.join(KERNELS)}")
        for one in config.values():
            _check_tiles(one)
    elif config is not None:
        _check_tiles(config)
    _pinned.append(config)
    try:
        yield
    finally:
        _pinned.pop()


@contextlib.contextmanager
def recorded_launches():
    """Inside the block, the list it yields receives (kernel name, configuration) of every
    launch whose tiles were pinned (none in the interpreter, which runs fixed tiles)."""
    global _launches
    outer, _launches = _launches, []
    try:
        yield _launches
    finally:
        _launches = outer


def kernel_and_config(tuned, name: str, head_dim: int, dtype: torch.dtype) -> tuple[object, dict]:
    """The kernel to launch and its extra launch arguments: the autotuner's (none), the
    interpreter's fixed tiles, or the pinned configuration's tiles, warps and stages."""
    if INTERPRETED:
        return tuned, _FIXED_TILES
    if _pinned:
        pinned = _pinned[-1]
        if isinstance(pinned, dict):
            pinned = pinned.get(name)
        # The dtype's itemsize, not a tensor's element_size(): no aten operator on the host.
        bq, bk, warps, stages = pinned or kept_configs(name, head_dim, dtype.itemsize)[0]
        if _launches is not None:
            _launches.append((name, (bq, bk, warps, stages)))
        return tuned.fn, {"BQ": bq, "BK": bk, "num_warps": warps, "num_stages": stages}
    return tuned, {}
