"""Making a training step fast (notebooks 02 and 09): the ladder of optimisations and the step's
profile; this face names the loss head without the full logits for scripts (it lives in
``perflab.implementations.fused_cross_entropy``)."""

from perflab.implementations.fused_cross_entropy import (
    FusedLinearCrossEntropy,
    default_chunk_size,
    fused_linear_cross_entropy,
)

__all__ = ["FusedLinearCrossEntropy", "default_chunk_size", "fused_linear_cross_entropy"]
