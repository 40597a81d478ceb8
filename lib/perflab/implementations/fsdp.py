"""Fully sharded data parallelism (notebook 08), after ZeRO stage 3 (Rajbhandari et al. 2020)
and PyTorch FSDP (Zhao et al. 2023).

- Every parameter of two or more dimensions, whatever module holds it, is flattened, padded
  to a multiple of the world size and cut into equal shards; each rank keeps one shard as an
  fp32 (the model's dtype) master ``nn.Parameter``. One-dimensional parameters (norm gains,
  biases) are replicated, their gradients all-reduced in ``finish_gradient_synchronization``.
- Just before a module's forward, its weights are all-gathered (in ``compute_dtype`` if given)
  and set on the module; the gathers of the next ``prefetch`` modules (in registration order)
  are started asynchronously; after its forward they are dropped. With ``prefetch=1`` (the
  default) module i's gather starts as module i-1 starts, that is once module i-2 has
  finished its forward: the handout's rule; 2 starts it a module earlier, 0 never prefetches.
  Tensors that backward needs from a gathered weight are not kept: a saved-tensor hook stores
  where they came from and gathers the weight again when backward unpacks it, so full weights
  live only while in use; as backward unpacks one, the gathers of the ``prefetch`` weights
  packed just before it (the next ones backward needs, in reverse order) are started
  asynchronously. ``arrivals`` counts the prefetched gathers that had finished when their
  weight was needed. (Real FSDP gathers whole blocks at once.)
- Backward reduce-scatters each weight's gradient in fp32 (float64 for float64 master weights):
  every rank gets the sum over ranks of its shard's gradient, divided by the world size.

The optimizer sees the shards (``FSDP(...).parameters()``); ``gather_full_params()`` returns
the full fp32 tensors by the wrapped model's parameter names. Floating-point inputs are cast to
``compute_dtype``; outputs stay in it.
"""

from __future__ import annotations

import time
import weakref

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.profiler import record_function

from perflab.implementations.ddp import broadcast_from_rank0
from perflab.implementations.fsdp_shards import (
    CastTo,
    ShardedWeight,
    ShardSpec,
    cast_floating,
    full_tensor,
    gather_shard,
    shard_parameter,
)


class FSDP(nn.Module):
    """Shard ``module``'s weights across ranks; compute in ``compute_dtype`` (None: the
    parameters' dtype) with master weights and gradients in the parameters' dtype."""

    def __init__(
        self, module: nn.Module, compute_dtype: torch.dtype | None = None, prefetch: int = 1
    ):
        super().__init__()
        if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 0:
            raise ValueError(
                f"prefetch must be an integer >= 0 (modules gathered ahead), got {prefetch!r}"
            )
        self.prefetch = prefetch
        if compute_dtype is not None and not isinstance(compute_dtype, torch.dtype):
            raise ValueError(
                f"compute_dtype must be a torch.dtype (torch.bfloat16, say) or None, got "
                f"{compute_dtype!r}"
            )
        if not dist.is_initialized():
            raise RuntimeError(
                "FSDP needs a process group: run it under perflab.distributed.launch or torchrun"
            )
        self.module = module
        self.world_size = dist.get_world_size()
        self.rank = dist.get_rank()
        broadcast_from_rank0(module)
        params = dict(module.named_parameters())  # first name of each (tied) parameter
        self.compute_dtype = compute_dtype
        first_name = {p: name for name, p in params.items()}
        self.aliases = {  # every name of every parameter -> its first name
            name: first_name[p] for name, p in module.named_parameters(remove_duplicate=False)
        }
        self.flat_params = nn.ParameterList()
        self.specs: dict[nn.Parameter, ShardSpec] = {}  # keyed by the local (shard) parameter
        local_of: dict[nn.Parameter, nn.Parameter] = {}
        for name, param in params.items():
            local, spec = shard_parameter(name, param, self.world_size, self.rank)
            self.flat_params.append(local)
            self.specs[local] = spec
            local_of[param] = local
        # Every module that holds a parameter (twice for tied weights), in registration order.
        self.units: list[tuple[nn.Module, list[tuple[str, nn.Parameter]]]] = []
        for submodule in module.modules():
            held = [
                (attr, local_of[p]) for attr, p in submodule._parameters.items() if p is not None
            ]
            if not held:
                continue
            for attr, _ in held:
                del submodule._parameters[attr]
                setattr(submodule, attr, None)
            self.units.append((submodule, held))
            submodule.register_forward_pre_hook(self._make_pre_hook(len(self.units) - 1))
            submodule.register_forward_hook(self._make_post_hook(len(self.units) - 1))
        self._prefetched: dict[nn.Parameter, tuple[Tensor, dist.Work]] = {}
        # backward: every packed weight by its pack number (in forward order), the numbers
        # already unpacked, and the gathers started ahead of their unpacking
        self._packed: dict[int, nn.Parameter] = {}
        self._unpacked: set[int] = set()
        self._backward_prefetched: dict[int, tuple[Tensor, dist.Work]] = {}
        self._packs = 0
        #: prefetched gathers by pass: [finished when their weight was needed, prefetched]
        self.arrivals = {"forward": [0, 0], "backward": [0, 0]}
        self._live: dict[int, nn.Parameter] = {}  # storage address of a gathered weight -> shard
        self.backward_gathers = 0  # weights gathered again for backward, since construction
        self._forward_gathers: list[weakref.ref] = []  # this forward's gathered buffers
        self._compute_ranges: dict[int, record_function] = {}  # open "fsdp.forward" ranges

    @property
    def _dtype(self) -> torch.dtype:
        return self.compute_dtype or self.flat_params[0].dtype

    # --- forward: gather, prefetch, drop --------------------------------------------------
    def _arrived(self, work: dist.Work, phase: str) -> None:
        """Count a prefetched gather, and whether it had finished, then wait for it. Asked of
        its future: ``Work.is_completed()`` blocks on the work's lock while holding the GIL,
        and a backend thread finishing the work can need the GIL under that lock (profiled
        runs deadlocked so, one rank a collective behind the other)."""
        self.arrivals[phase][0] += bool(work.get_future().done())
        self.arrivals[phase][1] += 1
        work.wait()

    def _gathered(self, local: nn.Parameter) -> Tensor:
        if local in self._prefetched:
            flat, work = self._prefetched.pop(local)
            self._arrived(work, "forward")
        else:
            flat, _ = gather_shard(local, self.specs[local], self._dtype)
        self._live[flat.untyped_storage().data_ptr()] = local
        self._forward_gathers.append(weakref.ref(flat))
        return ShardedWeight.apply(local, flat, self.specs[local])

    def _prefetch(self, unit: int) -> None:
        if unit >= len(self.units):
            return
        for _, local in self.units[unit][1]:
            if self.specs[local].sharded and local not in self._prefetched:
                self._prefetched[local] = gather_shard(local, self.specs[local], self._dtype, True)

    def _make_pre_hook(self, unit: int):
        def pre_hook(submodule, args):
            # Profiler ranges (free when no profiler runs): how long this module waited for its
            # weights, then its own forward (closed by the post-hook); ``fsdp_timeline``.
            with record_function("fsdp.wait"):
                for attr, local in self.units[unit][1]:
                    if self.specs[local].sharded:
                        full = self._gathered(local)
                    else:
                        full = CastTo.apply(local, self._dtype)
                    setattr(submodule, attr, full)
            for ahead in range(1, self.prefetch + 1):
                self._prefetch(unit + ahead)
            self._compute_ranges[unit] = record_function("fsdp.forward").__enter__()

        return pre_hook

    def _make_post_hook(self, unit: int):
        def post_hook(submodule, args, output):
            opened = self._compute_ranges.pop(unit, None)
            if opened is not None:
                opened.__exit__(None, None, None)
            for attr, local in self.units[unit][1]:
                full = getattr(submodule, attr)
                if self.specs[local].sharded:
                    self._live.pop(full.untyped_storage().data_ptr(), None)
                setattr(submodule, attr, None)

        return post_hook

    # --- backward: gather again what backward needs ----------------------------------------
    def _pack(self, tensor: Tensor):
        local = self._live.get(tensor.untyped_storage().data_ptr())
        if local is None:
            return tensor
        number = self._packs
        self._packs += 1
        self._packed[number] = local
        return (local, tensor.size(), tensor.stride(), tensor.storage_offset(), number)

    def _unpack(self, packed):
        if isinstance(packed, Tensor):
            return packed
        local, size, stride, offset, number = packed
        self.backward_gathers += 1
        self._unpacked.add(number)
        if number in self._backward_prefetched:
            flat, work = self._backward_prefetched.pop(number)
            self._arrived(work, "backward")
        else:
            flat, _ = gather_shard(local, self.specs[local], self._dtype)
        self._prefetch_backward(number)
        return flat.as_strided(size, stride, offset)

    def _prefetch_backward(self, number: int) -> None:
        """Start the gathers of the ``prefetch`` weights packed just before ``number``: backward
        unpacks in about the reverse of the order forward packed."""
        started, earlier = 0, number - 1
        while started < self.prefetch and earlier in self._packed:
            if earlier not in self._unpacked and earlier not in self._backward_prefetched:
                local = self._packed[earlier]
                self._backward_prefetched[earlier] = gather_shard(
                    local, self.specs[local], self._dtype, True
                )
                started += 1
            earlier -= 1

    def _drop_backward_prefetches(self) -> None:
        """Wait for and drop the gathers started for weights backward never unpacked, and
        forget the packs (a new forward packs anew). A checkpointed block recomputed in
        backward runs its modules' pre-hooks again, which start forward gathers of the modules
        after it: those are dropped too, since they hold weights from before the optimizer
        step that the next forward would otherwise use."""
        for _flat, work in [*self._backward_prefetched.values(), *self._prefetched.values()]:
            work.wait()
        self._backward_prefetched.clear()
        self._prefetched.clear()
        self._packed.clear()
        self._unpacked.clear()

    def forward(self, *args, **kwargs):
        if self.compute_dtype is not None:
            args = [cast_floating(a, self.compute_dtype) for a in args]
            kwargs = {k: cast_floating(v, self.compute_dtype) for k, v in kwargs.items()}
        self._forward_gathers.clear()
        self._drop_backward_prefetches()
        # Entries a checkpointed block's recomputation added in the last backward (its
        # post-hook need not run: the recomputation stops early) are stale: their storage is
        # freed, and an activation given the same address must not be packed as a weight (one
        # rank gathering once more than the others desynchronises the collectives).
        self._live.clear()
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                return self.module(*args, **kwargs)
        finally:
            for _flat, work in self._prefetched.values():  # gathered for a module never run
                work.wait()
            self._prefetched.clear()
            for opened in reversed(self._compute_ranges.values()):  # a forward that raised
                opened.__exit__(None, None, None)
            self._compute_ranges.clear()
            self._live.clear()

    def full_weights_alive(self, settle_s: float = 1.0) -> int:
        """How many of the last forward's gathered weights are still in memory (0 after the
        forward: backward gathers them again). A prefetched gather that just completed stays
        referenced by the backend's worker thread for a moment (Gloo: about a millisecond), so
        this waits up to ``settle_s`` for the count to reach 0; a weight that something really
        keeps stays counted."""
        deadline = time.monotonic() + settle_s
        while True:
            alive = sum(ref() is not None for ref in self._forward_gathers)
            if alive == 0 or time.monotonic() >= deadline:
                return alive
            time.sleep(0.001)

    # --- after backward ---------------------------------------------------------------------
    def finish_gradient_synchronization(self) -> None:
        """Average the replicated parameters' gradients (the shards' were reduce-scattered
        during backward)."""
        self._drop_backward_prefetches()
        grads = []
        for local in self.flat_params:
            if local.requires_grad and not self.specs[local].sharded:
                if local.grad is None:
                    local.grad = torch.zeros_like(local)
                grads.append(local.grad)
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat.div_(self.world_size)
        for grad, synced in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
            grad.copy_(synced.view_as(grad))

    @torch.no_grad()
    def _gather_full(self, value_of) -> dict[str, Tensor]:
        full = {}
        for local in self.flat_params:
            full[self.specs[local].name] = full_tensor(value_of(local), self.specs[local])
        return {name: full[first] for name, first in self.aliases.items()}

    def gather_full_params(self) -> dict[str, Tensor]:
        """Full parameters (master dtype) by every name the wrapped model gave them (tied
        weights under each of their names). A collective: call it on every rank."""
        return self._gather_full(lambda local: local)

    def gather_full_grads(self) -> dict[str, Tensor]:
        """Full gradients, named like ``gather_full_params``'s (after backward and
        ``finish_gradient_synchronization``; zeros where a parameter got none). A collective."""
        return self._gather_full(
            lambda local: local.grad if local.grad is not None else torch.zeros_like(local)
        )
