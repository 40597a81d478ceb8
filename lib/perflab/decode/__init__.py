"""Generating text with the workbook's ``TransformerLM`` (notebook 10), three ways to keep what
attention needs from earlier tokens:

- ``"none"``: no cache; every step runs the whole sequence again (quadratic work, nothing kept);
- ``"contiguous"``: a key/value cache per layer, preallocated for every sequence to the longest
  length the batch can reach (``ContiguousKVCache``);
- ``"paged"``: the cache in fixed-size blocks taken from a shared pool as sequences grow and
  returned when they finish, each sequence's blocks listed in its block table
  (``PagedKVCache``; vLLM's PagedAttention, Kwon et al. 2023).

Prompts of different lengths are prefilled one by one (each into its own cache rows or blocks),
then decoded together, one token per sequence and step, each at its own position. Every mode
computes the same attention over the same keys, so all three give the same tokens (the tests
check it on random models and unequal prompts, in float64). Sampling happens on the logits'
device; only the chosen ids go to the host.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from perflab.model import TransformerLM

CACHES = ("none", "contiguous", "paged")


class ContiguousKVCache:
    """Keys and values of ``batch`` sequences, each with room for ``max_len`` tokens:
    (layers, batch, heads, max_len, head_dim) each, allocated once."""

    def __init__(self, model: TransformerLM, batch: int, max_len: int):
        config, param = model.config, next(model.parameters())
        shape = (config.num_layers, batch, config.num_heads, max_len, config.head_dim)
        self.k = torch.zeros(shape, dtype=param.dtype, device=param.device)
        self.v = torch.zeros_like(self.k)
        self.lengths = [0] * batch

    def write(self, layer: int, rows: list[int], k: Tensor, v: Tensor) -> None:
        """``k``, ``v`` (len(rows), heads, new, head_dim): the new tokens of ``rows``, stored
        after each row's earlier ones."""
        for i, row in enumerate(rows):
            start = self.lengths[row]
            self.k[layer, row, :, start : start + k.shape[2]] = k[i]
            self.v[layer, row, :, start : start + v.shape[2]] = v[i]

    def read(self, layer: int, rows: list[int], new: int) -> tuple[Tensor, Tensor]:
        """Keys and values of ``rows`` up to their length plus ``new`` (padded to the
        longest; ``_attend`` masks what lies beyond each row's own)."""
        end = max(self.lengths[row] for row in rows) + new
        return self.k[layer, rows, :, :end], self.v[layer, rows, :, :end]

    def advance(self, rows: list[int], new: int) -> None:
        for row in rows:
            self.lengths[row] += new

    @property
    def reserved_bytes(self) -> int:
        """Bytes allocated for keys and values, used or not."""
        return 2 * self.k.numel() * self.k.element_size()


class PagedKVCache:
    """Keys and values in a pool of ``num_blocks`` blocks of ``block_size`` tokens (per layer:
    (num_blocks, heads, block_size, head_dim)); sequence ``row`` holds the blocks listed in
    ``tables[row]``, taken one at a time as it grows and returned by ``release``."""

    def __init__(self, model: TransformerLM, num_blocks: int, block_size: int = 16):
        if block_size < 1 or num_blocks < 1:
            raise ValueError(
                f"block_size and num_blocks must be positive, got {block_size} and {num_blocks}"
            )
        config, param = model.config, next(model.parameters())
        shape = (config.num_layers, num_blocks, config.num_heads, block_size, config.head_dim)
        self.k = torch.zeros(shape, dtype=param.dtype, device=param.device)
        self.v = torch.zeros_like(self.k)
        self.block_size = block_size
        self.free = list(range(num_blocks))
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        self.peak_blocks = 0

    def reserve(self, row: int, new: int) -> None:
        """Take blocks from the pool until ``row`` has room for ``new`` more tokens."""
        table = self.tables.setdefault(row, [])
        length = self.lengths.setdefault(row, 0)
        needed = math.ceil((length + new) / self.block_size) - len(table)
        if needed > len(self.free):
            raise RuntimeError(
                f"paged KV cache out of blocks: sequence {row} needs {needed} more, "
                f"{len(self.free)} free of {self.k.shape[1]}"
            )
        table.extend(self.free.pop(0) for _ in range(needed))
        self.peak_blocks = max(self.peak_blocks, self.blocks_in_use)

    def _slots(self, row: int, start: int, count: int) -> tuple[Tensor, Tensor]:
        """(block ids, offsets in the block) of positions start .. start + count - 1."""
        positions = torch.arange(start, start + count)
        table = torch.tensor(self.tables[row])
        return table[positions // self.block_size], positions % self.block_size

    def write(self, layer: int, rows: list[int], k: Tensor, v: Tensor) -> None:
        for i, row in enumerate(rows):
            blocks, offsets = self._slots(row, self.lengths[row], k.shape[2])
            self.k[layer, blocks, :, offsets] = k[i].transpose(0, 1)  # (new, heads, head_dim)
            self.v[layer, blocks, :, offsets] = v[i].transpose(0, 1)

    def read(self, layer: int, rows: list[int], new: int) -> tuple[Tensor, Tensor]:
        """Each row's keys and values gathered from its blocks, padded to the longest."""
        end = max(self.lengths[row] for row in rows) + new
        keys, values = [], []
        for row in rows:
            count = min(end, len(self.tables[row]) * self.block_size)
            blocks, offsets = self._slots(row, 0, count)
            k = self.k[layer, blocks, :, offsets].transpose(0, 1)  # (heads, count, head_dim)
            v = self.v[layer, blocks, :, offsets].transpose(0, 1)
            pad = (0, 0, 0, end - count)
            keys.append(torch.nn.functional.pad(k, pad))
            values.append(torch.nn.functional.pad(v, pad))
        return torch.stack(keys), torch.stack(values)

    def advance(self, rows: list[int], new: int) -> None:
        for row in rows:
            self.lengths[row] += new

    def release(self, row: int) -> None:
        """A finished sequence gives its blocks back to the pool."""
        self.free.extend(self.tables.pop(row, []))
        self.lengths.pop(row, None)

    @property
    def blocks_in_use(self) -> int:
        return sum(len(table) for table in self.tables.values())

    @property
    def block_bytes(self) -> int:
        """Bytes of keys and values of one block, over all layers."""
        per_layer = self.k[0, 0].numel() * self.k.element_size()
        return 2 * self.k.shape[0] * per_layer


def _attend(q: Tensor, k: Tensor, v: Tensor, positions: Tensor) -> Tensor:
    """Attention of queries at ``positions`` (batch, new) over keys 0 .. end - 1: key j is
    seen by a query at position p when j <= p, which is also what keeps each row's padding
    (beyond its own length) out."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    keys = torch.arange(k.shape[-2], device=q.device)
    hidden = keys[None, None, None, :] > positions[:, None, :, None]
    scores = scores.masked_fill(hidden, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _cached_logits(model: TransformerLM, cache, rows: list[int], tokens: Tensor) -> Tensor:
    """Logits of the last of ``tokens`` (len(rows), new) for each row, its keys and values
    added to ``cache`` at each row's current length."""
    batch, new = tokens.shape
    starts = torch.tensor([cache.lengths[row] for row in rows], device=tokens.device)
    positions = starts[:, None] + torch.arange(new, device=tokens.device)
    x = model.embedding(tokens)
    for layer, block in enumerate(model.blocks):
        attn = block.attn
        q, k, v = (t.reshape(batch, new, attn.num_heads, -1).transpose(1, 2)
                   for t in attn.qkv(block.attn_norm(x)))  # fmt: skip
        q, k = attn.rope(q, positions), attn.rope(k, positions)
        cache.write(layer, rows, k, v)
        keys, values = cache.read(layer, rows, new)
        y = _attend(q, keys, values, positions)
        x = x + attn.out(y.transpose(1, 2).reshape(batch, new, -1))
        x = x + block.ffn(block.ffn_norm(x))
    cache.advance(rows, new)
    return model.lm_head(model.final_norm(x[:, -1]))


def _pick(logits: Tensor, temperature: float, top_k: int | None,
          generator: torch.Generator | None) -> Tensor:  # fmt: skip
    """Next ids (batch,): the most likely, or drawn from softmax(logits / temperature) over the
    ``top_k`` most likely, one row at a time (so that every cache mode draws alike)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    if top_k is not None:
        kth = scaled.topk(min(top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    return torch.cat([torch.multinomial(p, 1, generator=generator) for p in probs])


def _check(model: TransformerLM, prompts, max_new_tokens: int, cache: str, temperature: float,
           top_k: int | None) -> None:  # fmt: skip
    if cache not in CACHES:
        raise ValueError(f"unknown cache {cache!r}; valid: {', '.join(CACHES)}")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty lists of token ids")
    vocab = model.config.vocab_size
    bad = [t for p in prompts for t in p if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token ids must lie in 0 .. {vocab - 1}; got {bad[:5]}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    longest = max(map(len, prompts)) + max_new_tokens
    if longest > model.config.context_length:
        raise ValueError(
            f"prompt + max_new_tokens reach {longest} tokens, beyond the model's context of "
            f"{model.config.context_length}"
        )
    if temperature < 0 or (top_k is not None and top_k < 1):
        raise ValueError(f"need temperature >= 0 and top_k >= 1, got {temperature} and {top_k}")


@torch.no_grad()
def generate(model: TransformerLM, prompts: list[list[int]], max_new_tokens: int,
             cache: str = "none", *, temperature: float = 0.0, top_k: int | None = None,
             generator: torch.Generator | None = None, block_size: int = 16,
             num_blocks: int | None = None) -> list[list[int]]:  # fmt: skip
    """``max_new_tokens`` new token ids for each prompt (a list of token-id lists of any
    lengths): greedy with ``temperature`` 0, else sampled (``top_k``, ``generator`` for
    repeatable draws). ``cache`` is one of ``CACHES``; the paged cache has ``num_blocks``
    blocks of ``block_size`` tokens (default: enough for every sequence at its longest)."""
    _check(model, prompts, max_new_tokens, cache, temperature, top_k)
    device = next(model.parameters()).device
    rows = list(range(len(prompts)))
    out: list[list[int]] = [[] for _ in prompts]
    if max_new_tokens == 0:
        return out
    if cache == "none":

        def step_logits(last: list[int] | None) -> Tensor:
            return torch.stack([
                model(torch.tensor([p + o], device=device))[0, -1]
                for p, o in zip(prompts, out, strict=True)
            ])  # fmt: skip

    else:
        longest = max(map(len, prompts)) + max_new_tokens
        if cache == "contiguous":
            kv = ContiguousKVCache(model, len(prompts), longest)
        else:
            blocks = num_blocks or sum(math.ceil((len(p) + max_new_tokens) / block_size)
                                       for p in prompts)  # fmt: skip
            kv = PagedKVCache(model, blocks, block_size)

        def step_logits(last: list[int] | None) -> Tensor:
            if last is None:  # prefill, one prompt at a time
                logits = []
                for row, prompt in zip(rows, prompts, strict=True):
                    if cache == "paged":
                        kv.reserve(row, len(prompt))
                    ids = torch.tensor([prompt], device=device)
                    logits.append(_cached_logits(model, kv, [row], ids)[0])
                return torch.stack(logits)
            if cache == "paged":
                for row in rows:
                    kv.reserve(row, 1)
            return _cached_logits(model, kv, rows, torch.tensor(last, device=device)[:, None])

    last = None
    for _ in range(max_new_tokens):
        ids = _pick(step_logits(last), temperature, top_k, generator).tolist()
        for row, token in zip(rows, ids, strict=True):
            out[row].append(token)
        last = ids
    if cache == "paged":
        for row in rows:
            kv.release(row)
    return out
