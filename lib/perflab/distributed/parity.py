"""Does distributed training compute what one process computes? Rank functions for
``launch`` that train a model both ways on the same global batches and report the
differences (notebooks 07 and 08, and the tests).

Every rank builds its model from a different seed, so a wrapper that forgot to broadcast
rank 0's parameters fails the check. Each rank trains on its slice of the global batch;
the single-process reference, a copy of the broadcast model, trains on the whole batch with
the same optimizer, on every rank.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import Tensor, nn

from perflab.distributed.toy import global_batch, loss_fn, toy_model
from perflab.implementations.ddp import DDPFlat, broadcast_from_rank0, make_data_parallel
from perflab.implementations.fsdp import FSDP
from perflab.implementations.sharded_optimizer import ShardedOptimizer, optimizer_state_bytes
from perflab.measure.device import dtype_name


def local_slice(tensor: Tensor) -> Tensor:
    """This rank's equal share of a global batch (the batch must divide by the world size)."""
    world_size = dist.get_world_size()
    if tensor.shape[0] % world_size:
        raise ValueError(f"global batch {tensor.shape[0]} does not divide among {world_size} ranks")
    return tensor.chunk(world_size)[dist.get_rank()]


def reference_copy(module: nn.Module, model: str) -> nn.Module:
    """A fresh model with ``module``'s current values and dtype (ties kept)."""
    reference = toy_model(model, seed=0, dtype=next(module.parameters()).dtype)
    reference.load_state_dict(module.state_dict())
    return reference


def max_difference(params: list[Tensor], reference: list[Tensor]) -> float:
    return max(
        float((p.detach().double() - r.detach().double()).abs().max())
        for p, r in zip(params, reference, strict=True)
    )


def spread_across_ranks(tensors: list[Tensor]) -> float:
    """Largest difference between this rank's tensors and any other rank's (0: identical)."""
    flat = torch.cat([t.detach().reshape(-1).double() for t in tensors])  # float64 stays exact
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return max(float((g - flat).abs().max()) for g in gathered)


def train_both(wrapped, optimizer, reference, reference_optimizer, step, batch_size, seq_len):
    """One step of distributed training on this rank's slice of the global batch, and one of
    the single-process reference on the whole batch."""
    inputs, targets = global_batch(reference, batch_size, seq_len, step)
    optimizer.zero_grad()
    loss_fn(wrapped, local_slice(inputs), local_slice(targets)).backward()
    wrapped.finish_gradient_synchronization()
    optimizer.step()
    reference_optimizer.zero_grad()
    loss_fn(reference, inputs, targets).backward()
    reference_optimizer.step()


def ddp_parity(
    variant: str,
    bucket_size_mb: float = 0.01,
    model: str = "toy",
    steps: int = 4,
    batch_size: int = 8,
    seq_len: int = 16,
    lr: float = 1e-2,
    dtype: torch.dtype = torch.float64,
) -> dict:
    """Train ``variant`` (see ``ddp.VARIANTS``) and the single-process reference ``steps``
    AdamW steps; report the largest parameter difference, whether the synchronised gradients
    are identical on all ranks and have their parameters' dtypes and shapes, and whether the
    frozen parameters stayed untouched. In float64 (the default) the only differences left
    are the order of the additions, ~1e-15 relative."""
    module = toy_model(model, seed=dist.get_rank(), dtype=dtype)
    wrapped = make_data_parallel(variant, module, bucket_size_mb)
    reference = reference_copy(module, model)
    frozen = {n: p.detach().clone() for n, p in module.named_parameters() if not p.requires_grad}
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=lr)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=lr)
    for step in range(steps):
        train_both(wrapped, optimizer, reference, reference_optimizer, step, batch_size, seq_len)
    trained = [p for p in module.parameters() if p.requires_grad]
    return {
        "variant": variant,
        "model": model,
        "rank": dist.get_rank(),
        "dtype": dtype_name(dtype),
        "parameter_tensors": len(list(module.parameters())),
        "exposes_module": wrapped.module is module,
        "max_param_diff": max_difference(list(module.parameters()), list(reference.parameters())),
        "grad_spread_across_ranks": spread_across_ranks([p.grad for p in trained]),
        "grads_match_params": all(
            p.grad.dtype == p.dtype and p.grad.shape == p.shape for p in trained
        ),
        "frozen_untouched": all(
            p.grad is None and torch.equal(p, frozen[n])
            for n, p in module.named_parameters()
            if not p.requires_grad
        ),
    }


def accumulation_parity(
    variant: str,
    use_no_sync: bool,
    micro_batches: int = 2,
    model: str = "toy",
    steps: int = 3,
    batch_size: int = 8,
    seq_len: int = 16,
    lr: float = 1e-2,
) -> dict:
    """Gradient accumulation in float64: each rank splits its slice of the global batch into
    ``micro_batches`` backward passes (loss scaled by 1 / micro_batches), the earlier ones
    inside ``no_sync()`` when ``use_no_sync``, then synchronises once and steps AdamW; the
    reference trains on the whole batch at once. Reports the largest parameter difference, or
    the error the variant raised (``error``, empty when none)."""
    module = toy_model(model, seed=dist.get_rank(), dtype=torch.float64)
    wrapped = make_data_parallel(variant, module, bucket_size_mb=0.01)
    reference = reference_copy(module, model)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=lr)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=lr)
    row = {"variant": variant, "no_sync": use_no_sync, "rank": dist.get_rank(), "error": ""}
    try:
        for step in range(steps):
            inputs, targets = global_batch(reference, batch_size, seq_len, step)
            parts = zip(
                local_slice(inputs).chunk(micro_batches),
                local_slice(targets).chunk(micro_batches),
                strict=True,
            )
            optimizer.zero_grad()
            for index, (part_inputs, part_targets) in enumerate(parts):
                last = index == micro_batches - 1
                quiet = wrapped.no_sync() if use_no_sync and not last else contextlib.nullcontext()
                with quiet:
                    (loss_fn(wrapped, part_inputs, part_targets) / micro_batches).backward()
            wrapped.finish_gradient_synchronization()
            optimizer.step()
            reference_optimizer.zero_grad()
            loss_fn(reference, inputs, targets).backward()
            reference_optimizer.step()
    except RuntimeError as error:
        row["error"] = str(error).splitlines()[0]
        dist.barrier()  # the other rank raised the same; nothing may be left in flight
        return row
    row["max_param_diff"] = max_difference(list(module.parameters()), list(reference.parameters()))
    return row


def accumulation_parity_all(variants: list[str], **kwargs) -> list[dict]:
    """``accumulation_parity`` for each variant, with and without ``no_sync``, in one launch."""
    return [accumulation_parity(v, s, **kwargs) for v in variants for s in (True, False)]


def rewrap_parity(variant: str, steps: int = 2, model: str = "toy") -> dict:
    """Wrap the same module twice (a re-run notebook cell) and train with the second wrapper
    against one process; the first wrapper must refuse to synchronise."""
    module = toy_model(model, seed=dist.get_rank(), dtype=torch.float64)
    first = make_data_parallel(variant, module, bucket_size_mb=0.01)
    wrapped = make_data_parallel(variant, module, bucket_size_mb=0.01)
    reference = reference_copy(module, model)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    for step in range(steps):
        train_both(wrapped, optimizer, reference, reference_optimizer, step, 8, 16)
    try:
        first.finish_gradient_synchronization()
        old_wrapper_error = ""
    except RuntimeError as error:
        old_wrapper_error = str(error)
    return {
        "variant": variant,
        "max_param_diff": max_difference(list(module.parameters()), list(reference.parameters())),
        "old_wrapper_error": old_wrapper_error,
    }


def rewrap_parity_all(variants: list[str]) -> list[dict]:
    return [rewrap_parity(variant) for variant in variants]


def ddp_parity_all(variants: list[str], model: str = "toy", **kwargs) -> list[dict]:
    """``ddp_parity`` for each of ``variants`` on ``model`` in one launch."""
    return [ddp_parity(variant, model=model, **kwargs) for variant in variants]


OPTIMIZERS = {
    "sgd": (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    "adamw": (torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}),
}


def _two_groups(module: nn.Module) -> tuple[list[Tensor], list[Tensor]]:
    """Trained matrices, and trained vectors (a second parameter group)."""
    trained = [p for p in module.parameters() if p.requires_grad]
    return [p for p in trained if p.ndim >= 2], [p for p in trained if p.ndim < 2]


def zero_parity(
    optimizer: str,
    model: str = "toy",
    steps: int = 4,
    batch_size: int = 8,
    seq_len: int = 16,
    dtype: torch.dtype = torch.float64,
) -> dict:
    """Train with ``ShardedOptimizer(optimizer)`` (gradients averaged by ``DDPFlat``) and
    with the plain optimizer on one process; the vectors join as a second group, with half
    the learning rate, through ``add_param_group``. Reports the largest parameter difference,
    the spread of parameters across ranks, and the optimizer-state bytes of both."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
    optimizer_cls, kwargs = OPTIMIZERS[optimizer]
    module = toy_model(model, seed=dist.get_rank(), dtype=dtype)
    wrapped = DDPFlat(module)
    reference = reference_copy(module, model)
    matrices, vectors = _two_groups(module)
    sharded = ShardedOptimizer(matrices, optimizer_cls, **kwargs)
    sharded.add_param_group({"params": vectors, "lr": kwargs["lr"] / 2})
    ref_matrices, ref_vectors = _two_groups(reference)
    plain = optimizer_cls(ref_matrices, **kwargs)
    plain.add_param_group({"params": ref_vectors, "lr": kwargs["lr"] / 2})
    for step in range(steps):
        train_both(wrapped, sharded, reference, plain, step, batch_size, seq_len)
    return {
        "optimizer": optimizer,
        "rank": dist.get_rank(),
        "max_param_diff": max_difference(list(module.parameters()), list(reference.parameters())),
        "param_spread_across_ranks": spread_across_ranks(list(module.parameters())),
        "sharded_state_bytes": sharded.local_state_bytes(),
        "unsharded_state_bytes": optimizer_state_bytes(plain),
        "groups": len(sharded.param_groups),
    }


def zero_resume_parity(steps_before: int = 2, steps_after: int = 2, model: str = "toy") -> dict:
    """Save a ``ShardedOptimizer``'s state after ``steps_before`` steps, load it into one
    rebuilt with another learning rate, and train on: the parameters must equal those of an
    uninterrupted run (same world size). Also reports the learning rate used after loading."""
    modules = [toy_model(model, seed=dist.get_rank(), dtype=torch.float64) for _ in range(2)]
    wrapped = [DDPFlat(m) for m in modules]
    straight = ShardedOptimizer(modules[0].parameters(), torch.optim.AdamW, lr=0.01)
    resumed = ShardedOptimizer(modules[1].parameters(), torch.optim.AdamW, lr=0.01)

    def step(index, wrapper, optimizer):
        inputs, targets = global_batch(modules[0], 8, 16, index)
        optimizer.zero_grad()
        loss_fn(wrapper, local_slice(inputs), local_slice(targets)).backward()
        wrapper.finish_gradient_synchronization()
        optimizer.step()

    for index in range(steps_before):
        step(index, wrapped[0], straight)
        step(index, wrapped[1], resumed)
    saved = resumed.state_dict()
    resumed = ShardedOptimizer(modules[1].parameters(), torch.optim.AdamW, lr=0.1)
    resumed.load_state_dict(saved)
    for index in range(steps_before, steps_before + steps_after):
        step(index, wrapped[0], straight)
        step(index, wrapped[1], resumed)
    return {
        "rank": dist.get_rank(),
        "max_param_diff": max_difference(
            list(modules[1].parameters()), list(modules[0].parameters())
        ),
        "lr_after_load": resumed.local_optimizer.param_groups[0]["lr"],
        "outer_lr_after_load": resumed.param_groups[0]["lr"],
    }


def zero_parity_all(optimizers: list[str], **kwargs) -> list[dict]:
    """``zero_parity`` for each of ``optimizers`` in one launch."""
    return [zero_parity(name, **kwargs) for name in optimizers]


def fsdp_parity(
    compute_dtype: str | None = None,
    model: str = "toy",
    steps: int = 3,
    batch_size: int = 8,
    seq_len: int = 16,
    lr: float = 0.05,
    prefetch: int = 1,
) -> dict:
    """Train ``FSDP(compute_dtype, prefetch)`` and the single-process fp32 model ``steps`` SGD
    steps; report the largest difference of the full parameters, the gradients' dtypes and
    shapes, the replicated gradients' spread across ranks, parameter bytes held per rank and
    the prefetched gathers by pass (``FSDP.arrivals``)."""
    dtype = None if compute_dtype is None else getattr(torch, compute_dtype)
    module = toy_model(model, seed=dist.get_rank())
    full_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
    broadcast_from_rank0(module)  # FSDP does it too, but takes the parameters off the module
    reference = reference_copy(module, model)
    sharded = FSDP(module, compute_dtype=dtype, prefetch=prefetch)
    optimizer = torch.optim.SGD(sharded.parameters(), lr=lr)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=lr)
    alive_before_backward = []
    for step in range(steps):
        inputs, targets = global_batch(reference, batch_size, seq_len, step)
        optimizer.zero_grad()
        loss = loss_fn(sharded, local_slice(inputs), local_slice(targets))
        alive_before_backward.append(sharded.full_weights_alive())
        loss.backward()
        sharded.finish_gradient_synchronization()
        optimizer.step()
        reference_optimizer.zero_grad()
        loss_fn(reference, inputs, targets).backward()
        reference_optimizer.step()
    full = sharded.gather_full_params()
    names = [name for name, _ in reference.named_parameters()]
    trained = [p for p in sharded.parameters() if p.requires_grad]
    replicated = [p for p in trained if not sharded.specs[p].sharded]
    return {
        "compute_dtype": compute_dtype or "float32",
        "rank": dist.get_rank(),
        "max_param_diff": max_difference(
            [full[n] for n in names], [p for _, p in reference.named_parameters()]
        ),
        "grads_fp32_shard_shaped": all(
            p.grad.dtype == torch.float32 and p.grad.shape == p.shape for p in trained
        ),
        "replicated_grad_spread": spread_across_ranks([p.grad for p in replicated]),
        "param_bytes_per_rank": sum(p.numel() * p.element_size() for p in sharded.parameters()),
        "param_bytes_replicated": full_bytes,
        "backward_gathers": sharded.backward_gathers,
        "prefetch": prefetch,
        "forward_prefetched": sharded.arrivals["forward"][1],
        "backward_prefetched": sharded.arrivals["backward"][1],
        "full_weights_kept_for_backward": max(alive_before_backward),
        "exposes_module": sharded.module is module,
        "names_complete": set(full)
        == set(dict(reference.named_parameters(remove_duplicate=False))),
    }


def torch_fsdp_comparison(
    model: str = "toy", steps: int = 3, batch_size: int = 8, seq_len: int = 16, lr: float = 0.05
) -> dict:
    """Train ``FSDP`` and PyTorch's ``fully_shard`` (FSDP2) side by side from the same weights
    with SGD; report the largest difference of their full parameters and the parameter bytes
    each holds on this rank."""
    module = toy_model(model, seed=dist.get_rank())
    broadcast_from_rank0(module)
    theirs = reference_copy(module, model)
    ours = FSDP(module)
    from torch.distributed.fsdp import fully_shard  # 0.7 s to import: only here

    fully_shard(theirs)
    optimizers = [torch.optim.SGD(m.parameters(), lr=lr) for m in (ours, theirs)]
    for step in range(steps):
        inputs, targets = global_batch(theirs, batch_size, seq_len, step)
        for wrapped, optimizer in zip((ours, theirs), optimizers, strict=True):
            optimizer.zero_grad()
            loss_fn(wrapped, local_slice(inputs), local_slice(targets)).backward()
            if wrapped is ours:
                ours.finish_gradient_synchronization()
            optimizer.step()
    full = ours.gather_full_params()
    names, params = zip(*theirs.named_parameters(), strict=True)
    return {
        "rank": dist.get_rank(),
        "max_param_diff_vs_torch": max_difference(
            [full[n] for n in names], [p.full_tensor() for p in params]
        ),
        "param_bytes_ours": sum(p.numel() * p.element_size() for p in ours.parameters()),
        "param_bytes_torch": sum(
            p.to_local().numel() * p.to_local().element_size() for p in params
        ),
    }
