"""The model, as a script imports it (the public API of ``../shared/WORKBOOK.md``): the
Transformer, its shapes and presets, and ``build_model``, the one way the library makes a model.
They live in ``perflab.implementations.model`` and ``model_config``; this face keeps the name."""

from perflab.implementations.model import TransformerLM, build_model
from perflab.implementations.model_config import PRESETS, ModelConfig, get_preset

__all__ = ["PRESETS", "ModelConfig", "TransformerLM", "build_model", "get_preset"]
