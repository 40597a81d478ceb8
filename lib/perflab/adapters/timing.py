"""Your data-parallel wrappers, FSDP and sharded optimizer, timed beside perflab's (notebooks
07 and 08).

A configuration of ``perflab.distributed.ddp_benchmark`` whose variant or optimizer starts with
"yours" is built from the adapters module named in its ``"adapters"`` entry, on every rank,
and trained by the same step as perflab's variants, in the same launch, taking turns with
them: after backward it calls your ``*_on_after_backward(model, optimizer)``, and before
zeroing the gradients your ``ddp_bucketed_on_train_batch_start`` where you provide one.
"""

from __future__ import annotations

import json

import torch
from torch import nn

from perflab.adapters.distributed_checks import DDP_ADAPTERS
from perflab.adapters.loading import call, load_adapters
from perflab.bench.comparison import paired_comparison
from perflab.distributed.ddp_benchmark import (
    LEARNING_RATE,
    TrainingSetup,
    make_optimizer,
    perflab_setup,
)

#: Your variants, by the adapter that builds each.
YOURS_VARIANTS = {
    "yours ddp": "get_ddp",
    "yours individual": "get_ddp_individual_parameters",
    "yours bucketed": "get_ddp_bucketed",
    "yours fsdp": "get_fsdp",
}
YOURS_OPTIMIZER = "yours sharded-adamw"
_AFTER_BACKWARD = {**DDP_ADAPTERS, "get_fsdp": ("fsdp_on_after_backward", None)}


def adapters_setup(config: dict, module: nn.Module) -> TrainingSetup:
    """``perflab_setup``, with your wrapper for a "yours ..." variant and your sharded AdamW
    for the optimizer "yours sharded-adamw" (``config["adapters"]`` names the module)."""
    variant, optimizer_name = config["variant"], config.get("optimizer", "adamw")
    if variant not in YOURS_VARIANTS and optimizer_name != YOURS_OPTIMIZER:
        return perflab_setup(config, module)
    adapters = load_adapters(config["adapters"])
    if variant in YOURS_VARIANTS:
        getter = YOURS_VARIANTS[variant]
        after, at_start = _AFTER_BACKWARD[getter]
        kwargs = {"bucket_size_mb": config["bucket_size_mb"]} if variant == "yours bucketed" else {}
        wrapped = call(adapters, getter, module, **kwargs)

        def after_backward(optimizer):
            call(adapters, after, wrapped, optimizer)

        def at_batch_start(optimizer):
            call(adapters, at_start, wrapped, optimizer)

    else:
        setup = perflab_setup({**config, "optimizer": "adamw"}, module)
        wrapped, after_backward, at_start = setup.wrapped, setup.after_backward, None
    if optimizer_name == YOURS_OPTIMIZER:
        optimizer = call(
            adapters,
            "get_sharded_optimizer",
            wrapped.parameters(),
            torch.optim.AdamW,
            lr=LEARNING_RATE,
        )
    else:
        optimizer = make_optimizer(optimizer_name, wrapped.parameters())
    return TrainingSetup(wrapped, optimizer, after_backward, at_batch_start if at_start else None)


def yours_ddp_configs(
    spec: str, passing: set[str], world_size: int, model: str, bucket_size_mb: float
) -> list[dict]:
    """Configurations of your data-parallel wrappers that passed every check (``passing``,
    from ``battery.passing_adapters``; correctness before speed), bucketed at
    ``bucket_size_mb``, to take turns with ``ddp_configs``' in one launch (notebook 07)."""
    return [
        {
            "world_size": world_size,
            "model": model,
            "variant": variant,
            "adapters": spec,
            "bucket_size_mb": bucket_size_mb if variant == "yours bucketed" else 0,
        }
        for variant, getter in YOURS_VARIANTS.items()
        if getter in passing and variant != "yours fsdp"
    ]


def yours_zero_configs(spec: str, passing: set[str], world_size: int, model: str) -> list[dict]:
    """perflab's FSDP and, where they passed every check (``passing``), your FSDP and your
    sharded AdamW (on perflab's flat data parallelism), to take turns with ``zero_configs``'
    (notebook 08)."""
    base = {"world_size": world_size, "model": model, "bucket_size_mb": 0, "adapters": spec}
    configs = [{**base, "variant": "fsdp", "optimizer": "adamw"}]
    if "get_fsdp" in passing:
        configs.append({**base, "variant": "yours fsdp", "optimizer": "adamw"})
    if "get_sharded_optimizer" in passing:
        configs.append({**base, "variant": "flat", "optimizer": YOURS_OPTIMIZER})
    return configs


#: (yours, perflab's counterpart) in ``yours_zero_configs``' sweep, named "variant + optimizer".
ZERO_PAIRS = (
    ("yours fsdp + adamw", "fsdp + adamw"),
    ("flat + yours sharded-adamw", "flat + sharded-adamw"),
)


def yours_zero_comparisons(frame) -> list:
    """Your FSDP and sharded AdamW each against perflab's, paired by round
    (``paired_comparison``), from a sweep of ``zero_configs`` + ``yours_zero_configs``."""
    ok = frame[frame["status"] == "ok"]
    rounds = {
        f"{row.variant} + {row.optimizer}": json.loads(row.round_ms) for row in ok.itertuples()
    }
    return [
        paired_comparison(rounds[base], rounds[yours], names=(base, yours))
        for yours, base in ZERO_PAIRS
        if yours in rounds and base in rounds
    ]
