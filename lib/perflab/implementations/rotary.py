"""Rotary position embedding (Su et al. 2021), the model's positions (``model``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (Su et al. 2021): rotates pairs of channels by an angle
    proportional to the position, so that q.k depends on the relative offset only.

    The cos and sin tables of every position are computed once, at construction; with
    ``precomputed = False`` they are computed again at every call from the positions (the
    same numbers; notebook 10 measures what the tables save a decoder). The stored tables are
    float32; a float64 input gets tables computed in float64 (never float32 angles widened)."""

    def __init__(self, head_dim: int, context_length: int, theta: float):
        super().__init__()
        self.head_dim, self.theta = head_dim, theta
        inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(context_length, dtype=torch.float32), inv_freq)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        self.precomputed = True

    def tables(
        self, positions: Tensor, dtype: torch.dtype = torch.float32
    ) -> tuple[Tensor, Tensor]:
        """cos and sin at ``positions`` (any shape), shape (*positions.shape, head_dim / 2);
        in float64 (computed then) for ``dtype`` float64, else the float32 tables."""
        if dtype == torch.float64:
            exponents = torch.arange(0, self.head_dim, 2, dtype=dtype, device=positions.device)
            inv_freq = self.theta ** (-exponents / self.head_dim)
            angles = positions.to(dtype)[..., None] * inv_freq
            return angles.cos(), angles.sin()
        if self.precomputed:
            return self.cos[positions], self.sin[positions]
        angles = positions.to(torch.float32)[..., None] * self.inv_freq
        return angles.cos(), angles.sin()

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        """``x`` (..., seq, head_dim) at positions 0 .. seq - 1, or at ``positions`` (batch,
        seq) for x of shape (batch, heads, seq, head_dim): a decoder's new tokens, each
        sequence at its own offset."""
        if positions is None:
            seq_len = x.shape[-2]
            if self.precomputed and x.dtype != torch.float64:
                cos, sin = self.cos[:seq_len].to(x.dtype), self.sin[:seq_len].to(x.dtype)
            else:
                cos, sin = (
                    t.to(x.dtype)
                    for t in self.tables(torch.arange(seq_len, device=x.device), x.dtype)
                )
        else:  # (batch, 1, seq, head_dim / 2): the same angles for every head
            cos, sin = (t.to(x.dtype)[:, None] for t in self.tables(positions, x.dtype))
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rotated.flatten(-2)
