"""How much memory the loss head takes: logits + ``F.cross_entropy`` against
``fused_linear_cross_entropy`` and against torch's own chunked ``F.linear_cross_entropy``
(``torch.nn.LinearCrossEntropyOptions``), forward and backward, measured (notebook 09)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd
import torch
import torch.nn.functional as F

from perflab.implementations.fused_cross_entropy import (
    default_chunk_size,
    fused_linear_cross_entropy,
)
from perflab.measure.device import resolve_device
from perflab.measure.stats import ROUNDS
from perflab.measure.timeline import peak_memory

if TYPE_CHECKING:
    from perflab.measure.comparison import Comparison


def plain_head_loss(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """The reference: every logit at once, then ``F.cross_entropy`` (mean)."""
    return F.cross_entropy((hidden @ weight.T).float(), targets)


def torch_chunked_loss(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """PyTorch's own fused head: ``F.linear_cross_entropy`` with its chunked path
    (``LinearCrossEntropyOptions()``: chunking chosen by torch)."""
    return F.linear_cross_entropy(
        hidden, weight, targets, options=torch.nn.LinearCrossEntropyOptions()
    )


def head_peak_memory(
    tokens: int,
    vocab: int,
    d_model: int,
    *,
    chunk_size: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "auto",
    seed: int = 0,
) -> pd.DataFrame:
    """Peak bytes of one forward + backward of the head (above the inputs, which exist
    before), plain, fused and torch's chunked head, with the size of the full logits in the
    inputs' dtype for scale (the fused head never holds them); ``of_plain`` is each peak over
    the plain one's."""
    dev = resolve_device(device)
    hidden, weight, targets = (
        t.detach() for t in _head_inputs(tokens, vocab, d_model, dtype, dev, seed)
    )
    chunk = chunk_size or default_chunk_size(tokens, vocab, d_model)
    methods = {
        "plain": lambda h, w: plain_head_loss(h, w, targets),
        "fused": lambda h, w: fused_linear_cross_entropy(h, w, targets, chunk_size=chunk),
        "torch chunked": lambda h, w: torch_chunked_loss(h, w, targets),
    }
    rows = []
    for name, loss_fn in methods.items():
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        peak = peak_memory(lambda h=h, w=w, loss_fn=loss_fn: loss_fn(h, w).backward(), dev)
        rows.append(
            {
                "method": name,
                "tokens": tokens,
                "vocab": vocab,
                "d_model": d_model,
                "dtype": str(dtype).removeprefix("torch."),
                "chunk_size": chunk if name == "fused" else None,
                "peak_bytes": peak,
                "logits_bytes": tokens * vocab * hidden.element_size(),
            }
        )
    frame = pd.DataFrame(rows)
    return frame.assign(of_plain=frame["peak_bytes"] / frame["peak_bytes"].iloc[0])


def _head_inputs(
    tokens: int, vocab: int, d_model: int, dtype: torch.dtype, dev: torch.device, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, d_model, generator=generator, dtype=dtype).to(dev)
    weight = (torch.randn(vocab, d_model, generator=generator, dtype=dtype) * d_model**-0.5).to(dev)
    targets = torch.randint(0, vocab, (tokens,), generator=generator).to(dev)
    return hidden.requires_grad_(), weight.requires_grad_(), targets


def chunk_size_sweep(
    tokens: int,
    vocab: int,
    d_model: int,
    chunk_sizes: list[int],
    *,
    steps: int = 6,
    warmup: int = 1,
    dtype: torch.dtype = torch.float32,
    device: str = "auto",
    seed: int = 0,
) -> pd.DataFrame:
    """The fused head's forward + backward at each chunk size: median time with its interval
    and ``unstable`` flag (``time_fn``), and peak bytes above the inputs with their ratio to the
    hidden states; ``default`` marks the size ``default_chunk_size`` picks. A measurement to
    choose a chunk size from: fewer, larger chunks run fewer, larger matmuls; smaller ones
    hold fewer logits."""
    from perflab.measure.timer import time_fn

    if not chunk_sizes or any(not isinstance(c, int) or c < 1 for c in chunk_sizes):
        raise ValueError(f"chunk_sizes must be positive integers, got {chunk_sizes!r}")
    dev = resolve_device(device)
    hidden, weight, targets = _head_inputs(tokens, vocab, d_model, dtype, dev, seed)
    chosen = default_chunk_size(tokens, vocab, d_model)
    rows = []
    for chunk in chunk_sizes:

        def step(chunk=chunk) -> None:
            hidden.grad = weight.grad = None
            fused_linear_cross_entropy(hidden, weight, targets, chunk_size=chunk).backward()

        timing = time_fn(step, warmup=warmup, steps=steps, device=dev)
        hidden.grad = weight.grad = None
        peak = peak_memory(step, dev)
        interval = timing.median_ci
        rows.append(
            {
                "chunk_size": chunk,
                "median_s": timing.median,
                "median_ci_low_s": interval.low,
                "median_ci_high_s": interval.high,
                "median_ci_level": interval.level,
                "unstable": timing.unstable,
                "peak_bytes": peak,
                "peak_over_hidden": peak / (hidden.numel() * hidden.element_size()),
                "default": chunk == chosen,
            }
        )
    return pd.DataFrame(rows)


def compare_with_torch_head(
    tokens: int,
    vocab: int,
    d_model: int,
    *,
    rounds: int = ROUNDS,
    chunk_size: int | None = None,
    dtype: torch.dtype = torch.float32,
    device: str = "auto",
    seed: int = 0,
) -> Comparison:
    """perflab's fused head against torch's chunked ``F.linear_cross_entropy``, forward +
    backward, interleaved (``perflab.bench.compare``: b = torch's against a = perflab's)."""
    from perflab.measure.comparison import compare

    dev = resolve_device(device)
    hidden, weight, targets = _head_inputs(tokens, vocab, d_model, dtype, dev, seed)

    def ours() -> None:
        hidden.grad = weight.grad = None
        fused_linear_cross_entropy(hidden, weight, targets, chunk_size=chunk_size).backward()

    def theirs() -> None:
        hidden.grad = weight.grad = None
        torch_chunked_loss(hidden, weight, targets).backward()

    return compare(
        ours,
        theirs,
        rounds=rounds,
        warmup=1,
        device=dev,
        names=("perflab fused head", "torch linear_cross_entropy"),
    )
