"""One step of decoding: the logits of the next token of each sequence, with its keys and
values kept in a cache (``cached_logits``, any shapes) or in a fixed-shape step for graph
capture (``StaticDecoder``); and the choice of the next token (``pick``), made on the logits'
device so that only token ids cross to the host.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from perflab.implementations.decode.caches import ContiguousKVCache, KVCache
from perflab.implementations.model import TransformerLM


def attend(q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
    """Attention of queries q (batch, heads, new, head_dim) at ``positions`` (batch, new) over
    keys 0 .. end - 1 of k, v (batch, kv_heads, end, head_dim): key j is seen by a query at
    position p when j <= p, which is also what keeps each row's padding (beyond its own length)
    out. With fewer kv_heads than heads (grouped-query attention), each key head serves its
    group of query heads in one matmul, so the cache is read once per group, not copied."""
    batch, heads, new, head_dim = q.shape
    groups = heads // k.shape[1]
    if groups > 1:  # (batch, kv_heads, groups x new, head_dim): a group's queries side by side
        q = q.reshape(batch, k.shape[1], groups * new, head_dim)
        positions = positions.repeat(1, groups)
    scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
    keys = torch.arange(k.shape[-2], device=q.device)
    hidden = keys[None, None, None, :] > positions[:, None, :, None]
    scores = scores.masked_fill(hidden, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).reshape(batch, heads, new, head_dim)


def cached_logits(model: TransformerLM, cache: KVCache, rows: list[int], tokens: Tensor) -> Tensor:
    """Logits of the last of ``tokens`` (len(rows), new) for each row, its keys and values
    added to ``cache`` at each row's current length."""
    new = tokens.shape[1]
    starts = torch.tensor([cache.lengths[row] for row in rows], device=tokens.device)
    positions = starts[:, None] + torch.arange(new, device=tokens.device)
    x = model.embedding(tokens)
    for layer, block in enumerate(model.blocks):

        def over_cache(q: Tensor, k: Tensor, v: Tensor, layer: int = layer) -> Tensor:
            cache.write(layer, rows, k, v)
            return attend(q, *cache.read(layer, rows, new), positions)

        x = block(x, positions, over_cache)  # the model's own block, attending over the cache
    cache.advance(rows, new)
    return model.lm_head(model.final_norm(x[:, -1]))


def pick(
    logits: Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Next ids (batch,) on the logits' device: the most likely, or drawn from
    softmax(logits / temperature) over the ``top_k`` most likely, one row at a time (so that
    every cache mode, whatever rows it decodes together, draws alike)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    if top_k is not None:
        kth = scaled.topk(min(top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    return torch.cat([torch.multinomial(p, 1, generator=generator) for p in probs])


class StaticDecoder(nn.Module):
    """The decode step with shapes that never change (the design of PyTorch's gpt-fast): each
    call takes one token per sequence of a fixed batch, writes its keys and values at that
    sequence's position into a cache preallocated to ``max_len``, and attends over all
    ``max_len`` cache slots, masking those beyond the position. The write is an ``index_put_``
    on the buffer itself, not an assignment through a view of it: through a view of the one
    buffer that holds every layer, the compiled step copied the whole cache at every layer.

    Fixed shapes are what graph capture needs: ``torch.compile`` traces it once, and on CUDA
    ``mode="reduce-overhead"`` records the whole step as one CUDA graph replayed at every token
    (one launch instead of one per kernel). The price: every step attends over ``max_len``
    slots, however short the sequences are so far.
    """

    def __init__(self, model: TransformerLM, batch: int, max_len: int):
        super().__init__()
        if not 1 <= max_len <= model.config.context_length:
            raise ValueError(
                f"max_len must be in 1 .. {model.config.context_length} (the "
                f"model's context), got {max_len}"
            )
        self.model = model
        self.cache = ContiguousKVCache(model, batch, max_len)
        self.register_buffer("k", self.cache.k, persistent=False)  # the cache's own tensors
        self.register_buffer("v", self.cache.v, persistent=False)
        for name, count in (
            ("layers", model.config.num_layers),
            ("rows", batch),
            ("heads", model.config.kv_heads),
        ):
            self.register_buffer(name, torch.arange(count, device=self.k.device), persistent=False)

    @property
    def batch(self) -> int:
        return self.k.shape[1]

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    @torch.no_grad()
    def prefill(self, prompts: list[list[int]]) -> tuple[Tensor, Tensor]:
        """Each prompt into its row of the cache (eagerly, one at a time): the logits of each
        prompt's last token (batch, vocab) and the position of the next token (batch,)."""
        if len(prompts) != self.batch:
            raise ValueError(f"need {self.batch} prompts (the decoder's batch), got {len(prompts)}")
        device = self.k.device
        self.cache.lengths = dict.fromkeys(range(self.batch), 0)  # start again; no need to clear
        logits = torch.stack(
            [
                cached_logits(self.model, self.cache, [row], torch.tensor([prompt], device=device))[
                    0
                ]
                for row, prompt in enumerate(prompts)
            ]
        )
        return logits, torch.tensor([len(p) for p in prompts], device=device)

    def forward(self, tokens: Tensor, positions: Tensor) -> Tensor:
        """Logits (batch, vocab) of ``tokens`` (batch,) at ``positions`` (batch,)."""
        model, pos = self.model, positions[:, None]
        x = model.embedding(tokens[:, None])
        for layer, block in enumerate(model.blocks):

            def over_cache(q: Tensor, k: Tensor, v: Tensor, layer: int = layer) -> Tensor:
                where = (self.layers[layer], self.rows[:, None], self.heads, positions[:, None])
                self.k.index_put_(where, k[:, :, 0])  # (batch, kv_heads, head_dim), in place
                self.v.index_put_(where, v[:, :, 0])
                return attend(q, self.k[layer], self.v[layer], pos)

            x = block(x, pos, over_cache)
        return model.lm_head(model.final_norm(x[:, -1]))

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, step=None) -> list[list[int]]:
        """Greedy decoding of ``prompts`` (one per row) with ``step`` (this module, or it
        compiled): ``max_new_tokens`` ids per prompt."""
        longest = max(map(len, prompts)) + max_new_tokens
        if longest > self.max_len + 1:
            raise ValueError(
                f"prompt + max_new_tokens reach {longest} tokens; the cache holds {self.max_len}"
            )
        step = self if step is None else step
        logits, positions = self.prefill(prompts)
        out = []
        for i in range(max_new_tokens):
            tokens = pick(logits)
            out.append(tokens.tolist())
            if i + 1 < max_new_tokens:
                logits, positions = step(tokens, positions), positions + 1
        return [list(seq) for seq in zip(*out, strict=True)] if out else [[] for _ in prompts]
