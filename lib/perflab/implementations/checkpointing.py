"""Activation checkpointing over the block stack: trade recomputation for memory.

Without checkpointing the backward pass needs every block's activations, so peak activation
memory grows linearly with depth L. Checkpointing keeps only each group's input and recomputes
the group's activations during backward:

- **single-level**, groups of g blocks: L/g group inputs plus one group's activations, so the
  peak ~ L/g + g (block-activation units) is smallest near g = sqrt(L) (Chen et al. 2016,
  "Training Deep Nets with Sublinear Memory Cost");
- **nested**: split the stack in halves, checkpoint each half, and recurse inside it. At any
  moment only the inputs of the halves on the current path (two per level, log2 L levels) and
  one block's activations are held: peak ~ log2 L, for about log2 L extra forwards.

Used by notebook 04 (``torch.utils.checkpoint`` with ``use_reentrant=False``).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

STRATEGIES = ("none", "single", "nested")


def _run(blocks: Sequence[nn.Module], x: Tensor) -> Tensor:
    for block in blocks:
        x = block(x)
    return x


def check_strategy(strategy: str, group_size: int | None, num_blocks: int) -> None:
    """One clear ValueError for an unknown strategy or a group size out of range."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    if strategy == "single" and (
        not isinstance(group_size, int) or not 1 <= group_size <= num_blocks
    ):
        raise ValueError(f"group_size must be an integer from 1 to {num_blocks}, got {group_size}")


def run_single_level(blocks: Sequence[nn.Module], x: Tensor, group_size: int) -> Tensor:
    """Blocks in consecutive groups of ``group_size``, each group checkpointed."""
    check_strategy("single", group_size, len(blocks))
    for start in range(0, len(blocks), group_size):
        group = blocks[start : start + group_size]
        x = checkpoint(_run, group, x, use_reentrant=False)
    return x


def run_nested(blocks: Sequence[nn.Module], x: Tensor) -> Tensor:
    """Recursive halving: each half checkpointed, and the same inside it, down to one block."""
    if len(blocks) == 1:
        return blocks[0](x)
    middle = len(blocks) // 2
    x = checkpoint(run_nested, blocks[:middle], x, use_reentrant=False)
    return checkpoint(run_nested, blocks[middle:], x, use_reentrant=False)


def run_blocks(
    blocks: Sequence[nn.Module], x: Tensor, strategy: str = "none", group_size: int | None = None
) -> Tensor:
    """The block stack with ``strategy`` "none", "single" (needs ``group_size``) or "nested"."""
    blocks = list(blocks)
    check_strategy(strategy, group_size, len(blocks))
    if strategy == "none":
        return _run(blocks, x)
    if strategy == "single":
        return run_single_level(blocks, x, group_size)
    return run_nested(blocks, x)


def forward_counts(num_blocks: int, strategy: str, group_size: int | None = None) -> list[int]:
    """How many times each block's forward runs in one forward + backward pass with
    ``strategy``, counted on tiny stand-in blocks (the count depends only on the arrangement):
    1 without checkpointing, 2 single-level, 1 + the block's depth in the recursion nested
    (1 + log2 L for L a power of two, so nested costs O(L log L) forward compute in all).

    Counted with PyTorch's early stop off: by default a recomputation stops as soon as the
    tensors backward needs exist, which can skip the tail of a group's last block (a saving
    these counts leave out, so they are an upper bound)."""
    import torch
    from torch.utils.checkpoint import set_checkpoint_early_stop

    counts = [0] * num_blocks
    blocks = [nn.Sequential(nn.Linear(2, 2), nn.Tanh()) for _ in range(num_blocks)]
    for index, block in enumerate(blocks):
        block.register_forward_hook(lambda *_, i=index: counts.__setitem__(i, counts[i] + 1))
    x = torch.ones(1, 2, requires_grad=True)
    with set_checkpoint_early_stop(False):
        run_blocks(blocks, x, strategy, group_size).sum().backward()
    return counts
