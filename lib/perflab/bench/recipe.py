"""How one training step is run, apart from the model's shape: a ``Recipe``.

A recipe names the autocast dtype, the Q, K, V projection (one matmul, or three as an unfused
model would), the loss head (logits + ``F.cross_entropy``, or
``fused_linear_cross_entropy``, which never holds the whole logits), the attention (naive;
FlashAttention: the Triton kernels on a GPU, the tiled PyTorch version on a CPU; or PyTorch's
SDPA), AdamW's implementation (a for-loop over parameters, ``foreach`` multi-tensor kernels,
or ``fused``), ``torch.compile`` of the forward and loss, and activation checkpointing every
``checkpoint_group`` blocks. ``perflab bench`` builds its step from one (its flags), and the
rungs of notebook 09's ladder are recipes (``perflab.training.ladder``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from perflab.implementations.attention import naive_attention
from perflab.implementations.model import AttentionFn, TransformerLM, cross_entropy
from perflab.measure.device import parse_dtype

QKV = ("fused", "separate")
HEADS = ("plain", "fused")
ATTENTIONS = ("naive", "flash", "sdpa")
OPTIMIZERS = ("for-loop", "foreach", "fused")


@dataclass(frozen=True)
class Recipe:
    """How one training step is run; ``name`` says what it is (a ladder's rung: what it adds)."""

    name: str
    dtype: str = "float32"
    qkv: str = "fused"
    head: str = "plain"
    attention: str = "naive"
    optimizer: str = "for-loop"
    compiled: bool = False
    checkpoint_group: int | None = None

    def __post_init__(self) -> None:
        for field, valid in (
            ("qkv", QKV),
            ("head", HEADS),
            ("attention", ATTENTIONS),
            ("optimizer", OPTIMIZERS),
        ):
            if getattr(self, field) not in valid:
                raise ValueError(
                    f"unknown {field} {getattr(self, field)!r}; valid: {', '.join(valid)}"
                )
        parse_dtype(self.dtype)
        group = self.checkpoint_group
        if group is not None and (not isinstance(group, int) or group < 1):
            raise ValueError(f"checkpoint_group must be a positive number of blocks, got {group!r}")


def autocast_context(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for a low-precision dtype, nothing for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def attention_function(name: str, device: torch.device) -> AttentionFn:
    """The attention called ``name`` (one of ``ATTENTIONS``); ``flash`` is the Triton kernels
    on a GPU and the tiled PyTorch version elsewhere."""
    if name not in ATTENTIONS:
        raise ValueError(f"unknown attention {name!r}; valid: {', '.join(ATTENTIONS)}")
    if name == "naive":
        return naive_attention
    if name == "sdpa":
        return torch.nn.functional.scaled_dot_product_attention
    if device.type == "cuda":
        from perflab.implementations.attention.flash_triton import flash_attention_triton

        return flash_attention_triton
    from perflab.implementations.attention.flash_torch import flash_attention_torch

    return flash_attention_torch


def prepare_model(model: TransformerLM, recipe: Recipe, device: torch.device) -> None:
    """Give ``model`` the recipe's Q, K, V projection, attention and activation
    checkpointing."""
    model.set_fused_qkv(recipe.qkv == "fused")
    model.set_attention(attention_function(recipe.attention, device))
    if recipe.checkpoint_group:
        model.set_checkpointing("single", recipe.checkpoint_group)


def make_optimizer(model: torch.nn.Module, recipe: Recipe, lr: float = 1e-3) -> torch.optim.AdamW:
    """AdamW over ``model``'s parameters in the recipe's implementation."""
    implementation = {
        "for-loop": {"foreach": False},
        "foreach": {"foreach": True},
        "fused": {"fused": True},
    }[recipe.optimizer]
    return torch.optim.AdamW(model.parameters(), lr=lr, **implementation)


def head_loss(
    model: TransformerLM, head: str, inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """The mean next-token loss through ``head``: "plain" (the logits, then ``cross_entropy``)
    or "fused" (``model.lm_head(hidden, targets)``, a module call, never the whole logits)."""
    if head == "fused":
        return model.lm_head(model.hidden_states(inputs), targets)
    return cross_entropy(model(inputs), targets)


def make_loss(
    model: TransformerLM, recipe: Recipe, device: torch.device
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``loss(inputs, targets)``: the forward and the mean next-token cross-entropy, under the
    recipe's autocast, through its head, compiled with ``torch.compile`` if it says so."""
    dtype = parse_dtype(recipe.dtype)

    def loss(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with autocast_context(device, dtype):
            return head_loss(model, recipe.head, inputs, targets)

    return torch.compile(loss) if recipe.compiled else loss
