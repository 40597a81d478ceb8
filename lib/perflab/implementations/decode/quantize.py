"""int8 weight-only quantisation for decoding (notebook 10, section 7).

A batch-1 decode step reads every weight once per token, so its time follows the weights'
bytes. Stored as int8 with one float scale per output row (symmetric, per channel:
scale = max |w_row| / 127, q = round(w / scale)), the weights take a quarter of float32's bytes;
each product is computed in the activations' dtype, y = (x · q) * scale, so only the weights are
rounded (each by at most scale / 2), never the activations (the scheme of gpt-fast's int8).

The bytes are saved only if the int8 values are read as int8: dequantising the whole matrix and
calling a float matmul reads int8 and then writes and reads float32 again. Under ``torch.compile``
the product and sum over the input dimension are written out, for inductor to fuse with the
conversion into one loop over the int8 weights (the tests check the results, not the generated
code); eager (and for more than ``FUSED_ROWS`` rows of
activations, where the matmul is no longer a matrix-vector product) the weight is dequantised and
``F.linear`` does the rest. ``perflab.lessons.nb10_decoding.measurements.compare_int8`` times a
model against its int8 copy."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perflab.implementations.model import QKVProjection, TransformerLM

#: Up to this many rows of activations (batch x new tokens) a compiled step multiplies and sums
#: itself, fused by inductor; beyond, it dequantises and calls ``F.linear``.
FUSED_ROWS = 4


class Int8Linear(nn.Module):
    """A bias-free ``nn.Linear`` with int8 weights and a float scale per output row; built from a
    linear layer by ``from_linear``. A ``QKVProjection`` becomes one whose output is split into
    its parts (q, k, v: d_model, kv_dim, kv_dim wide), as the original's."""

    def __init__(self, weight: Tensor, scale: Tensor, sizes: list[int] | None = None):
        super().__init__()
        if weight.dtype != torch.int8 or scale.shape != weight.shape[:1]:
            raise ValueError(
                f"need int8 weights (out, in) and one scale per output row, got "
                f"{weight.dtype} {tuple(weight.shape)}, scale "
                f"{tuple(scale.shape)}"
            )
        if sizes is not None and sum(sizes) != weight.shape[0]:
            raise ValueError(f"output parts {sizes} do not add up to {weight.shape[0]} rows")
        self.register_buffer("weight", weight)
        self.register_buffer("scale", scale)
        self.sizes = sizes

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        """Per output row, scale = max |w| / 127 and q = round(w / scale), both computed and
        the scale kept in float32 (float64 for float64 weights): in bfloat16, w / scale would
        itself be rounded to 8 significant bits (values above 64 lie 0.5 apart) and q could miss
        the nearest integer by 0.75 of a step; a bfloat16 scale would move every q * scale by
        up to a quarter of a step more."""
        if linear.bias is not None:
            raise ValueError("int8 weight-only quantisation here covers bias-free linear layers")
        weight = linear.weight.detach()
        if not weight.is_floating_point():
            raise ValueError(f"the weight to quantise must be floating point, got {weight.dtype}")
        exact = weight.to(torch.promote_types(weight.dtype, torch.float32))
        scale = exact.abs().amax(dim=1).clamp_min(torch.finfo(weight.dtype).tiny) / 127
        quantised = torch.round(exact / scale[:, None]).clamp(-127, 127).to(torch.int8)
        sizes = list(linear.sizes) if isinstance(linear, QKVProjection) else None
        return cls(quantised, scale, sizes)

    def dequantised(self) -> Tensor:
        """The weight these int8 values stand for, in the scale's dtype (float32 or float64)."""
        return self.weight.to(self.scale.dtype) * self.scale[:, None]

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, ...]:
        # The int8 values are exact in any float dtype (|q| <= 127); the scale multiplies in
        # its own precision, so a bfloat16 model's weights are q * scale as quantised.
        if torch.compiler.is_compiling() and x.shape[:-1].numel() <= FUSED_ROWS:
            y = (x.unsqueeze(-2) * self.weight.to(x.dtype)).sum(-1)
        else:
            y = F.linear(x, self.weight.to(x.dtype))
        y = (y.to(self.scale.dtype) * self.scale).to(x.dtype)
        return y.split(self.sizes, dim=-1) if self.sizes else y


def quantize_int8(model: TransformerLM) -> TransformerLM:
    """A copy of ``model`` with every linear layer (attention, feed-forward, LM head) as an
    ``Int8Linear``; embeddings and norms stay as they are."""
    quantised = copy.deepcopy(model)
    for module in list(quantised.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear.from_linear(child))
    return quantised


def weight_bytes(model: nn.Module) -> int:
    """Bytes of the parameters and buffers that hold weights (int8 values and their scales
    included; rotary tables and other non-weight buffers left out)."""
    tensors = list(model.parameters()) + [
        buffer for name, buffer in model.named_buffers() if name.endswith(("weight", "scale"))
    ]
    return sum(t.numel() * t.element_size() for t in tensors)
