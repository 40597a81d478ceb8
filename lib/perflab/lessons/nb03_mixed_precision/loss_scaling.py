"""float16 and loss scaling, beside bfloat16 (notebook 03, section 5).

float16 has 11 significant bits (10 stored) but only 5 exponent bits: its smallest normal
number is 6.1e-5, its smallest subnormal 6.0e-8, its largest 65,504. A mean loss over N tokens
divides the gradient of each token's logits by N (d loss / d logits = (softmax - onehot) / N),
and every activation gradient below them inherits the factor; under float16 autocast those
gradients are float16: values below about 3e-8 (half the smallest subnormal) round to zero,
values below 6.1e-5 keep fewer bits. (The parameter gradients sum over the tokens again, so
they do not shrink with N; they are float32 here.) bfloat16 has float32's 8 exponent bits, so
the same gradients survive, with 8 significant bits (7 stored). Loss scaling (Micikevicius et
al. 2018, "Mixed Precision Training") multiplies the loss by S before backward, so every
gradient is S times larger while in float16, and divides the float32 parameter gradients by S
before the step. Too large an S overflows to inf:
``torch.amp.GradScaler`` then skips that step (the parameters and the optimizer's state stay as
they were) and halves S, and grows it again after ``growth_interval`` clean steps.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import torch
import torch.nn.functional as F

from perflab.bench.steps import random_batch
from perflab.implementations.model import ModelConfig, TransformerLM, build_model

DTYPES = ("float16", "bfloat16")


def _loss(
    model: TransformerLM, inputs: torch.Tensor, targets: torch.Tensor, dtype: torch.dtype | None
) -> torch.Tensor:
    """The mean cross-entropy, under autocast to ``dtype`` (None: float32 throughout)."""
    device = inputs.device.type
    with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
        logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _model(config: ModelConfig, seed: int, device: torch.device) -> TransformerLM:
    return build_model(config, seed=seed).to(device)


def gradient_underflow(
    config: ModelConfig,
    batch_size: int,
    seq_len: int,
    *,
    scales: tuple[float, ...] = (1.0, 2.0**16),
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> pd.DataFrame:
    """One backward of the same model and batch under float16 and bfloat16 autocast, the loss
    multiplied by each of ``scales`` (the gradients divided back), against float32: per dtype
    and scale, the gradient elements that are zero where float32's are not (``flushed``) and
    their share of float32's non-zero ones, the non-finite elements, and the largest relative
    error of a parameter's gradient (its norm)."""
    if batch_size < 1 or seq_len < 1 or not scales or min(scales) <= 0:
        raise ValueError(
            f"need batch_size >= 1, seq_len >= 1 and positive scales, got "
            f"{batch_size}, {seq_len}, {scales!r}"
        )
    device = torch.device(device)
    model = _model(config, seed, device)
    inputs, targets = random_batch(config.vocab_size, batch_size, seq_len, device, seed)

    def gradients(dtype: torch.dtype | None, scale: float) -> tuple[float, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        loss = _loss(model, inputs, targets, dtype)
        (loss * scale).backward()
        return loss.item(), [p.grad.detach() / scale for p in model.parameters()]

    _, reference = gradients(None, 1.0)
    nonzero = sum(int((g != 0).sum()) for g in reference)
    rows = []
    for name in DTYPES:
        for scale in scales:
            loss, got = gradients(getattr(torch, name), scale)
            pairs = list(zip(got, reference, strict=True))
            flushed = sum(int(((g == 0) & (r != 0)).sum()) for g, r in pairs)
            rows.append(
                {
                    "dtype": name,
                    "loss_scale": scale,
                    "tokens": batch_size * seq_len,
                    "loss": loss,
                    "flushed": flushed,
                    "flushed_share": flushed / nonzero,
                    "nonfinite": sum(int((~torch.isfinite(g)).sum()) for g in got),
                    "max_relative_error": _largest_relative_error(pairs),
                }
            )
    return pd.DataFrame(rows)


def _largest_relative_error(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """The largest ||got - reference|| / ||reference|| over the pairs with a non-zero reference;
    inf when any ``got`` holds an inf or NaN (``max`` would skip a NaN found after a number)."""
    if any(not torch.isfinite(got).all() for got, _ in pairs):
        return float("inf")
    return max(float((g - r).norm() / r.norm()) for g, r in pairs if r.norm() > 0)


def train_with_scaler(
    config: ModelConfig,
    batch_size: int,
    seq_len: int,
    steps: int,
    *,
    init_scale: float = 2.0**16,
    lr: float = 1e-3,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> pd.DataFrame:
    """``steps`` AdamW steps of float16 autocast with ``torch.amp.GradScaler`` (starting at
    ``init_scale``) beside the same steps in float32 from the same weights and batches: per
    step both losses, the scale used, whether the scaler skipped the step (it found an inf or
    NaN: the parameters did not move) and whether the parameters moved."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    device = torch.device(device)
    fp16, fp32 = _model(config, seed, device), _model(config, seed, device)
    opt16 = torch.optim.AdamW(fp16.parameters(), lr=lr)
    opt32 = torch.optim.AdamW(fp32.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(device.type, init_scale=init_scale)
    rows = []
    for step in range(steps):
        batch_seed = seed + 1 + step
        inputs, targets = random_batch(config.vocab_size, batch_size, seq_len, device, batch_seed)
        loss32 = _loss(fp32, inputs, targets, None)
        loss32.backward()
        opt32.step()
        opt32.zero_grad(set_to_none=True)
        before = [p.detach().clone() for p in fp16.parameters()]
        loss16 = _loss(fp16, inputs, targets, torch.float16)
        scale = scaler.get_scale()
        scaler.scale(loss16).backward()
        scaler.step(opt16)
        scaler.update()
        opt16.zero_grad(set_to_none=True)
        moved = any(not torch.equal(b, p) for b, p in zip(before, fp16.parameters(), strict=True))
        rows.append(
            {
                "step": step,
                "loss_float32": loss32.item(),
                "loss_float16": loss16.item(),
                "scale": scale,
                "skipped": scaler.get_scale() < scale,
                "parameters_moved": moved,
            }
        )
    return pd.DataFrame(rows)


def byte_vocabulary(config: ModelConfig) -> ModelConfig:
    """``config`` with the 256 byte ids as its vocabulary: float16 matmuls are slow on a CPU
    without float16 arithmetic, and the LM head is most of a small model's."""
    return dataclasses.replace(config, name=f"{config.name}-bytes", vocab_size=256)


def underflow_table(config: ModelConfig, batch_sizes, seq_len: int, scales, device) -> pd.DataFrame:
    """``gradient_underflow`` at each batch size, one frame."""
    return pd.concat(
        [
            gradient_underflow(config, b, seq_len, scales=tuple(scales), device=device)
            for b in batch_sizes
        ],
        ignore_index=True,
    )


def underflow_lines(underflow: pd.DataFrame, scales) -> list[str]:
    """The checks of ``underflow_table`` (bfloat16 flushes nothing; the middle scale cuts
    float16's error at the most tokens; the largest overflows), then what the errors were: by
    size unscaled, with each scale, and bfloat16's at each scale. ``scales``: none, a
    good one, one too large."""
    rows = underflow.set_index(["tokens", "dtype", "loss_scale"])
    most = max(underflow["tokens"])
    plain, scaled, overflowing = (rows.loc[(most, "float16", s)] for s in scales)
    brain = rows.loc[(most, "bfloat16", scales[0])]
    by_size = rows.xs(("float16", scales[0]), level=("dtype", "loss_scale"))["max_relative_error"]
    none_flushed = bool((underflow.loc[underflow["dtype"] == "bfloat16", "flushed"] == 0).all())
    brain_rows = underflow[(underflow["tokens"] == most) & (underflow["dtype"] == "bfloat16")]
    brain_errors = brain_rows["max_relative_error"].tolist()
    brain_scales = ", ".join(f"{s:,.0f}" for s in brain_rows["loss_scale"])
    flushed_at_most = int(brain_rows["flushed"].max())
    return [
        f"bfloat16 flushes no gradient at any size: {none_flushed}",
        f"at {most} tokens a scale of {scales[1]:,.0f} cuts float16's gradient error: "
        f"{bool(scaled['max_relative_error'] < plain['max_relative_error'])}; a scale of "
        f"{scales[2]:,.0f} overflows: {bool(overflowing['nonfinite'] > 0)}",
        f"float16 without a scale: the gradient error grows from {by_size.iloc[0]:.2%} at "
        f"{by_size.index[0]} tokens to {by_size.iloc[-1]:.2%} at {by_size.index[-1]}, with "
        f"{int(plain['flushed'])} gradient elements flushed to zero "
        f"({plain['flushed_share']:.4%} of float32's non-zero ones); with a scale of "
        f"{scales[1]:,.0f}, {scaled['max_relative_error']:.2%} and {int(scaled['flushed'])} "
        f"flushed; at {scales[2]:,.0f}, {int(overflowing['nonfinite']):,} gradient elements are "
        f"inf or NaN. At {most} tokens bfloat16 errs by "
        + " and ".join(sorted({f"{e:.2%}" for e in brain_errors}))
        + f" (loss scale {brain_scales})"
        + (
            " and flushed nothing: the error is its 8 significant bits, not its range"
            if flushed_at_most == 0
            else f" and flushed {flushed_at_most} elements"
        )
        + f". At {most} tokens scaled float16 is "
        f"{brain['max_relative_error'] / scaled['max_relative_error']:.1f}x as accurate as "
        "bfloat16 (the ratio of their largest relative errors); unscaled, "
        f"{brain['max_relative_error'] / plain['max_relative_error']:.1f}x.",
    ]


def scaler_lines(scaler: pd.DataFrame, init_scale: float) -> list[str]:
    """From ``train_with_scaler``: whether skipped steps left the weights alone and the others
    moved them, then how many were skipped, where the scale settled, and the first step's gap
    in loss against float32."""
    skipped = scaler[scaler["skipped"]]
    settled = scaler.loc[~scaler["skipped"], "scale"]
    gap = abs(scaler["loss_float16"].iloc[0] - scaler["loss_float32"].iloc[0])
    stepped = (
        f", and stepped from {settled.iloc[0]:,.0f} on"
        if len(settled)
        else ("; no step went through")
    )
    return [
        f"skipped steps moved no weight: {not skipped['parameters_moved'].any()}; every other "
        f"step did: {bool(scaler.loc[~scaler['skipped'], 'parameters_moved'].all())}",
        f"from {init_scale:,.0f}, GradScaler skipped {len(skipped)} of {len(scaler)} steps, "
        f"halving the scale each time{stepped}. At the first step (the same weights) the float16 "
        f"loss differs from float32's by {gap:.1e}: precision alone; later the gap also holds "
        "the updates float16 skipped.",
    ]
