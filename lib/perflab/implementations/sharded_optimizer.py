"""Optimizer-state sharding, ZeRO stage 1 (Rajbhandari et al. 2020), around any
``torch.optim.Optimizer`` class (notebook 08).

Each parameter is owned by one rank (largest first, each to the rank owning the fewest
elements so far); a rank keeps optimizer state (AdamW: two moments, 8 bytes per fp32
parameter) for its own parameters only and updates only those; after its step, every
parameter is broadcast from its owner. Gradients must already be averaged across ranks (any
data-parallel wrapper of ``perflab.implementations.ddp``). With ``N`` ranks and ``P`` parameters,
optimizer state per rank falls from ``8 P`` to about ``8 P / N`` bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist
from torch import Tensor


class ShardedOptimizer(torch.optim.Optimizer):
    """``optimizer_cls(**kwargs)`` on this rank's share of ``params``; a ``torch.optim.Optimizer``
    whose ``param_groups`` hold every parameter (so learning-rate schedulers and
    ``zero_grad`` work as usual)."""

    def __init__(self, params: Iterable, optimizer_cls: type[torch.optim.Optimizer], **kwargs):
        if not dist.is_initialized():
            raise RuntimeError(
                "ShardedOptimizer needs a process group: run it under "
                "perflab.distributed.launch or torchrun"
            )
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.optimizer_cls = optimizer_cls
        self.owner: dict[Tensor, int] = {}
        self.elements_per_rank = [0] * self.world_size
        self.local_optimizer: torch.optim.Optimizer | None = None
        # The class's own defaults (AdamW's betas, ...) so every group has every key.
        defaults = optimizer_cls([torch.zeros(1, requires_grad=True)], **kwargs).defaults
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        """Add a group to every rank's view; this rank's optimizer gets the parameters it owns
        (possibly none) with the group's hyperparameters."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        mine = []
        # Largest first, each to the rank holding the fewest elements so far (LPT balancing).
        for param in sorted(group["params"], key=lambda p: -p.numel()):
            owner = min(range(self.world_size), key=self.elements_per_rank.__getitem__)
            self.elements_per_rank[owner] += param.numel()
            self.owner[param] = owner
            if owner == self.rank:
                mine.append(param)
        local_group = {**{k: v for k, v in group.items() if k != "params"}, "params": mine}
        if self.local_optimizer is None:
            self.local_optimizer = self.optimizer_cls([local_group])
        else:
            self.local_optimizer.add_param_group(local_group)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        """Update this rank's parameters, then broadcast every parameter from its owner."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, local_group in zip(
            self.param_groups, self.local_optimizer.param_groups, strict=True
        ):
            local_group.update({k: v for k, v in group.items() if k != "params"})
        self.local_optimizer.step()
        works = [dist.broadcast(p, src=owner, async_op=True) for p, owner in self.owner.items()]
        for work in works:
            work.wait()
        return loss

    def local_state_bytes(self) -> int:
        """Bytes of optimizer state this rank holds (its shard)."""
        return optimizer_state_bytes(self.local_optimizer)

    def state_dict(self) -> dict:
        """This rank's shard of the state (each rank saves its own)."""
        return self.local_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        """Load this rank's shard (saved by ``state_dict`` on the same world size), with the
        saved hyperparameters: ``step`` copies the outer groups' values (what schedulers
        change) onto the local ones, so the outer groups take the loaded values too."""
        self.local_optimizer.load_state_dict(state_dict)
        for group, local_group in zip(
            self.param_groups, self.local_optimizer.param_groups, strict=True
        ):
            group.update({k: v for k, v in local_group.items() if k != "params"})


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in ``optimizer.state`` (moments, step counters)."""
    return sum(
        value.numel() * value.element_size()
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, Tensor)
    )
