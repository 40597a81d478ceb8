"""Generating text with the workbook's ``TransformerLM`` (notebook 10), three ways to keep what
attention needs from earlier tokens:

- ``"none"``: no cache; every step runs the whole sequence again (quadratic work, nothing kept);
- ``"contiguous"``: a key/value cache per layer, preallocated for every sequence to the longest
  length the batch can reach (``ContiguousKVCache``);
- ``"paged"``: the cache in fixed-size blocks taken from a shared pool as sequences grow and
  returned when they finish, each sequence's blocks listed in its block table
  (``PagedKVCache``; vLLM's PagedAttention, Kwon et al. 2023).

Prompts of different lengths are prefilled one by one (each into its own cache rows or blocks),
then decoded together, one token per sequence and step, each at its own position; a sequence
that has its tokens leaves the batch (and gives its blocks back). Every mode computes the same
attention over the same keys, so all three give the same tokens (the tests check it on random
models and unequal prompts, in float64). Sampling happens on the logits' device; only the
chosen ids go to the host. ``StaticDecoder`` (in ``decoder``) is the fixed-shape step for graph
capture.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from perflab.implementations.decode.caches import ContiguousKVCache, KVCache, PagedKVCache
from perflab.implementations.decode.decoder import StaticDecoder, attend, cached_logits, pick
from perflab.implementations.model import TransformerLM

CACHES = ("none", "contiguous", "paged")

__all__ = [
    "CACHES",
    "ContiguousKVCache",
    "KVCache",
    "PagedKVCache",
    "StaticDecoder",
    "attend",
    "cached_logits",
    "generate",
    "make_cache",
    "pick",
]


def _budgets(prompts, max_new_tokens: int | list[int]) -> list[int]:
    """New tokens per prompt: one number for all, or one per prompt."""
    if isinstance(max_new_tokens, bool) or isinstance(max_new_tokens, str | float):
        raise ValueError(
            f"max_new_tokens must be an integer or a list of integers, got {max_new_tokens!r}"
        )
    if isinstance(max_new_tokens, int):
        return [max_new_tokens] * len(prompts)
    budgets = list(max_new_tokens)
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in budgets):
        raise ValueError(f"max_new_tokens must be integers, got {budgets!r}")
    if len(budgets) != len(prompts):
        raise ValueError(
            f"max_new_tokens has {len(budgets)} entries for {len(prompts)} prompts; "
            "give one number, or one per prompt"
        )
    return budgets


def _check(
    model: TransformerLM, prompts, budgets: list[int], cache, temperature: float, top_k: int | None
) -> None:
    if not isinstance(cache, KVCache) and cache not in CACHES:
        raise ValueError(f"unknown cache {cache!r}; valid: {', '.join(CACHES)} or a KVCache")
    if (
        not isinstance(prompts, list)
        or not prompts
        or not all(isinstance(p, list) and p for p in prompts)
        or not all(isinstance(t, int) and not isinstance(t, bool) for p in prompts for t in p)
    ):
        raise ValueError(
            "prompts must be a non-empty list of non-empty lists of integer token "
            f"ids (e.g. [[1, 2, 3]]), got {type(prompts).__name__}"
        )
    vocab = model.config.vocab_size
    bad = [t for p in prompts for t in p if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"token ids must lie in 0 .. {vocab - 1}; got {bad[:5]}")
    if min(budgets) < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {min(budgets)}")
    longest = max(len(p) + n for p, n in zip(prompts, budgets, strict=True))
    if longest > model.config.context_length:
        raise ValueError(
            f"prompt + max_new_tokens reach {longest} tokens, beyond the model's context of "
            f"{model.config.context_length}"
        )
    if temperature < 0 or (top_k is not None and top_k < 1):
        raise ValueError(f"need temperature >= 0 and top_k >= 1, got {temperature} and {top_k}")
    if isinstance(cache, ContiguousKVCache):
        rows, room = cache.k.shape[1], cache.k.shape[3]
        if any(cache.lengths.values()):
            raise ValueError(
                "the ContiguousKVCache passed in was used already; pass a fresh one (make_cache)"
            )
        if rows < len(prompts) or room < longest:
            raise ValueError(
                f"the ContiguousKVCache passed in holds {rows} sequences of {room} "
                f"tokens; these prompts need {len(prompts)} of {longest}"
            )
    if isinstance(cache, PagedKVCache) and cache.lengths:
        raise ValueError(
            "the PagedKVCache passed in holds sequences already; pass a fresh one (make_cache)"
        )


def make_cache(
    model: TransformerLM,
    cache: str,
    prompts: list[list[int]],
    max_new_tokens: int | list[int],
    block_size: int = 16,
    num_blocks: int | None = None,
) -> KVCache | None:
    """The cache ``generate`` uses for ``cache`` ("none": None): contiguous with room for the
    longest sequence in every row; paged with ``num_blocks`` blocks of ``block_size`` tokens
    (default: enough for every sequence at its longest at once)."""
    if cache not in CACHES:
        raise ValueError(f"unknown cache {cache!r}; valid: {', '.join(CACHES)}")
    budgets = _budgets(prompts, max_new_tokens)
    lengths = [len(p) + n for p, n in zip(prompts, budgets, strict=True)]
    if cache == "none":
        return None
    if cache == "contiguous":
        return ContiguousKVCache(model, len(prompts), max(lengths))
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if num_blocks is not None and (not isinstance(num_blocks, int) or num_blocks < 1):
        raise ValueError(
            f"num_blocks must be a positive integer or None (enough for every "
            f"sequence), got {num_blocks!r}"
        )
    if num_blocks is None:
        num_blocks = sum(math.ceil(n / block_size) for n in lengths)
    return PagedKVCache(model, num_blocks, block_size)


def _logits(
    model: TransformerLM, kv: KVCache | None, sequences: list[list[int]], rows: list[int], new: int
) -> Tensor:
    """Next-token logits (len(rows), vocab) of ``rows``, whose last ``new`` tokens the cache
    has not seen (``new`` is the prompt at prefill, one token when decoding)."""
    device = next(model.parameters()).device
    if kv is None:  # the whole sequence again
        return torch.stack(
            [model(torch.tensor([sequences[row]], device=device))[0, -1] for row in rows]
        )
    if isinstance(kv, PagedKVCache):
        for row in rows:
            kv.reserve(row, new if new else len(sequences[row]))
    if new == 0:  # prefill, one prompt at a time
        return torch.stack(
            [
                cached_logits(model, kv, [row], torch.tensor([sequences[row]], device=device))[0]
                for row in rows
            ]
        )
    last = torch.tensor([sequences[row][-new:] for row in rows], device=device)
    return cached_logits(model, kv, rows, last)


@torch.no_grad()
def generate(
    model: TransformerLM,
    prompts: list[list[int]],
    max_new_tokens: int | list[int],
    cache: str | KVCache = "none",
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    block_size: int = 16,
    num_blocks: int | None = None,
) -> list[list[int]]:
    """``max_new_tokens`` new token ids for each prompt (a list of token-id lists of any
    lengths; one number for all, or one per prompt): greedy with ``temperature`` 0, else
    sampled (``top_k``, ``generator`` for repeatable draws). ``cache`` is one of ``CACHES``
    (made by ``make_cache`` with ``block_size`` and ``num_blocks``), or a fresh cache from
    ``make_cache``, to look at its memory afterwards."""
    budgets = _budgets(prompts, max_new_tokens)
    _check(model, prompts, budgets, cache, temperature, top_k)
    kv = (
        cache
        if isinstance(cache, KVCache)
        else make_cache(model, cache, prompts, budgets, block_size, num_blocks)
    )
    sequences = [list(p) for p in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    active = [row for row, n in enumerate(budgets) if n > 0]
    new = 0  # prefill first
    while active:
        ids = pick(
            _logits(model, kv, sequences, active, new), temperature, top_k, generator
        ).tolist()
        for row, token in zip(active, ids, strict=True):
            out[row].append(token)
            sequences[row].append(token)
        done = [row for row in active if len(out[row]) == budgets[row]]
        if isinstance(kv, PagedKVCache):
            for row in done:
                kv.release(row)
        active, new = [row for row in active if row not in done], 1
    return out
