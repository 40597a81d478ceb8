"""How much memory the loss head takes: logits + ``F.cross_entropy`` against
``fused_linear_cross_entropy``, forward and backward, measured (notebook 09)."""

from __future__ import annotations

import pandas as pd
import torch
import torch.nn.functional as F

from perflab.device import resolve_device
from perflab.fused_cross_entropy import default_chunk_size, fused_linear_cross_entropy
from perflab.memory.timeline import peak_memory


def plain_head_loss(hidden: torch.Tensor, weight: torch.Tensor,
                    targets: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The reference: every logit at once, then ``F.cross_entropy`` (mean)."""
    return F.cross_entropy((hidden @ weight.T).float(), targets)


def head_peak_memory(tokens: int, vocab: int, d_model: int, *, chunk_size: int | None = None,
                     dtype: torch.dtype = torch.float32, device: str = "auto",
                     seed: int = 0) -> pd.DataFrame:  # fmt: skip
    """Peak bytes of one forward + backward of the head (above the inputs, which exist
    before), plain and fused, with the size of the full logits in the inputs' dtype for scale
    (the fused head never holds them); ``of_plain`` is each peak over the plain one's."""
    dev = resolve_device(device)
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, d_model, generator=generator, dtype=dtype).to(dev)
    weight = (torch.randn(vocab, d_model, generator=generator, dtype=dtype) * d_model**-0.5).to(dev)
    targets = torch.randint(0, vocab, (tokens,), generator=generator).to(dev)
    chunk = chunk_size or default_chunk_size(tokens, vocab, d_model)
    methods = {
        "plain": lambda h, w: plain_head_loss(h, w, targets),
        "fused": lambda h, w: fused_linear_cross_entropy(h, w, targets, chunk_size=chunk),
    }
    rows = []
    for name, loss_fn in methods.items():
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        peak = peak_memory(lambda h=h, w=w, loss_fn=loss_fn: loss_fn(h, w).backward(), dev)
        rows.append({"method": name, "tokens": tokens, "vocab": vocab, "d_model": d_model,
                     "dtype": str(dtype).removeprefix("torch."),
                     "chunk_size": chunk if name == "fused" else None, "peak_bytes": peak,
                     "logits_bytes": tokens * vocab * hidden.element_size()})  # fmt: skip
    frame = pd.DataFrame(rows)
    return frame.assign(of_plain=frame["peak_bytes"] / frame["peak_bytes"].iloc[0])
