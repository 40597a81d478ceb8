"""Data-parallel training four ways (notebook 07), each an ``nn.Module`` wrapper:

- ``DDPNaive``: after backward, one blocking all-reduce per gradient;
- ``DDPFlat``: after backward, all gradients copied into one flat buffer, one all-reduce;
- ``DDPIndividualParameters``: an asynchronous all-reduce per parameter, started by a
  post-accumulate-grad hook the moment its gradient is ready, so communication overlaps the
  rest of backward;
- ``DDPBucketed``: parameters grouped (in reverse order, roughly the order backward produces
  their gradients) into buckets of ``bucket_size_mb``; a bucket's flat buffer is all-reduced
  asynchronously as soon as its last gradient arrives: few large messages, still overlapped.
  The design of ``torch.nn.parallel.DistributedDataParallel`` (Li et al. 2020, VLDB).

All broadcast rank 0's parameters and buffers at construction, average the gradients (sum
divided by the world size) in ``finish_gradient_synchronization()``, to be called after
backward and before the optimizer step, and leave parameters that do not require grad alone.
A parameter shared by two modules (tied weights) is one parameter with one gradient.
Every rank must compute gradients for the same parameters (as DDP without
``find_unused_parameters``); a parameter with no gradient on this step counts as zeros.

Gradient accumulation: backward passes inside ``with wrapper.no_sync():`` accumulate local
gradients without communicating (as PyTorch's DDP); the first backward after it synchronises
the sum. Two backward passes without ``no_sync`` are exact for the variants that communicate
after backward (naive, flat); the overlapped variants would start a second all-reduce on a
buffer still in flight, so they raise a ``RuntimeError`` that says to use ``no_sync``.

One wrapper per module: wrapping a module again (a re-run notebook cell) removes the older
wrapper's hooks, and the older wrapper refuses to synchronise from then on.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn


def _second_backward_error(wrapper: nn.Module) -> RuntimeError:
    return RuntimeError(
        f"{type(wrapper).__name__}: a second backward pass before "
        "finish_gradient_synchronization() would all-reduce gradients already in flight; "
        "for gradient accumulation run the earlier backward passes inside `with model.no_sync():`"
    )


def broadcast_from_rank0(module: nn.Module) -> None:
    """Give every rank rank 0's parameters and buffers."""
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor, src=0)


def _grad_or_zeros(param: Tensor) -> Tensor:
    if param.grad is None:
        param.grad = torch.zeros_like(param)
    return param.grad


_OWNER = "_perflab_data_parallel"  # attribute of a parameter: weakref to its wrapper


class _DataParallel(nn.Module):
    """What the four variants share: the wrapped module, the broadcast, the parameter list,
    ``no_sync``, and the hooks (removed when a newer wrapper takes the module over)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError(
                f"{type(self).__name__} needs a process group: run it under "
                "perflab.distributed.launch or torchrun"
            )
        self.module = module
        self.world_size = dist.get_world_size()
        self.require_sync = True
        self.replaced = False
        self._hooks: list = []
        broadcast_from_rank0(module)
        self.trained = [p for p in module.parameters() if p.requires_grad]
        for param in self.trained:
            older = getattr(param, _OWNER, lambda: None)()
            if older is not None and older is not self:
                older.release()
            setattr(param, _OWNER, weakref.ref(self))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _hook_every_parameter(self, hook) -> None:
        self._hooks = [p.register_post_accumulate_grad_hook(hook) for p in self.trained]

    def release(self) -> None:
        """Remove this wrapper's hooks; it no longer synchronises (a newer wrapper took the
        module over)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()
        self.replaced = True

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes inside accumulate local gradients without communication; the first
        backward after the block synchronises the accumulated sum."""
        previous, self.require_sync = self.require_sync, False
        try:
            yield
        finally:
            self.require_sync = previous

    def finish_gradient_synchronization(self) -> None:
        """Wait for (or run) the gradient all-reduces and average them; call after the last
        backward of a step, before the optimizer step."""
        if self.replaced:
            raise RuntimeError(
                f"this {type(self).__name__} was replaced by a newer wrapper of the same module; "
                "use the newer one"
            )
        if self.require_sync:
            self._synchronize()

    def _synchronize(self) -> None:
        raise NotImplementedError


class NoSync(_DataParallel):
    """Broadcast at construction, then no communication: each rank keeps its local gradients.
    Not data parallelism; the benchmark's compute-only baseline."""

    def _synchronize(self) -> None:
        pass


class DDPNaive(_DataParallel):
    """One blocking all-reduce per gradient, after backward."""

    def _synchronize(self) -> None:
        for param in self.trained:
            grad = _grad_or_zeros(param)
            dist.all_reduce(grad)
            grad.div_(self.world_size)


class DDPFlat(_DataParallel):
    """One blocking all-reduce of all gradients, flattened into one buffer, after backward."""

    def _synchronize(self) -> None:
        grads = [_grad_or_zeros(p) for p in self.trained]
        for dtype in dict.fromkeys(g.dtype for g in grads):  # one buffer per dtype
            same = [g for g in grads if g.dtype == dtype]
            flat = torch.cat([g.reshape(-1) for g in same])
            dist.all_reduce(flat)
            flat.div_(self.world_size)
            for grad, synced in zip(same, flat.split([g.numel() for g in same]), strict=True):
                grad.copy_(synced.view_as(grad))


class DDPIndividualParameters(_DataParallel):
    """An asynchronous all-reduce per parameter, started as soon as its gradient is ready."""

    def __init__(self, module: nn.Module):
        super().__init__(module)
        self._pending: dict[Tensor, dist.Work] = {}
        self._hook_every_parameter(self._on_grad_ready)

    def _on_grad_ready(self, param: Tensor) -> None:
        if not self.require_sync:
            return
        if param in self._pending:
            raise _second_backward_error(self)
        self._pending[param] = dist.all_reduce(param.grad, async_op=True)

    def _synchronize(self) -> None:
        for param in self.trained:  # unused this step: launched now, in the same order everywhere
            if param not in self._pending:
                self._pending[param] = dist.all_reduce(_grad_or_zeros(param), async_op=True)
        for param, work in self._pending.items():
            work.wait()
            param.grad.div_(self.world_size)
        self._pending.clear()


class _Bucket:
    """Parameters whose gradients travel together in one flat buffer."""

    def __init__(self, params: list[Tensor]):
        self.params = params
        self.offsets = {}
        offset = 0
        for param in params:
            self.offsets[param] = offset
            offset += param.numel()
        self.buffer = torch.zeros(offset, dtype=params[0].dtype, device=params[0].device)
        self.ready: set[Tensor] = set()
        self.work: dist.Work | None = None

    def slot(self, param: Tensor) -> Tensor:
        start = self.offsets[param]
        return self.buffer[start : start + param.numel()].view_as(param)

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()


def plan_buckets(params: list[Tensor], bucket_size_mb: float) -> list[list[Tensor]]:
    """Group ``params`` (in reverse order) into buckets of at most ``bucket_size_mb`` MB
    (10^6 bytes) each; a bucket changes at a dtype change, and a parameter larger than the size
    gets a bucket of its own."""
    if not bucket_size_mb > 0:
        raise ValueError(f"bucket_size_mb must be positive, got {bucket_size_mb!r}")
    limit = bucket_size_mb * 1e6
    buckets: list[list[Tensor]] = []
    size = 0.0
    for param in reversed(params):
        nbytes = param.numel() * param.element_size()
        if buckets and size + nbytes <= limit and buckets[-1][0].dtype == param.dtype:
            buckets[-1].append(param)
            size += nbytes
        else:
            buckets.append([param])
            size = nbytes
    return buckets


class DDPBucketed(_DataParallel):
    """Gradients grouped into buckets of ``bucket_size_mb`` MB; each bucket all-reduced
    asynchronously as soon as its last gradient is ready."""

    def __init__(self, module: nn.Module, bucket_size_mb: float):
        plan = plan_buckets([p for p in module.parameters() if p.requires_grad], bucket_size_mb)
        super().__init__(module)
        self.bucket_size_mb = bucket_size_mb
        self.buckets = [_Bucket(params) for params in plan]
        self._bucket_of = {p: bucket for bucket in self.buckets for p in bucket.params}
        self._hook_every_parameter(self._on_grad_ready)

    def _on_grad_ready(self, param: Tensor) -> None:
        if not self.require_sync:
            return
        bucket = self._bucket_of[param]
        if bucket.work is not None:
            raise _second_backward_error(self)
        slot = bucket.slot(param)
        if param.grad.data_ptr() != slot.data_ptr():  # accumulated into the view: already there
            slot.copy_(param.grad)
        bucket.ready.add(param)
        if len(bucket.ready) == len(bucket.params):
            bucket.work = dist.all_reduce(bucket.buffer, async_op=True)

    def _synchronize(self) -> None:
        for bucket in self.buckets:  # buckets with unused parameters: launched now, in order
            if bucket.work is None:
                for param in bucket.params:
                    if param not in bucket.ready:
                        bucket.slot(param).copy_(_grad_or_zeros(param))
                bucket.work = dist.all_reduce(bucket.buffer, async_op=True)
        for bucket in self.buckets:
            bucket.work.wait()
            bucket.buffer.div_(self.world_size)
            for param in bucket.params:  # the gradient becomes a view of the bucket: no copy
                param.grad = bucket.slot(param)
            bucket.ready.clear()
            bucket.work = None


class TorchDDP(nn.parallel.DistributedDataParallel):
    """PyTorch's own DDP with the same interface: it synchronises during backward (buckets of
    ``bucket_cap_mb`` MiB), so there is nothing left to finish."""

    def finish_gradient_synchronization(self) -> None:
        pass


VARIANTS = {
    "none": NoSync,
    "naive": DDPNaive,
    "flat": DDPFlat,
    "individual": DDPIndividualParameters,
    "bucketed": DDPBucketed,
    "torch": TorchDDP,
}


def make_data_parallel(variant: str, module: nn.Module, bucket_size_mb: float = 25) -> nn.Module:
    """Wrap ``module`` in one of ``VARIANTS``; ``bucket_size_mb`` is used by "bucketed" (MB)
    and "torch" (its ``bucket_cap_mb``, MiB)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown data-parallel variant {variant!r}; valid: {', '.join(VARIANTS)}")
    if variant == "bucketed":
        return DDPBucketed(module, bucket_size_mb)
    if variant == "torch":
        return TorchDDP(module, bucket_cap_mb=bucket_size_mb)
    return VARIANTS[variant](module)
