"""Small models and batches for the distributed checks: fast on CPU, with the awkward cases
that data-parallel code gets wrong (tied weights, a frozen parameter, 1-D parameters)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perflab.distributed.launch import rank_device
from perflab.implementations.model import ModelConfig, build_model


class TiedToyModel(nn.Module):
    """Token ids (batch, seq) -> logits (batch, seq, vocab). The output projection is the
    embedding matrix (tied), ``scale`` does not require grad, and the layers have biases and a
    LayerNorm, so one- and two-dimensional parameters both occur."""

    def __init__(self, vocab_size: int = 64, d_model: int = 32, num_layers: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(
            nn.Sequential(
                nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.scale = nn.Parameter(torch.full((d_model,), 0.5), requires_grad=False)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, token_ids: Tensor) -> Tensor:
        x = self.embedding(token_ids)
        for layer in self.layers:
            x = x + layer(x)
        return self.head(self.norm(x) * self.scale)


def toy_model(name: str, seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """``"toy"`` (TiedToyModel) or a ``TransformerLM`` given as ``"lm:<d_model>:<layers>"``
    (d_ff 4 d_model, 64-dim heads at most), initialised from ``seed``, in ``dtype``, on this
    rank's device (its GPU under NCCL, else the CPU)."""
    torch.manual_seed(seed)
    if name == "toy":
        return TiedToyModel().to(rank_device(), dtype)
    parts = name.split(":")
    if len(parts) != 3 or parts[0] != "lm" or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"unknown model {name!r}; valid: 'toy', 'lm:<d_model>:<layers>'")
    d_model, layers = int(parts[1]), int(parts[2])
    config = ModelConfig(name, d_model, 4 * d_model, layers, max(1, d_model // 64))
    return build_model(config).to(rank_device(), dtype)


def vocab_size(model: nn.Module) -> int:
    """``model.embedding.num_embeddings``, or the rows of its weight for embedding classes
    without that attribute (the course's ``cs336_basics.model.Embedding``)."""
    embedding = model.embedding
    return getattr(embedding, "num_embeddings", None) or embedding.weight.shape[0]


def global_batch(model: nn.Module, batch_size: int, seq_len: int, step: int) -> tuple:
    """The same (inputs, targets) on every rank for a given step: random token ids."""
    generator = torch.Generator().manual_seed(1_000 + step)
    ids = torch.randint(0, vocab_size(model), (batch_size, seq_len + 1), generator=generator)
    return ids[:, :-1], ids[:, 1:]


def loss_fn(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """Mean next-token cross-entropy in float32 or wider (a mean over equal local batches
    averages to the mean over the global batch, which is what makes data parallelism exact)."""
    device = next(model.parameters()).device
    logits = model(inputs.to(device))
    targets = targets.to(device)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
