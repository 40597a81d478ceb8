"""The pieces ``fsdp.FSDP`` is built from: where a parameter's shard lives (``ShardSpec``),
gathering the full weight from every rank's shard, and the autograd functions that hand a
module its full weight and reduce-scatter the weight's gradient back into the shard."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor, nn


class ShardSpec:
    """Where one parameter lives: its full shape and, if sharded, its shard."""

    def __init__(self, name: str, shape: torch.Size, world_size: int, sharded: bool):
        self.name = name
        self.shape = shape
        self.numel = math.prod(shape)
        self.sharded = sharded
        self.shard_numel = -(-self.numel // world_size) if sharded else self.numel


def shard_parameter(
    name: str, param: Tensor, world_size: int, rank: int
) -> tuple[nn.Parameter, ShardSpec]:
    """This rank's part of ``param``: flattened, padded to a multiple of ``world_size`` and cut
    into equal shards if it has two or more dimensions (else the whole of it, replicated), as a
    new master ``nn.Parameter``, with the spec that says where it lives."""
    spec = ShardSpec(name, param.shape, world_size, sharded=param.ndim >= 2)
    data = param.detach().reshape(-1)
    if spec.sharded:
        padded = torch.zeros(spec.shard_numel * world_size, dtype=param.dtype, device=param.device)
        padded[: spec.numel] = data
        data = padded.chunk(world_size)[rank]
    return nn.Parameter(data.clone(), requires_grad=param.requires_grad), spec


def gather_shard(shard: Tensor, spec: ShardSpec, dtype: torch.dtype, async_op: bool = False):
    """All-gather ``shard`` (cast to ``dtype``) into the padded flat full tensor."""
    flat = torch.empty(spec.shard_numel * dist.get_world_size(), dtype=dtype, device=shard.device)
    work = dist.all_gather_single(flat, shard.detach().to(dtype), async_op=async_op)
    return flat, work


def full_view(flat: Tensor, spec: ShardSpec) -> Tensor:
    return flat[: spec.numel].view(spec.shape)


def full_tensor(value: Tensor, spec: ShardSpec) -> Tensor:
    """The whole of a shard's ``value`` (the shard itself, or its gradient) in its own dtype:
    gathered from every rank when sharded (a collective), a copy when replicated."""
    if spec.sharded:
        return full_view(gather_shard(value, spec, value.dtype)[0], spec)
    return value.detach().clone()


class ShardedWeight(torch.autograd.Function):
    """shard -> full weight (given, already gathered); backward reduce-scatters the full
    weight's gradient, in fp32 (float64 for a float64 shard), into the shard's gradient
    (averaged over ranks)."""

    @staticmethod
    def forward(ctx, shard: Tensor, flat: Tensor, spec: ShardSpec) -> Tensor:
        ctx.spec = spec
        ctx.shard_dtype = shard.dtype
        return full_view(flat, spec)

    @staticmethod
    def backward(ctx, grad_full: Tensor):
        spec = ctx.spec
        world_size = dist.get_world_size()
        reduce_dtype = torch.promote_types(ctx.shard_dtype, torch.float32)
        flat = torch.zeros(
            spec.shard_numel * world_size, dtype=reduce_dtype, device=grad_full.device
        )
        flat[: spec.numel] = grad_full.reshape(-1)
        grad_shard = torch.empty(spec.shard_numel, dtype=reduce_dtype, device=flat.device)
        dist.reduce_scatter_single(grad_shard, flat)
        return grad_shard.div_(world_size).to(ctx.shard_dtype), None, None


class CastTo(torch.autograd.Function):
    """A replicated parameter in the compute dtype; its gradient comes back in its own."""

    @staticmethod
    def forward(ctx, param: Tensor, dtype: torch.dtype) -> Tensor:
        ctx.param_dtype = param.dtype
        return param.to(dtype) if dtype != param.dtype else param.view_as(param)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad.to(ctx.param_dtype), None


def cast_floating(value, dtype: torch.dtype):
    if isinstance(value, Tensor) and value.is_floating_point():
        return value.to(dtype)
    return value
