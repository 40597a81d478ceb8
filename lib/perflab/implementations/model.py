"""The Transformer language model every notebook measures, and ``build_model``, the one way
the library makes one (its shapes, presets and cost model: ``model_config``).

A pre-norm decoder-only LM: token embedding, ``num_layers`` blocks of
(RMSNorm -> causal multi-head self-attention with rotary position embeddings (``rotary``) ->
residual,
RMSNorm -> SwiGLU feed-forward -> residual), final RMSNorm, untied LM head. Attention is a
swappable function per model instance, so notebooks 02, 05 and 06 can put annotated,
compiled or flash attention into the same model.

Used by every notebook; ``model_config``'s FLOP model is the one utilisation figures are quoted
against.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perflab.implementations.attention import naive_attention
from perflab.implementations.checkpointing import check_strategy, run_blocks
from perflab.implementations.fused_cross_entropy import fused_linear_cross_entropy
from perflab.implementations.model_config import (  # noqa: F401  (the model's shapes, imported from here too)
    PRESET_ALIASES,
    PRESETS,
    ModelConfig,
    get_preset,
    presets_table,
    sized_for,
)
from perflab.implementations.model_loading import build_model_class
from perflab.implementations.rotary import RotaryEmbedding


class AttentionFn(Protocol):
    """``fn(q, k, v, is_causal=...)`` with q, k, v of shape (..., seq, head_dim)."""

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, is_causal: bool) -> Tensor: ...


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * gain (Zhang & Sennrich 2019), computed in at least float32:
    half-precision inputs are promoted (the mean of squares loses too much in bf16), float32
    and float64 stay as they are (a float64 model stays float64 throughout)."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x * self.weight).to(dtype)


class QKVProjection(nn.Linear):
    """x -> (q, k, v): q (..., d_model), k and v (..., kv_dim) (``kv_dim`` = d_model unless
    grouped-query attention narrows it): one matmul with the stacked (d + 2 kv_dim, d) weight,
    or with ``fused = False`` three, one per part of the same weight: the same numbers,
    computed as an unfused model would (notebook 09 measures the difference). A module call
    either way, so wrappers around a module's forward (FSDP) see it."""

    def __init__(self, d_model: int, kv_dim: int | None = None):
        kv_dim = d_model if kv_dim is None else kv_dim
        super().__init__(d_model, d_model + 2 * kv_dim, bias=False)
        self.sizes = [d_model, kv_dim, kv_dim]
        self.fused = True

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.fused:
            return super().forward(x).split(self.sizes, dim=-1)
        return tuple(F.linear(x, w) for w in self.weight.split(self.sizes))


def repeat_kv(x: Tensor, groups: int) -> Tensor:
    """Keys or values (batch, kv_heads, seq, head_dim) -> (batch, kv_heads x groups, seq,
    head_dim), each head repeated for the ``groups`` query heads that share it (a copy, so that
    any attention function that takes equal heads runs grouped-query attention)."""
    if groups == 1:
        return x
    batch, heads, seq, head_dim = x.shape
    return (
        x[:, :, None]
        .expand(batch, heads, groups, seq, head_dim)
        .reshape(batch, heads * groups, seq, head_dim)
    )


#: A decoder's attention over its KV cache: q, k, v (batch, heads, new, head_dim) of the new
#: tokens, rotated, -> attention's output for them; it stores k and v in the cache first.
CachedAttention = Callable[[Tensor, Tensor, Tensor], Tensor]


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, rope: RotaryEmbedding):
        super().__init__()
        self.num_heads, self.kv_heads = config.num_heads, config.kv_heads
        self.qkv = QKVProjection(config.d_model, config.kv_dim)
        self.out = nn.Linear(config.d_model, config.d_model, bias=False)
        self.rope = rope
        self.attention_fn: AttentionFn = naive_attention

    def forward(
        self, x: Tensor, positions: Tensor | None = None, cached: CachedAttention | None = None
    ) -> Tensor:
        """Causal self-attention of ``x`` (batch, seq, d_model) at positions 0 .. seq - 1. A
        decoder passes its new tokens' ``positions`` (batch, seq) and ``cached``, which keeps
        their keys and values and attends over the whole cache (``decode.decoder``)."""
        batch, seq_len, d_model = x.shape
        q, k, v = (
            t.reshape(batch, seq_len, heads, -1).transpose(1, 2)
            for t, heads in zip(
                self.qkv(x), (self.num_heads, self.kv_heads, self.kv_heads), strict=True
            )
        )
        q, k = self.rope(q, positions), self.rope(k, positions)
        if cached is not None:  # the cache keeps kv_heads; ``attend`` groups the queries
            y = cached(q, k, v)
        else:
            groups = self.num_heads // self.kv_heads
            y = self.attention_fn(q, repeat_kv(k, groups), repeat_kv(v, groups), is_causal=True)
        return self.out(y.transpose(1, 2).reshape(batch, seq_len, d_model))


class SwiGLU(nn.Module):
    """W2 (SiLU(W1 x) * W3 x) (Shazeer 2020)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, config: ModelConfig, rope: RotaryEmbedding):
        super().__init__()
        self.attn_norm = RMSNorm(config.d_model)
        self.attn = CausalSelfAttention(config, rope)
        self.ffn_norm = RMSNorm(config.d_model)
        self.ffn = SwiGLU(config.d_model, config.d_ff)

    def forward(
        self, x: Tensor, positions: Tensor | None = None, cached: CachedAttention | None = None
    ) -> Tensor:
        """Pre-norm block; ``positions`` and ``cached`` as in ``CausalSelfAttention``."""
        x = x + self.attn(self.attn_norm(x), positions, cached)
        return x + self.ffn(self.ffn_norm(x))


class LMHead(nn.Linear):
    """The output projection, ``nn.Linear(d_model, vocab, bias=False)``; given targets too, it
    returns the mean cross-entropy through ``fused_linear_cross_entropy`` instead of the logits,
    never holding them whole. A module call either way, so wrappers that act around a module's
    forward (notebook 08's FSDP gathers its weight there) work for the fused head too."""

    def __init__(self, d_model: int, vocab_size: int):
        super().__init__(d_model, vocab_size, bias=False)

    def forward(self, hidden: Tensor, targets: Tensor | None = None) -> Tensor:
        if targets is None:
            return super().forward(hidden)
        return fused_linear_cross_entropy(
            hidden.reshape(-1, hidden.shape[-1]), self.weight, targets.reshape(-1)
        )


class TransformerLM(nn.Module):
    """Token ids (batch, seq) -> logits (batch, seq, vocab)."""

    def __init__(self, config: ModelConfig, attention_fn: AttentionFn | None = None):
        super().__init__()
        self.config = config
        rope = RotaryEmbedding(config.head_dim, config.context_length, config.rope_theta)
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(
            TransformerBlock(config, rope) for _ in range(config.num_layers)
        )
        self.final_norm = RMSNorm(config.d_model)
        self.lm_head = LMHead(config.d_model, config.vocab_size)
        self._init_weights()
        if attention_fn is not None:
            self.set_attention(attention_fn)
        self.checkpointing: tuple[str, int | None] = ("none", None)

    def _init_weights(self) -> None:
        # Truncated normal with std 1/sqrt(fan_in), embeddings with std 1.
        for module in self.modules():
            if isinstance(module, nn.Linear):
                std = 1 / math.sqrt(module.in_features)
                nn.init.trunc_normal_(module.weight, std=std, a=-3 * std, b=3 * std)
            elif isinstance(module, nn.Embedding):
                nn.init.trunc_normal_(module.weight, std=1.0, a=-3.0, b=3.0)

    def set_attention(self, attention_fn: AttentionFn) -> None:
        """Use ``attention_fn`` in every block of this model (other instances are unaffected)."""
        for block in self.blocks:
            block.attn.attention_fn = attention_fn

    def set_fused_qkv(self, fused: bool) -> None:
        """Project Q, K and V with one matmul (the default) or three (``QKVProjection``)."""
        for block in self.blocks:
            block.attn.qkv.fused = fused

    def set_checkpointing(self, strategy: str = "none", group_size: int | None = None) -> None:
        """Activation checkpointing of the block stack: "none", "single" with ``group_size``
        blocks per checkpoint, or "nested" (``perflab.implementations.checkpointing``)."""
        check_strategy(strategy, group_size, self.config.num_layers)
        self.checkpointing = (strategy, group_size)

    def hidden_states(self, token_ids: Tensor) -> Tensor:
        """(batch, seq, d_model): everything but the output projection, for a loss head that
        never holds the whole logits (``lm_head(hidden, targets)``)."""
        seq_len = token_ids.shape[-1]
        if seq_len > self.config.context_length:
            raise ValueError(
                f"sequence length {seq_len} exceeds the model's context length "
                f"{self.config.context_length}"
            )
        x = run_blocks(self.blocks, self.embedding(token_ids), *self.checkpointing)
        return self.final_norm(x)

    def forward(self, token_ids: Tensor) -> Tensor:
        return self.lm_head(self.hidden_states(token_ids))


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean next-token cross-entropy over all positions, computed in float32 at least."""
    accumulate = torch.promote_types(logits.dtype, torch.float32)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).to(accumulate), targets.reshape(-1))


def build_model(
    config: ModelConfig,
    *,
    context: int | None = None,
    layers: int | None = None,
    seed: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    direct: bool = False,
    model_class: str | None = None,
) -> nn.Module:
    """The library's one way to make a model: a ``TransformerLM`` of ``config`` sized for
    ``context`` tokens (``sized_for``) with ``layers`` blocks, its weights drawn after
    ``torch.manual_seed(seed)`` (the generators as they stand when None), made on ``device``
    (the default device when None: meta counts without memory) and cast to ``dtype``.

    ``direct``: drawn in ``dtype`` on the device itself, so that a model too large for float32
    or for host memory never exists there (an 8B model decoded in bf16). ``model_class``: a
    student's class, ``package.module:Class``, built with the course's constructor arguments
    (``model_loading.build_model_class``) instead of ``TransformerLM``."""
    if direct and dtype is None:
        raise ValueError(
            "direct=True draws the weights in a dtype: pass dtype (e.g. torch.bfloat16)"
        )
    if context is not None:
        config = sized_for(config, context)
    if layers is not None:
        config = replace(config, num_layers=layers)
    if seed is not None:
        torch.manual_seed(seed)
    default = torch.get_default_dtype()
    try:
        if direct:
            torch.set_default_dtype(dtype)
        with torch.device(device) if device is not None else contextlib.nullcontext():
            if model_class is not None:
                model = build_model_class(model_class, config)
            else:
                model = TransformerLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.to(dtype) if dtype is not None else model
