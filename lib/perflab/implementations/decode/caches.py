"""Key/value caches for decoding (notebook 10): what attention needs from earlier tokens, kept
instead of recomputed.

- ``ContiguousKVCache``: room for every sequence at the longest length the batch can reach,
  allocated up front (simple, and what a fixed-shape step needs; wastes what shorter
  sequences never fill);
- ``PagedKVCache``: fixed-size blocks taken from a shared pool as sequences grow and returned
  when they finish, each sequence's blocks listed in its block table (vLLM's PagedAttention,
  Kwon et al. 2023): the waste is less than one block per sequence.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from perflab.implementations.model import TransformerLM


class KVCache:
    """What both caches share: keys and values in two tensors ``k``, ``v`` of shape (layers,
    slots, kv_heads, tokens per slot, head_dim), and each sequence's length so far."""

    def __init__(self, model: TransformerLM, slots: int, tokens_per_slot: int):
        config, param = model.config, next(model.parameters())
        shape = (config.num_layers, slots, config.kv_heads, tokens_per_slot, config.head_dim)
        self.k = torch.zeros(shape, dtype=param.dtype, device=param.device)
        self.v = torch.zeros_like(self.k)
        self.lengths: dict[int, int] = {}

    def advance(self, rows: list[int], new: int) -> None:
        for row in rows:
            self.lengths[row] += new

    @property
    def reserved_bytes(self) -> int:
        """Bytes allocated for keys and values, used or not."""
        return 2 * self.k.numel() * self.k.element_size()

    @property
    def token_bytes(self) -> int:
        """Bytes of keys and values of one token, over all layers: 2 L kv_dim x element size
        (kv_dim = d_model for multi-head attention)."""
        layers, _, heads, _, head_dim = self.k.shape
        return 2 * layers * heads * head_dim * self.k.element_size()

    @property
    def stored_bytes(self) -> int:
        """Bytes holding the keys and values of tokens seen so far (the rest is waste)."""
        return sum(self.lengths.values()) * self.token_bytes


class ContiguousKVCache(KVCache):
    """Keys and values of ``batch`` sequences, each with room for ``max_len`` tokens:
    (layers, batch, heads, max_len, head_dim) each, allocated once."""

    def __init__(self, model: TransformerLM, batch: int, max_len: int):
        super().__init__(model, batch, max_len)
        self.lengths = dict.fromkeys(range(batch), 0)

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
        if rows == list(range(rows[0], rows[0] + len(rows))):  # a view, not a gathered copy
            picked = slice(rows[0], rows[0] + len(rows))
            return self.k[layer, picked, :, :end], self.v[layer, picked, :, :end]
        return self.k[layer, rows, :, :end], self.v[layer, rows, :, :end]


class PagedKVCache(KVCache):
    """Keys and values in a pool of ``num_blocks`` blocks of ``block_size`` tokens (per layer:
    (num_blocks, heads, block_size, head_dim)); sequence ``row`` holds the blocks listed in
    ``tables[row]``, taken one at a time as it grows and returned by ``release``."""

    def __init__(self, model: TransformerLM, num_blocks: int, block_size: int = 16):
        if block_size < 1 or num_blocks < 1:
            raise ValueError(
                f"block_size and num_blocks must be positive, got {block_size} and {num_blocks}"
            )
        super().__init__(model, num_blocks, block_size)
        self.block_size = block_size
        self.free = list(range(num_blocks))
        self.tables: dict[int, list[int]] = {}
        self.peak_blocks = 0
        self.peak_stored_bytes = 0  # the most bytes of tokens held at once
        # Each row's block table as a tensor on the cache's device, copied there only when the
        # table changes (a new block), not for every layer's read and write of every step: on
        # a GPU each copy is a host-to-device transfer the step waits for.
        self._device_tables: dict[int, Tensor] = {}
        self.table_uploads = 0

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
        if needed > 0 or row not in self._device_tables:
            self._device_tables[row] = torch.tensor(table, device=self.k.device)
            self.table_uploads += 1

    def _slots(self, row: int, start: int, count: int) -> tuple[Tensor, Tensor]:
        """(block ids, offsets in the block) of positions start .. start + count - 1."""
        positions = torch.arange(start, start + count, device=self.k.device)
        table = self._device_tables[row]
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
        super().advance(rows, new)
        self.peak_stored_bytes = max(self.peak_stored_bytes, self.stored_bytes)

    def release(self, row: int) -> None:
        """A finished sequence gives its blocks back to the pool."""
        self.free.extend(self.tables.pop(row, []))
        self.lengths.pop(row, None)
        self._device_tables.pop(row, None)

    @property
    def blocks_in_use(self) -> int:
        return sum(len(table) for table in self.tables.values())

    @property
    def block_bytes(self) -> int:
        """Bytes of keys and values of one block, over all layers."""
        return self.block_size * self.token_bytes

    @property
    def peak_bytes(self) -> int:
        """Bytes of the most blocks in use at once: what the pool must hold for this batch."""
        return self.peak_blocks * self.block_bytes
