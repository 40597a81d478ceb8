"""Making a training step fast (notebook 09): the loss head without the full logits."""

from perflab.implementations.fused_cross_entropy import (
    FusedLinearCrossEntropy,
    default_chunk_size,
    fused_linear_cross_entropy,
)

__all__ = ["FusedLinearCrossEntropy", "default_chunk_size", "fused_linear_cross_entropy"]
