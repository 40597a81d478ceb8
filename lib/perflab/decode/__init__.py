"""Decoding, as a script imports it (the public API of ``../shared/WORKBOOK.md``): ``generate``
with no cache, a contiguous or a paged KV cache, the caches and the fixed-shape step, which live
in ``perflab.implementations.decode``; this face keeps the name."""

from perflab.implementations.decode import (
    CACHES,
    ContiguousKVCache,
    KVCache,
    PagedKVCache,
    StaticDecoder,
    attend,
    cached_logits,
    generate,
    make_cache,
    pick,
)

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
