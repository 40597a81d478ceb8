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

from perflab.checkpointing import run_blocks
from perflab.memory.measure import residual_stream_bytes
from perflab.memory.saved import saved_bytes, saved_tensors
from perflab.model import ModelConfig, TransformerLM, get_preset, sized_for

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


def saved_at_scale(config: ModelConfig, batch_size: int, seq_len: int, *, num_blocks: int = 1,
                   compiled: bool = False, group_size: int | None = None) -> int:  # fmt: skip
    """Bytes that ``num_blocks`` blocks of ``config`` save for backward on a (batch, seq,
    d_model) float32 input, counted on the meta device. ``compiled``: the stack compiled whole
    with AOTAutograd's min-cut partitioner (backend ``aot_eager_decomp_partition``, inductor's
    partitioner without code generation); ``group_size``: checkpointed in groups of that many
    blocks (``perflab.checkpointing``)."""
    with torch.device(META):
        model = TransformerLM(replace(sized_for(config, seq_len), num_layers=num_blocks))
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
        block = TransformerLM(replace(config, num_layers=1)).blocks[0]
    return 4 * sum(p.numel() for p in block.parameters())


def handout_sizes(presets: list[str], seq_lens: list[int], batch_size: int = 4) -> pd.DataFrame:
    """Per preset and context: the float32 residual stream (batch x seq x d_model x 4 bytes),
    what one block saves for backward (eager, counted on the meta device) and one block's
    gradients, in MiB; the sizes the handout asks about, whatever this machine can hold."""
    rows = []
    for preset in presets:
        config = get_preset(preset)
        for seq_len in seq_lens:
            rows.append({
                "preset": preset, "seq_len": seq_len, "batch_size": batch_size,
                "residual_stream_MiB": residual_stream_bytes(config, batch_size, seq_len) / MiB,
                "block_saves_MiB": saved_at_scale(config, batch_size, seq_len) / MiB,
                "block_gradients_MiB": block_gradient_bytes(config) / MiB,
            })  # fmt: skip
    return pd.DataFrame(rows)
