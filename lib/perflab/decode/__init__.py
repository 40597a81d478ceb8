"""Decoding, as a script imports it (the public API of ``../shared/WORKBOOK.md``): ``generate``
with no cache, a contiguous or a paged KV cache, the caches and the fixed-shape step, which live
in ``perflab.implementations.decode``; this face keeps the name and looks each of its names up
there."""

from perflab.implementations import decode as _decode

__all__ = _decode.__all__


def __getattr__(name: str):
    if name in __all__:
        return getattr(_decode, name)
    raise AttributeError(f"module 'perflab.decode' has no attribute {name!r}")
