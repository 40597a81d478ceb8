"""Record a torch.profiler trace of one training step of the workbook's model (notebook 02).

The step is ``perflab.bench.make_step``'s, with its "step", "forward", "backward" and
"optimizer" ranges; the model's attention can be swapped for the annotated one (ranges for
scores, softmax and weighted sum) or for PyTorch's fused ``scaled_dot_product_attention``.
On CUDA the trace holds device kernels, on CPU only CPU operators.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from perflab.attention import annotated_attention, naive_attention
from perflab.bench.steps import MODES, make_step, random_batch
from perflab.device import parse_dtype, resolve_device, synchronize
from perflab.model import TransformerLM, get_preset

ATTENTIONS = {
    "naive": naive_attention,
    "annotated": annotated_attention,
    "sdpa": F.scaled_dot_product_attention,
}


def record_step_trace(
    path: str | Path,
    preset: str,
    context_length: int,
    batch_size: int = 4,
    attention: str = "annotated",
    mode: str = "train-step",
    warmup: int = 2,
    steps: int = 1,
    dtype: str = "float32",
    device: str | torch.device = "auto",
    seed: int = 0,
) -> Path:
    """Profile ``steps`` steps after ``warmup`` unprofiled ones; write the trace to ``path``
    (gzipped when it ends in .gz) and return the path."""
    if attention not in ATTENTIONS:
        raise ValueError(f"unknown attention {attention!r}; valid: {', '.join(ATTENTIONS)}")
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    config = get_preset(preset)
    if not 1 <= context_length <= config.context_length:
        raise ValueError(
            f"context_length must be 1 to {config.context_length}, got {context_length}"
        )
    device = resolve_device(device)
    torch.manual_seed(seed)
    with torch.device(device):
        model = TransformerLM(config, attention_fn=ATTENTIONS[attention])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if mode == "train-step" else None
    inputs, targets = random_batch(config.vocab_size, batch_size, context_length, device, seed)
    step = make_step(model, inputs, targets, mode, parse_dtype(dtype), optimizer)
    for _ in range(warmup):
        step()
    synchronize(device)
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
        synchronize(device)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(plain))
        if path.suffix == ".gz":
            with plain.open("rb") as src, gzip.open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(plain, path)
    return path
