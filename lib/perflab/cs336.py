"""perflab's implementations behind the names and signatures of the CS336 systems assignment's
``tests/adapters.py`` (stanford-cs336/assignment2-systems; 2026 and 2025 handouts).

A course checkout whose ``tests/adapters.py`` is reduced to ``from perflab.cs336 import *``
runs the course's tests against perflab. ``perflab check --adapters`` reads the same names from
any module, a student's included: this file is also the model of what it looks for.

The data-parallel wrappers need a process group (the course's tests start one per rank).
"""

from __future__ import annotations

import torch

__all__ = [
    # 2026 and 2025
    "get_flashattention_autograd_function_pytorch",
    "get_flashattention_autograd_function_triton",
    "get_sharded_optimizer",
    # 2026
    "get_ddp",
    "ddp_on_after_backward",
    "get_fsdp",
    "fsdp_on_after_backward",
    "fsdp_gather_full_params",
    # 2025
    "get_ddp_individual_parameters",
    "ddp_individual_parameters_on_after_backward",
    "get_ddp_bucketed",
    "ddp_bucketed_on_after_backward",
    "ddp_bucketed_on_train_batch_start",
]


def get_flashattention_autograd_function_pytorch() -> type:
    """FlashAttention-2 forward and backward in plain PyTorch (tiled, saves the log-sum-exp)."""
    from perflab.implementations.attention import FlashAttentionTorch

    return FlashAttentionTorch


def get_flashattention_autograd_function_triton() -> type:
    """FlashAttention-2 in Triton kernels (interpreted on a CPU; needs Triton installed)."""
    from perflab.implementations.attention import FlashAttentionTriton

    return FlashAttentionTriton


def get_ddp(module: torch.nn.Module) -> torch.nn.Module:
    """Data parallelism that all-reduces each gradient asynchronously as soon as backward has
    produced it (2026's ``get_ddp``; 2025's individual-parameters variant)."""
    from perflab.distributed import DDPIndividualParameters

    return DDPIndividualParameters(module)


def ddp_on_after_backward(ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Wait for the gradient all-reduces and average them, before ``optimizer.step()``."""
    ddp_model.finish_gradient_synchronization()


get_ddp_individual_parameters = get_ddp
ddp_individual_parameters_on_after_backward = ddp_on_after_backward


def get_ddp_bucketed(module: torch.nn.Module, bucket_size_mb: float) -> torch.nn.Module:
    """Data parallelism with gradients all-reduced in buckets of at most ``bucket_size_mb`` MB
    (a parameter larger than a bucket gets one of its own)."""
    from perflab.distributed import DDPBucketed

    return DDPBucketed(module, bucket_size_mb)


ddp_bucketed_on_after_backward = ddp_on_after_backward


def ddp_bucketed_on_train_batch_start(
    ddp_model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """Nothing to do: perflab's buckets are emptied when the previous step synchronised."""


def get_fsdp(module: torch.nn.Module, compute_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Fully sharded data parallelism: weights sharded across ranks, gathered (in
    ``compute_dtype`` if given) for forward and backward, gradients reduce-scattered; master
    weights stay in the module's dtype."""
    from perflab.distributed import FSDP

    return FSDP(module, compute_dtype=compute_dtype)


def fsdp_on_after_backward(fsdp_model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """All-reduce the replicated parameters' gradients (the sharded ones were reduce-scattered
    in backward), before ``optimizer.step()``."""
    fsdp_model.finish_gradient_synchronization()


def fsdp_gather_full_params(fsdp_model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter, full, by the wrapped module's parameter names."""
    return fsdp_model.gather_full_params()


def get_sharded_optimizer(
    params, optimizer_cls: type[torch.optim.Optimizer], **kwargs
) -> torch.optim.Optimizer:
    """ZeRO-1: ``optimizer_cls(**kwargs)`` holds state only for this rank's share of ``params``;
    after each step every parameter is broadcast from the rank that owns it."""
    from perflab.distributed import ShardedOptimizer

    return ShardedOptimizer(params, optimizer_cls, **kwargs)
