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
import warnings

import torch
from torch import nn

from perflab.bench.attention_timing import add_implementation, interpreted
from perflab.distributed.ddp_benchmark import (
    LEARNING_RATE,
    ZERO_KEY,
    TrainingSetup,
    ddp_sweep,
    make_optimizer,
    perflab_setup,
    zero_configs,
)
from perflab.measure.comparison import Comparison, paired_comparison
from perflab.measure.conclusions import conclude
from perflab.measure.paths import save_table
from perflab.tools.adapters.attention_checks import GETTERS, attention_functions
from perflab.tools.adapters.battery import check_adapters, findings, format_table, passing_adapters
from perflab.tools.adapters.distributed_checks import DDP_ADAPTERS
from perflab.tools.adapters.loading import call, load_adapters

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


def yours_zero_comparisons(frame) -> list[Comparison]:
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


def sharding_of_yours(
    spec: str | None,
    out,
    provenance: dict,
    *,
    world_size: int,
    model: str,
    batch_size: int,
    seq_len: int,
    warmup: int,
    rounds: int,
) -> list[str]:
    """Notebook 08's "Yours": your FSDP and sharded optimizer checked (``check_adapters``),
    those that pass timed in one launch with perflab's (``zero_configs`` and
    ``yours_zero_configs`` taking turns), each against perflab's concluded in ``out``; the
    check table and the step rows saved beside it. Returns the lines to print (the tables, a
    note for an FSDP that sharded nothing of the timed model, the conclusions), or how to give
    your adapters where ``spec`` is None."""
    if not spec:
        return ["no adapters given: perflab run 08 -p adapters PATH checks and times yours here"]
    checked = check_adapters(spec, parts=("fsdp", "optimizer"))
    save_table(checked, out / "yours_check.csv", provenance)
    configs = zero_configs(world_size, model) + yours_zero_configs(
        spec, passing_adapters(checked), world_size, model
    )
    steps = ddp_sweep(
        out / "yours_step.csv",
        configs,
        batch_size=batch_size,
        seq_len=seq_len,
        warmup=warmup,
        rounds=rounds,
        resume=False,
        metadata=provenance,
        key=ZERO_KEY,
        setup=adapters_setup,
    )
    columns = ["variant", "optimizer", "status", "step_ms", "sync_ms", "held_fraction"]
    lines = [format_table(checked), steps.reindex(columns=columns).to_string()]
    for _ in steps[(steps["variant"] == "yours fsdp") & (steps["held_fraction"] >= 1)].itertuples():
        lines.append(
            f"your FSDP holds all of {model}'s parameters on each rank: it sharded none of this "
            "model's modules (perhaps only cs336_basics' Linear and Embedding); its time here is "
            "not a sharded step's"
        )
    for comparison in yours_zero_comparisons(steps):
        lines.append(conclude(out, f"{comparison.name_b} vs {comparison.name_a}", comparison))
    return lines


def ddp_of_yours(spec: str | None, out, provenance: dict) -> tuple[set[str], list[str]]:
    """Notebook 07's "Yours": your data-parallel wrappers checked (``check_adapters``, saved
    beside the results); the adapters that pass every check (timed with perflab's variants),
    and the lines to print, or how to give your adapters where ``spec`` is None."""
    if not spec:
        return set(), [
            "no adapters given: perflab run 07 -p adapters PATH checks and times yours here"
        ]
    checked = check_adapters(spec, parts=("ddp",))
    save_table(checked, out / "yours_check.csv", provenance)
    passing = passing_adapters(checked)
    return passing, [
        format_table(checked),
        "timed in section 4: " + (", ".join(sorted(passing)) or "none"),
    ]


def attention_of_yours(
    spec: str | None,
    out,
    provenance: dict,
    device,
    *,
    parts: tuple[str, ...] = ("attention",),
    interpreted_too: bool = False,
) -> tuple[dict, list[str]]:
    """Notebooks 05 and 06's "Yours": your attention checked (``check_adapters`` with
    ``parts``, saved beside the results); those that pass registered as implementations and
    returned by name, with the lines to print, or how to give your adapters where ``spec`` is
    None. An interpreted Triton kernel (on a CPU) measures nothing about speed: it is left out
    unless ``interpreted_too``."""
    notebook = "06" if "kernels" in parts else "05"
    if not spec:
        how = f"perflab run {notebook} -p adapters PATH"
        return {}, [f"no adapters given: {how} checks and times yours here"]
    checked = check_adapters(spec, parts=parts, device=device.type)
    save_table(checked, out / "yours_check.csv", provenance)
    # Triton 3.7 warns at every compile of a block-pointer kernel (the course teaches them):
    # once is enough
    warnings.filterwarnings("once", message="tl.make_block_ptr is deprecated")
    passing = {}
    for name, function in attention_functions(spec, passing_adapters(checked)).items():
        add_implementation(name, function, triton=name == "yours_triton")
        if interpreted_too or not interpreted(name):
            passing[name] = function
    lines = [format_table(checked), "timed below: " + (", ".join(passing) or "none")]
    found = findings(checked)
    causal = set(found.loc[found["detail"].str.startswith("is_causal ignored"), "adapter"])
    lines += [
        f"{name} ignores is_causal (the finding above): its times in a causal sweep are of "
        "attention without the mask, not of causal attention"
        for name in passing
        if GETTERS[name.removeprefix("yours_")] in causal
    ]
    return passing, lines
