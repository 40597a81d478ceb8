"""What every decode measurement starts from: a random model built in the dtype asked, random
prompts, and the checks of a context and a batch against the model."""

from __future__ import annotations

import torch

from perflab.implementations.model import ModelConfig, TransformerLM, build_model


def inference_model(
    config: ModelConfig, device: torch.device, dtype: torch.dtype, seed: int = 0
) -> TransformerLM:
    """A random ``TransformerLM`` in eval mode without gradients, initialised on ``device``
    directly in ``dtype`` (``build_model(direct=True)``: an 8B model in bf16 never exists in
    float32 or in host memory)."""
    model = build_model(config, seed=seed, device=device, dtype=dtype, direct=True)
    return model.eval().requires_grad_(False)


def random_prompts(vocab_size: int, lengths: list[int], seed: int = 0) -> list[list[int]]:
    """Prompts of the given lengths, uniformly random token ids (seeded)."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (n,), generator=generator).tolist() for n in lengths]


def element_bytes(model: TransformerLM) -> int:
    """Bytes per element of the model's weights."""
    return next(model.parameters()).element_size()


def check_context(model: TransformerLM, context: int, name: str = "context") -> None:
    """A decode step at ``context`` writes position ``context``: it must lie in the model's."""
    limit = model.config.context_length
    if isinstance(context, bool) or not isinstance(context, int) or not 1 <= context < limit:
        raise ValueError(
            f"{name} must be in 1 .. {limit - 1} (below the model's context of "
            f"{limit}), got {context!r}"
        )


def check_batch(batch: int) -> None:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
