"""Activation memory at the handout's sizes, counted on the ``meta`` device.

A tensor on the meta device has a shape and a dtype but no storage: a forward pass there runs
every operation's shape logic, and autograd records what each operation saves for backward,
while nothing is computed or allocated. So one xl block at context 2048 (gigabytes of saved
activations) is counted exactly on any laptop. What is counted is the bytes of the saved
tensors (``perflab.memory.saved``), not an allocator's peak.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import torch

from perflab.implementations.checkpointing import run_blocks
from perflab.implementations.model import (
    ModelConfig,
    build_model,
    cross_entropy,
    get_preset,
)
from perflab.lessons.nb04_memory.step_memory import residual_stream_bytes
from perflab.memory.saved import saved_by_module, saved_bytes, saved_tensors

META = torch.device("meta")
MiB = 2**20

#: The 2026 handout's worked example (section 3, "Single-GPU Memory"): xl blocks with 16 heads,
#: batch 4, context 2048, float32, each block compiled with fullgraph, and the bytes it reports
#: saved for backward (in MiB).
HANDOUT_EXAMPLE = {"preset": "xl", "num_heads": 16, "batch_size": 4, "seq_len": 2048}
HANDOUT_SAVED_MIB = {
    "one block, compiled": 3651.31,
    "four blocks as two checkpointed pairs": 160.00,
}


def saved_at_scale(
    config: ModelConfig,
    batch_size: int,
    seq_len: int,
    *,
    num_blocks: int = 1,
    compiled: bool = False,
    group_size: int | None = None,
) -> int:
    """Bytes that ``num_blocks`` blocks of ``config`` save for backward on a (batch, seq,
    d_model) float32 input, counted on the meta device. ``compiled``: the stack compiled whole
    with AOTAutograd's min-cut partitioner (backend ``aot_eager_decomp_partition``, inductor's
    partitioner without code generation); ``group_size``: checkpointed in groups of that many
    blocks (``perflab.implementations.checkpointing``)."""
    with torch.device(META):
        model = build_model(config, context=seq_len, layers=num_blocks)
        x = torch.randn(batch_size, seq_len, config.d_model, requires_grad=True)
    strategy = "single" if group_size else "none"

    def forward(h):
        return run_blocks(model.blocks, h, strategy, group_size)

    if compiled:
        forward = torch.compile(forward, backend="aot_eager_decomp_partition", fullgraph=True)
        forward(x)  # compile outside the count
    return saved_bytes(saved_tensors(lambda: forward(x), model.parameters()))


def handout_example() -> pd.DataFrame:
    """The handout's saved-memory figures beside this workbook's model, counted the same way
    (``HANDOUT_EXAMPLE``), with the difference in MiB. (Its four compiled blocks are four times
    its one block; compiling a four-block stack here would take seconds and say the same.)"""
    example = dict(HANDOUT_EXAMPLE)
    config = replace(get_preset(example.pop("preset")), num_heads=example.pop("num_heads"))
    ours = {
        "one block, compiled": saved_at_scale(config, **example, compiled=True),
        "four blocks as two checkpointed pairs": saved_at_scale(
            config, **example, num_blocks=4, group_size=2
        ),
    }
    mib = {k: v / MiB for k, v in ours.items()}
    table = pd.DataFrame({"this_workbook_MiB": mib, "handout_MiB": HANDOUT_SAVED_MIB})
    table["difference_MiB"] = table["this_workbook_MiB"] - table["handout_MiB"]
    return table


def block_gradient_bytes(config: ModelConfig) -> int:
    """Bytes of one block's float32 gradients: one value per parameter of the block."""
    with torch.device(META):
        block = build_model(config, layers=1).blocks[0]
    return 4 * sum(p.numel() for p in block.parameters())


def handout_sizes(presets: list[str], seq_lens: list[int], batch_size: int = 4) -> pd.DataFrame:
    """Per preset and context: the float32 residual stream (batch x seq x d_model x 4 bytes),
    what one block saves for backward (eager, counted on the meta device) and one block's
    gradients, in MiB; the sizes the handout asks about, whatever this machine can hold."""
    rows = []
    for preset in presets:
        config = get_preset(preset)
        for seq_len in seq_lens:
            rows.append(
                {
                    "preset": preset,
                    "seq_len": seq_len,
                    "batch_size": batch_size,
                    "residual_stream_MiB": residual_stream_bytes(config, batch_size, seq_len) / MiB,
                    "block_saves_MiB": saved_at_scale(config, batch_size, seq_len) / MiB,
                    "block_gradients_MiB": block_gradient_bytes(config) / MiB,
                }
            )
    return pd.DataFrame(rows)


def model_saved_tensors(
    config: ModelConfig, batch_size: int, seq_len: int, device: torch.device = META
) -> pd.DataFrame:
    """Every tensor the whole model (embedding, blocks, final norm, LM head) and its
    cross-entropy loss save for backward on a (batch, seq) batch of token ids, with the module
    that saved each (``saved_tensors(..., track_modules=True)``); counted on ``device``, by
    default meta (nothing computed or allocated). Buffers (RoPE's tables) count as parameters:
    they live in memory whatever the step."""
    with torch.device(device):
        model = build_model(config, context=seq_len)
        tokens = torch.zeros(batch_size, seq_len, dtype=torch.long)

    held = [*model.parameters(), *model.buffers()]
    return saved_tensors(lambda: cross_entropy(model(tokens), tokens), held, track_modules=True)


def whole_step_memory(
    config: ModelConfig,
    batch_size: int,
    seq_len: int,
    saved: pd.DataFrame | None = None,
    foreach: bool = False,
) -> dict:
    """A model of one float32 AdamW training step's memory, from sizes counted on meta.

    Held across steps: parameters and AdamW's two moments (4 + 8 bytes per parameter). The
    step (``zero_grad(set_to_none=True)``, the workbook's) frees the gradients, then makes:

    - the activations the forward and the loss save for backward (``saved``, by default
      ``model_saved_tensors``) and, as backward starts, the loss's gradient with respect to the
      log-probabilities and then to the logits (two batch x seq x vocab float32 tensors):
      ``saved + 2 x logits``; a forward with autograd holds ``saved + logits`` (the logits
      beside the log-probabilities the loss saves);
    - by the optimizer step, every gradient (4 bytes per parameter) and AdamW's temporaries,
      sqrt(v) and its quotient: two of the largest parameter's size when AdamW loops over
      the tensors (the CPU's default), one of every parameter's with ``foreach`` (CUDA's).

    So above parameters and optimizer state, step activation peak = max(saved + 2 x logits,
    gradients + AdamW's temporaries). The CPU profiler measures just that (it cannot see the
    frees of gradients made before it started); CUDA's counter, minus what was allocated
    before the step, measures it less the gradients. A model, not a measurement: it omits
    other temporaries, the allocator's rounding and fragmentation; notebook 04 holds it
    against the measured small sizes."""
    if saved is None:
        saved = model_saved_tensors(config, batch_size, seq_len)
    with torch.device(META):
        sizes = [4 * p.numel() for p in build_model(config).parameters()]
    parameters = sum(sizes)
    temporaries = parameters if foreach else 2 * max(sizes)
    logits = batch_size * seq_len * config.vocab_size * 4
    activations = saved_bytes(saved)
    backward, optimizer = activations + 2 * logits, parameters + temporaries
    step = max(backward, optimizer)
    return {
        "parameters_bytes": parameters,
        "gradients_bytes": parameters,
        "optimizer_state_bytes": 2 * parameters,
        "saved_activations_bytes": activations,
        "logits_bytes": logits,
        "adamw_temporaries_bytes": temporaries,
        "forward_activation_peak_bytes": activations + logits,
        "step_activation_peak_bytes": step,
        "forward_peak_bytes": parameters + activations + logits,
        "step_peak_bytes": 3 * parameters + step,
        "step_peak_in": "backward" if backward >= optimizer else "optimizer",
    }


def whole_step_table(
    presets: list[str], seq_lens: list[int], batch_size: int = 4, foreach: bool = False
) -> pd.DataFrame:
    """``whole_step_memory`` per preset and context, in GiB, with the module that saves the
    most for backward and its share of the saved activations."""
    rows = []
    for preset in presets:
        config = get_preset(preset)
        for seq_len in seq_lens:
            saved = model_saved_tensors(config, batch_size, seq_len)
            memory = whole_step_memory(config, batch_size, seq_len, saved, foreach)
            top = saved_by_module(saved).iloc[0]
            rows.append(
                {
                    "preset": preset,
                    "seq_len": seq_len,
                    "batch_size": batch_size,
                    **{
                        k.replace("_bytes", "_GiB"): v / 2**30 if k.endswith("_bytes") else v
                        for k, v in memory.items()
                    },
                    "largest_saver": top["module"],
                    "largest_saver_share": top["share"],
                }
            )
    return pd.DataFrame(rows)


def modelled_step_peaks(
    config: ModelConfig,
    batch_size: int,
    seq_lens: list[int],
    device: torch.device,
    optimizer: str = "for-loop",
) -> pd.DataFrame:
    """What ``step_memory.step_peak_memory`` should measure on ``device``
    for a float32 forward and training step of ``config``, by ``whole_step_memory``: on a CPU the
    activation peaks (the profiler does not see the frees of gradients made before it
    started); on CUDA the counter's rise above what was allocated before the step (gradients
    included): the backward peak less the gradients, or AdamW's temporaries, whichever is
    larger. ``optimizer``: the measured step's AdamW ("for-loop", the sweep's, or "foreach";
    fused AdamW's temporaries live inside its kernels, which this model does not cover); the
    model of CUDA's default foreach held against a for-loop step of small (batch 4, context
    128) was 5.6x the peak measured on an H200. One row per context and mode, in bytes."""
    if optimizer not in ("for-loop", "foreach"):
        raise ValueError(f"optimizer must be 'for-loop' or 'foreach', got {optimizer!r}")
    rows = []
    for seq_len in seq_lens:
        memory = whole_step_memory(config, batch_size, seq_len, foreach=optimizer == "foreach")
        backward = memory["saved_activations_bytes"] + 2 * memory["logits_bytes"]
        step = memory["step_activation_peak_bytes"]
        if device.type == "cuda":
            step = max(backward - memory["gradients_bytes"], memory["adamw_temporaries_bytes"])
        rows += [
            {
                "context_length": seq_len,
                "mode": "forward",
                "model_bytes": memory["forward_activation_peak_bytes"],
            },
            {"context_length": seq_len, "mode": "train-step", "model_bytes": step},
        ]
    return pd.DataFrame(rows)
