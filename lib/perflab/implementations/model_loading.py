"""A model class named as ``package.module:Class`` (a student's, say): imported, and built
in a ``ModelConfig``'s shape with the course's constructor arguments, so that
``model.build_model`` and ``perflab bench --model`` time it like perflab's ``TransformerLM``."""

from __future__ import annotations

import importlib

from torch import nn

from perflab.implementations.model_config import ModelConfig

#: The constructor arguments of the course's ``cs336_basics.model.BasicsTransformerLM``.
COURSE_MODEL_ARGUMENTS = (
    "vocab_size",
    "context_length",
    "d_model",
    "num_layers",
    "num_heads",
    "d_ff",
    "rope_theta",
)


def load_model_class(spec: str) -> type:
    """The class ``spec`` names as ``package.module:Class`` (a student's model, say); a
    ValueError of one line if it is malformed or does not import."""
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name.isidentifier():
        raise ValueError(f"model must be 'package.module:Class', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise ValueError(
            f"cannot import {module_name!r} for model {spec!r}: {type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}"
        ) from None
    found = getattr(module, class_name, None)
    if not isinstance(found, type) or not issubclass(found, nn.Module):
        raise ValueError(f"{spec!r}: {module_name} has no nn.Module class {class_name!r}")
    return found


def build_model_class(spec: str, config: ModelConfig) -> nn.Module:
    """``Class(**COURSE_MODEL_ARGUMENTS from config)``: a model with the course's constructor
    (token ids in, logits out), in ``config``'s shape, to be timed like ``TransformerLM``."""
    arguments = {name: getattr(config, name) for name in COURSE_MODEL_ARGUMENTS}
    try:
        return load_model_class(spec)(**arguments)
    except TypeError as error:
        raise ValueError(
            f"cannot build {spec} with the course's arguments ({', '.join(arguments)}): "
            f"{str(error).splitlines()[0] if str(error) else 'TypeError'}"
        ) from None
