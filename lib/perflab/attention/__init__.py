"""Attention, as a script imports it (the public API of ``../shared/WORKBOOK.md``): the
reference, the annotated version and FlashAttention-2 in PyTorch and Triton, which live in
``perflab.implementations.attention``; this face keeps the name and looks each of its names up
there (``FlashAttentionTriton`` on first use, as there: importing it loads Triton)."""

from perflab.implementations import attention as _attention

__all__ = _attention.__all__


def __getattr__(name: str):
    if name in __all__:
        return getattr(_attention, name)
    raise AttributeError(f"module 'perflab.attention' has no attribute {name!r}")
