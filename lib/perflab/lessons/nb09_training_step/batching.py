"""Two fixes a training-loop review finds, measured (notebook 09, section 4).

- **The loss one example at a time**: a Python loop calling the loss on each sequence's logits
  and averaging the results, against one call on the whole batch. With sequences of equal
  length and no ignored targets, the mean of the per-sequence means is the mean over all
  tokens, so both give the same loss and gradient (``check_loss_batching``, in float64); the
  loop only adds calls (one loss and one backward per sequence).
- **Padding a batch of unequal sequences**: the corpus's speeches (``speeches``) batched in a
  random order, each batch padded to its longest sequence, against batched by length
  (``"bucketed"``: sorted by length, cut into batches, the batches shuffled), so that each
  batch holds sequences of similar lengths. Padded positions are ignored by the loss (target
  ``IGNORE``) and, with causal attention and the padding at the end, never attended to by a
  real token, so both orders compute the same per-token losses (``loss_sum``); bucketing only
  removes padding. What it costs elsewhere: batches of similar lengths are not a uniform sample
  of the data, which is why the batches themselves are shuffled.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perflab.implementations.model import ModelConfig, build_model
from perflab.lessons.nb09_training_step.data import tokenise
from perflab.measure.comparison import Comparison, compare
from perflab.measure.stats import is_unstable

IGNORE = -100  # the target of a padded position: F.cross_entropy's ignore_index
ORDERS = ("random", "bucketed")
Batch = tuple[Tensor, Tensor]


def loss_loop(logits: Tensor, targets: Tensor) -> Tensor:
    """The mean of each sequence's mean token loss, one ``F.cross_entropy`` call per sequence
    (``logits`` (batch, tokens, vocab), ``targets`` (batch, tokens))."""
    return torch.stack([F.cross_entropy(logits[i], targets[i]) for i in range(len(logits))]).mean()


def loss_batched(logits: Tensor, targets: Tensor) -> Tensor:
    """The mean token loss of the whole batch in one call."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _logits_and_targets(
    batch: int, seq_len: int, vocab: int, dtype: torch.dtype, device: torch.device | str, seed: int
) -> tuple[Tensor, Tensor]:
    if min(batch, seq_len, vocab) < 1:
        raise ValueError(
            f"batch, seq_len and vocab must be positive, got {batch}, {seq_len}, {vocab}"
        )
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, seq_len, vocab, generator=generator, dtype=dtype)
    targets = torch.randint(0, vocab, (batch, seq_len), generator=generator)
    return logits.to(device).requires_grad_(), targets.to(device)


def check_loss_batching(batch: int, seq_len: int, vocab: int, *, seed: int = 0) -> dict:
    """The loop and the one call on the same random float64 logits: the largest difference of
    the losses and of the gradients with respect to the logits, and whether both are within
    1e-12."""
    logits, targets = _logits_and_targets(batch, seq_len, vocab, torch.float64, "cpu", seed)
    looped, batched = loss_loop(logits, targets), loss_batched(logits, targets)
    (grad_loop,) = torch.autograd.grad(looped, logits)
    (grad_batched,) = torch.autograd.grad(batched, logits)
    loss_diff = (looped - batched).abs().item()
    grad_diff = (grad_loop - grad_batched).abs().max().item()
    return {
        "dtype": "float64",
        "loss_diff": loss_diff,
        "grad_diff": grad_diff,
        "matches": loss_diff <= 1e-12 and grad_diff <= 1e-12,
    }


def compare_loss_batching(
    batch: int,
    seq_len: int,
    vocab: int,
    *,
    rounds: int,
    device: torch.device | str = "cpu",
    warmup: int = 1,
    seed: int = 0,
) -> Comparison:
    """The loop against the one call, each a loss and its backward to the logits (float32,
    random), interleaved (``compare``)."""
    logits, targets = _logits_and_targets(batch, seq_len, vocab, torch.float32, device, seed)

    def loss_and_backward(loss_fn) -> None:
        loss_fn(logits, targets).backward()
        logits.grad = None

    return compare(
        partial(loss_and_backward, loss_loop),
        partial(loss_and_backward, loss_batched),
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=("loss loop", "one call"),
    )


def speeches(text: str, max_len: int, *, min_len: int = 1) -> list[Tensor]:
    """The text's speeches (blocks between blank lines) as byte ids (int64), each cut to at most
    ``max_len`` + 1 tokens (inputs and their next-token targets); those shorter than
    ``min_len`` + 1 are left out."""
    if max_len < 1 or min_len < 1 or min_len > max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    blocks = (tokenise(block)[: max_len + 1].long() for block in text.split("\n\n"))
    found = [block for block in blocks if len(block) >= min_len + 1]
    if not found:
        raise ValueError(f"no speech of at least {min_len + 1} bytes in the text")
    return found


def length_batches(
    sequences: list[Tensor], batch_size: int, order: str, *, seed: int = 0
) -> list[Batch]:
    """Batches of ``batch_size`` sequences (the last may be smaller), in ``order``: "random"
    (a seeded shuffle) or "bucketed" (the same shuffle sorted by length, cut into batches, the
    batches shuffled). Each batch is padded to its longest sequence: inputs with 0, targets
    with ``IGNORE``."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; valid: {', '.join(ORDERS)}")
    if batch_size < 1 or not sequences:
        raise ValueError(
            f"need batch_size >= 1 and sequences, got {batch_size} and {len(sequences)} sequences"
        )
    if min(map(len, sequences)) < 2:
        raise ValueError("every sequence needs at least 2 tokens (an input and its target)")
    generator = torch.Generator().manual_seed(seed)
    shuffled = torch.randperm(len(sequences), generator=generator).tolist()
    if order == "bucketed":
        shuffled.sort(key=lambda i: len(sequences[i]))  # stable: ties keep the shuffle
    groups = [shuffled[i : i + batch_size] for i in range(0, len(shuffled), batch_size)]
    if order == "bucketed":
        groups = [groups[i] for i in torch.randperm(len(groups), generator=generator).tolist()]
    batches = []
    for group in groups:
        longest = max(len(sequences[i]) for i in group) - 1
        inputs = torch.zeros(len(group), longest, dtype=torch.long)
        targets = torch.full((len(group), longest), IGNORE, dtype=torch.long)
        for row, i in enumerate(group):
            tokens = sequences[i]
            inputs[row, : len(tokens) - 1] = tokens[:-1]
            targets[row, : len(tokens) - 1] = tokens[1:]
        batches.append((inputs, targets))
    return batches


def padding_share(batches: list[Batch]) -> float:
    """Padded positions over all positions of ``batches``."""
    padded = sum(int((targets == IGNORE).sum()) for _, targets in batches)
    return padded / sum(targets.numel() for _, targets in batches)


def loss_sum(model: nn.Module, batches: list[Batch]) -> Tensor:
    """The sum of every real token's loss over ``batches`` (padded targets ignored)."""
    device = next(model.parameters()).device
    return sum(
        F.cross_entropy(
            model(inputs.to(device)).flatten(0, 1),
            targets.to(device).flatten(),
            ignore_index=IGNORE,
            reduction="sum",
        )
        for inputs, targets in batches
    )


def compare_bucketing(
    model: nn.Module,
    sequences: list[Tensor],
    batch_size: int,
    *,
    rounds: int,
    warmup: int = 1,
    seed: int = 0,
) -> tuple[pd.DataFrame, Comparison]:
    """The same ``sequences`` batched in a random order against bucketed by length, each call
    a forward and backward over all their batches (the loss summed over real tokens),
    interleaved (``compare``). Returns, as every ``compare_*`` that also has a table does, the
    table and then the comparison. The table has one row per order: batches, padded positions
    and their share, real tokens, the median of its rounds (each the faster of the round's two
    runs) with ``unstable``, and real tokens per second at the median."""
    device = next(model.parameters()).device
    orders = {order: length_batches(sequences, batch_size, order, seed=seed) for order in ORDERS}

    def epoch(order: str) -> None:
        model.zero_grad(set_to_none=True)
        for inputs, targets in orders[order]:
            F.cross_entropy(
                model(inputs.to(device)).flatten(0, 1),
                targets.to(device).flatten(),
                ignore_index=IGNORE,
                reduction="sum",
            ).backward()

    result = compare(
        partial(epoch, "random"),
        partial(epoch, "bucketed"),
        rounds=rounds,
        warmup=warmup,
        device=device,
        names=ORDERS,
    )
    real = sum(len(s) - 1 for s in sequences)
    rows = []
    for order, times in zip(ORDERS, (result.times_a, result.times_b), strict=True):
        batches, median = orders[order], float(np.median(times))
        positions = sum(targets.numel() for _, targets in batches)
        rows.append(
            {
                "order": order,
                "batches": len(batches),
                "positions": positions,
                "real_tokens": real,
                "padding_share": padding_share(batches),
                "median_s": median,
                "unstable": is_unstable(times),
                "tokens_per_s": real / median,
            }
        )
    return pd.DataFrame(rows), result


def check_bucketing(
    config: ModelConfig, sequences: list[Tensor], batch_size: int, *, seed: int = 0
) -> dict:
    """Both orders' summed token losses on a random float64 ``TransformerLM(config)``, beside
    the sum over the sequences run one at a time, unpadded: their largest relative difference,
    and whether it is within 1e-12 (padding changes no real token's loss)."""
    model = build_model(config, seed=seed, dtype=torch.float64)
    with torch.no_grad():
        alone = loss_sum(model, [(s[None, :-1], s[None, 1:]) for s in sequences]).item()
        sums = {
            order: loss_sum(model, length_batches(sequences, batch_size, order, seed=seed)).item()
            for order in ORDERS
        }
    worst = max(abs(value - alone) / abs(alone) for value in sums.values())
    return {
        **{f"loss_sum_{order}": value for order, value in sums.items()},
        "loss_sum_one_at_a_time": alone,
        "max_relative_diff": worst,
        "matches": worst <= 1e-12,
    }
