"""Cross-entropy of a linear head without the full logits (notebook 09).

A language model's loss is ``cross_entropy(hidden @ weight.T, targets)``: for T tokens and a
vocabulary V the logits alone are T x V values (the 2026 leaderboard: 2 x 32768 x 151936, 19.9 GB
in bf16), and ``F.cross_entropy`` keeps its log-softmax for backward, and backward makes a
gradient of the same size. Here the tokens go through the head in chunks: forward keeps, per
token, only the log-sum-exp of its logits; backward recomputes one chunk's logits at a time and
turns them into that chunk's gradients at once,

    d loss / d logits = (softmax(logits) - onehot(target)) / n_counted
    d hidden = d logits @ weight,     d weight += d logits^T @ hidden_chunk,

so at most one chunk's logits (chunk x V) exist at any moment, for one more head matmul in
backward (the recomputation). The same idea as Liger Kernel's fused linear cross-entropy
(Hsu et al. 2024), written here in PyTorch.
"""

from __future__ import annotations

import torch
from torch import Tensor

IGNORE_INDEX = -100  # targets equal to this do not count (as in F.cross_entropy)


#: Tokens per chunk: a choice, made from one sweep of time against peak memory on another 2-core
#: CPU (float32, forward + backward, chunks of 32 to 1024 tokens at three head shapes; separate
#: medians with no interval, not kept), where 128 tokens sat near the fastest at a fraction of the
#: larger chunks' peaks, and one chunk's logits the size of the hidden states (the formula used
#: before) was slower. Not a tested ranking: notebook 09 runs the sweep on its own machine
#: (``perflab.lessons.nb09_training_step.head_memory.chunk_size_sweep``) and its chunk sentence
#: says which chunk sizes it tells apart. A GPU's best may differ.
DEFAULT_CHUNK_TOKENS = 128


def default_chunk_size(tokens: int, vocab: int, d_model: int) -> int:
    """Tokens per chunk: ``DEFAULT_CHUNK_TOKENS`` (a choice, above), or
    all the tokens when there are fewer. One chunk's logits are then at most
    ``DEFAULT_CHUNK_TOKENS`` x ``vocab`` values, whatever the number of tokens (at 64 tokens,
    vocab 10,000 and d 128: all 64 tokens at once, 78x the hidden states; at 2048 x 32000 x
    256, 7.8x). ``vocab`` and ``d_model`` are kept for callers that size by them."""
    del vocab, d_model  # the measured choice does not depend on them (see the sweep)
    return min(tokens, DEFAULT_CHUNK_TOKENS) if tokens else 1


def _check(
    hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int | None, ignore_index: int
) -> None:
    if hidden.ndim != 2 or weight.ndim != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(
            f"hidden must be (tokens, d) and weight (vocab, d) with the same d; got "
            f"{tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    if targets.shape != hidden.shape[:1] or targets.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"targets must be integer ids of shape ({hidden.shape[0]},); got "
            f"{targets.dtype} {tuple(targets.shape)}"
        )
    vocab = weight.shape[0]
    counted = targets[targets != ignore_index]
    if counted.numel() and (int(counted.min()) < 0 or int(counted.max()) >= vocab):
        raise ValueError(
            f"targets must be ids in [0, {vocab}) or ignore_index ({ignore_index}); got values "
            f"from {int(counted.min())} to {int(counted.max())}"
        )
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise ValueError(f"ignore_index must be an integer, got {ignore_index!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")


def _matmul_dtype(hidden: Tensor) -> torch.dtype:
    """The head's matmuls run in autocast's dtype when autocast is on (as ``hidden @ weight.T``
    would), else in ``hidden``'s; backward, which autocast does not cover, uses the same."""
    device_type = (
        hidden.device.type
    )  # "meta" has no autocast (perflab.lessons.nb09_training_step.step_model)
    if torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return hidden.dtype


def _accumulation_dtype(hidden: Tensor) -> torch.dtype:
    """Logits, log-sum-exp and the weight's gradient sum in float32 at least (float64 stays)."""
    return torch.promote_types(hidden.dtype, torch.float32)


class FusedLinearCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``hidden @ weight.T`` over the counted targets, in chunks."""

    @staticmethod
    def forward(
        ctx, hidden: Tensor, weight: Tensor, targets: Tensor, chunk_size: int, ignore_index: int
    ) -> Tensor:
        counted = targets != ignore_index
        acc = _accumulation_dtype(hidden)
        ctx.matmul_dtype = matmul = _matmul_dtype(hidden)
        w = weight.to(matmul)
        lse = torch.empty(hidden.shape[0], dtype=acc, device=hidden.device)
        total = torch.zeros((), dtype=acc, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_size):
            chunk = slice(start, start + chunk_size)
            logits = (hidden[chunk].to(matmul) @ w.T).to(acc)
            lse[chunk] = torch.logsumexp(logits, dim=-1)
            safe = torch.where(counted[chunk], targets[chunk], 0).long()  # any ignore_index
            target_logit = logits.gather(1, safe[:, None]).squeeze(1)
            total += ((lse[chunk] - target_logit) * counted[chunk]).sum()
            del logits
        n_counted = counted.sum()
        ctx.save_for_backward(hidden, weight, targets, lse, n_counted)
        ctx.chunk_size = chunk_size
        ctx.ignore_index = ignore_index
        return (total / n_counted).to(hidden.dtype)

    @staticmethod
    def backward(ctx, grad_loss: Tensor):
        hidden, weight, targets, lse, n_counted = ctx.saved_tensors
        acc = _accumulation_dtype(hidden)
        w = weight.to(ctx.matmul_dtype)
        # No counted target: the loss is NaN (0 / 0, as F.cross_entropy's), the gradients zero.
        scale = grad_loss.to(acc) / n_counted.clamp(min=1)
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=acc) if ctx.needs_input_grad[1] else None
        for start in range(0, hidden.shape[0], ctx.chunk_size):
            chunk = slice(start, start + ctx.chunk_size)
            h = hidden[chunk].to(ctx.matmul_dtype)
            # softmax from the saved log-sum-exp, in place over the recomputed logits
            grad_logits = (h @ w.T).to(acc).sub_(lse[chunk, None]).exp_()
            rows = torch.arange(grad_logits.shape[0], device=grad_logits.device)
            counted = targets[chunk] != ctx.ignore_index
            grad_logits[rows, torch.where(counted, targets[chunk], 0).long()] -= 1.0
            grad_logits.mul_((scale * counted)[:, None])
            if grad_hidden is not None:
                grad_hidden[chunk] = (grad_logits.to(w.dtype) @ w).to(hidden.dtype)
            if grad_weight is not None:
                grad_weight.addmm_(grad_logits.T, h.to(acc))
            del grad_logits
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None


def fused_linear_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    chunk_size: int | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> Tensor:
    """Mean cross-entropy of ``hidden (tokens, d) @ weight (vocab, d).T`` against ``targets
    (tokens,)``, differentiable in ``hidden`` and ``weight``, never holding more than
    ``chunk_size`` tokens' logits (None: ``default_chunk_size``). Targets equal to
    ``ignore_index`` do not count, as in ``F.cross_entropy``."""
    for name, value in (("hidden", hidden), ("weight", weight), ("targets", targets)):
        if not isinstance(value, Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    _check(hidden, weight, targets, chunk_size, ignore_index)
    if chunk_size is None:
        chunk_size = default_chunk_size(hidden.shape[0], weight.shape[0], weight.shape[1])
    return FusedLinearCrossEntropy.apply(hidden, weight, targets, chunk_size, ignore_index)
