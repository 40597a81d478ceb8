"""A model, not a measurement: how long one training step would take on GPUs, from its counted
FLOPs and bytes (notebook 09 prices the leaderboard's step, the 8B model on 2 B200s, this way).

The work is counted per operator on PyTorch's ``meta`` device, which computes shapes only, so
the 8B model at 32,768 tokens costs nothing to "run": the workbook's own model, loss heads and
AdamW go through ``OpCounter``, which records each operator's FLOPs (PyTorch's own formulas,
``torch.utils.flop_counter``) and the bytes it reads and writes (its tensor inputs and outputs;
views are free). Run eagerly, each operator is one kernel, so its time is its roofline,

    max(FLOPs / (peak x matmul efficiency), bytes / (bandwidth x memory efficiency)),

and a step is the sum over its operators. Two parts come from formulas instead, because their
eager code is not what a GPU runs: FlashAttention (causal forward ``4 b H d_h S(S+1)/2`` FLOPs,
backward 2.5 times that: it recomputes the scores and runs four more matmuls, Dao 2023; its
HBM traffic is Q, K, V and O once per pass, the tiles' re-reads being served from cache) and
fused AdamW (one kernel reading parameter, gradient and both moments and writing three of
them). ``torch.compile`` is priced as its best case, every memory-bound operator fused away
into the matmuls, so its row is a bound on what compile can save. FSDP's communication (the
weights gathered in forward and again in backward, the gradients reduce-scattered) is assumed
hidden behind compute; only what exceeds it is added.

The efficiencies are assumptions, stated in ``Efficiency``; change them and the estimate moves
with them. What it cannot see: kernel launch gaps, the allocator, load imbalance, and anything
the counted operators do not do.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from perflab.implementations.attention import naive_attention
from perflab.implementations.attention.reference import attention_matmul_flops
from perflab.implementations.fused_cross_entropy import (
    IGNORE_INDEX,
    FusedLinearCrossEntropy,
    default_chunk_size,
)
from perflab.implementations.model import ModelConfig, TransformerBlock, cross_entropy
from perflab.implementations.rotary import RotaryEmbedding
from perflab.measure.conclusions import Finding
from perflab.measure.device import parse_dtype
from perflab.measure.hardware import GPUS, GPUSpec

#: The leaderboard's GPU as its datasheet rates it (``perflab.measure.hardware``); the
#: handout's 2,500 TFLOP/s figure is ``perflab.measure.hardware.HANDOUT_B200``; notebook 09
#: prices the step at both.
B200 = GPUS["HGX B200"]


@dataclass(frozen=True)
class Efficiency:
    """The share of each peak the model assumes is reached: large bf16 matmuls (cuBLAS reaches
    about 70-80% on large shapes), FlashAttention (FA2 reports 50-73% of the A100's peak
    forward, less backward), memory-bound kernels and collectives. Assumptions, not
    measurements."""

    matmul: float = 0.7
    attention: float = 0.5
    memory: float = 0.8
    link: float = 0.8

    def __post_init__(self) -> None:
        for name in ("matmul", "attention", "memory", "link"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"efficiency {name} must be in (0, 1], got {value!r}")


class OpCounter(TorchDispatchMode):
    """Each ATen operator run under it: calls, FLOPs (``torch.utils.flop_counter``'s formula
    where it has one, else 0) and bytes read and written (tensor inputs and outputs; views and
    ``detach`` are free). ``paused()`` stops counting for a while."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[float]] = {}
        self._paused = False

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self._paused, before = True, self._paused
        try:
            yield
        finally:
            self._paused = before

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if self._paused or func.is_view or packet in _FREE:
            return out
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        formula = flop_registry.get(_OUT_OF_PLACE.get(packet, packet))
        flops = formula(*args, **kwargs, out_val=out) if formula else 0
        row = self.rows.setdefault(str(packet), [0, 0, 0])
        row[0] += 1
        row[1] += flops
        row[2] += sum(t.numel() * t.element_size() for t in tensors)
        return out

    def table(self) -> pd.DataFrame:
        """One row per operator: op, calls, flops, bytes."""
        return pd.DataFrame(
            [(op, *values) for op, values in self.rows.items()],
            columns=["op", "calls", "flops", "bytes"],
        ).astype({"calls": int, "flops": float, "bytes": float})


#: Operators that move no data: aliases the dispatcher does not mark as views, and scalars.
_FREE = {
    torch.ops.aten.detach,
    torch.ops.aten._unsafe_view,
    torch.ops.aten.promote_types,
    torch.ops.aten._local_scalar_dense,
}


#: In-place matmuls whose FLOPs are their out-of-place twin's (the fused head's ``addmm_``).
_OUT_OF_PLACE = {
    torch.ops.aten.addmm_: torch.ops.aten.addmm,
    torch.ops.aten.baddbmm_: torch.ops.aten.baddbmm,
}


def count(fn: Callable[[OpCounter], object]) -> pd.DataFrame:
    """The operators ``fn(counter)`` runs (build meta tensors inside or before it)."""
    counter = OpCounter()
    with counter:
        fn(counter)
    return counter.table()


def _meta(shape: tuple[int, ...], dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta", requires_grad=grad)


@functools.lru_cache(maxsize=32)
def block_ops(
    config: ModelConfig, batch: int, seq_len: int, dtype: torch.dtype, forward_only: bool = False
) -> pd.DataFrame:
    """One Transformer block's forward and backward (or forward only) in eager mode, without its
    attention (counted apart: ``naive_attention_ops``, ``flash_attention_work``)."""
    with torch.device("meta"):
        rope = RotaryEmbedding(config.head_dim, max(seq_len, 1), config.rope_theta)
        block = TransformerBlock(config, rope).to(dtype)
    x = _meta((batch, seq_len, config.d_model), dtype, grad=not forward_only)

    def run(counter: OpCounter) -> None:
        class Uncounted(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q, k, v):
                with counter.paused():
                    return torch.empty_like(q)

            @staticmethod
            def backward(ctx, grad):
                with counter.paused():
                    return (torch.empty_like(grad),) * 3

        block.attn.attention_fn = lambda q, k, v, is_causal: Uncounted.apply(q, k, v)
        y = block(x)
        if not forward_only:
            y.backward(torch.empty_like(y))

    return count(run)


@functools.lru_cache(maxsize=32)
def naive_attention_ops(
    config: ModelConfig, batch: int, seq_len: int, dtype: torch.dtype, forward_only: bool = False
) -> pd.DataFrame:
    """One layer's naive causal attention (the full score matrix), forward and backward."""
    shape = (batch, config.num_heads, seq_len, config.head_dim)
    q, k, v = (_meta(shape, dtype, grad=not forward_only) for _ in range(3))

    def run(counter: OpCounter) -> None:
        y = naive_attention(q, k, v, is_causal=True)
        if not forward_only:
            y.backward(torch.empty_like(y))

    return count(run)


def flash_attention_work(
    config: ModelConfig, batch: int, seq_len: int, dtype: torch.dtype, forward_only: bool = False
) -> pd.DataFrame:
    """One layer's causal FlashAttention-2 from formulas (module docstring): FLOPs and HBM bytes
    of the forward and (unless ``forward_only``) the backward, one row each. Under grouped-query
    attention the keys and values (and their gradients) are ``kv_dim`` wide: a FlashAttention
    kernel reads each key head once for its group of query heads, without repeating it."""
    width = torch.finfo(dtype).bits // 8
    heads, head_dim = config.num_heads, config.head_dim
    forward = attention_matmul_flops(batch * heads, seq_len, seq_len, head_dim, causal=True)
    queries = batch * seq_len * config.d_model * width  # Q, O, dO or dQ
    keys = batch * seq_len * config.kv_dim * width  # K, V, dK or dV
    lse = batch * heads * seq_len * 4
    rows = [("flash forward", 1, forward, 2 * queries + 2 * keys + lse)]  # Q, K, V in; O out
    if not forward_only:  # Q, K, V, O, dO and the LSE in; dQ, dK, dV out
        rows.append(("flash backward", 1, 2.5 * forward, 4 * queries + 4 * keys + lse))
    return pd.DataFrame(rows, columns=["op", "calls", "flops", "bytes"])


@functools.lru_cache(maxsize=32)
def head_ops(
    config: ModelConfig,
    batch: int,
    seq_len: int,
    dtype: torch.dtype,
    head: str,
    chunk: int | None = None,
) -> pd.DataFrame:
    """The output projection and the loss, forward and backward: "plain" (the logits, then
    ``cross_entropy``) or "fused" (``FusedLinearCrossEntropy``, ``chunk`` tokens at a time;
    None: ``default_chunk_size``)."""
    tokens = batch * seq_len
    hidden = _meta((tokens, config.d_model), dtype, grad=True)
    weight = _meta((config.vocab_size, config.d_model), dtype, grad=True)
    targets = torch.zeros(tokens, dtype=torch.long, device="meta")

    def run(counter: OpCounter) -> None:
        if head == "fused":
            size = chunk or default_chunk_size(tokens, config.vocab_size, config.d_model)
            loss = FusedLinearCrossEntropy.apply(hidden, weight, targets, size, IGNORE_INDEX)
        else:
            loss = cross_entropy((hidden @ weight.T)[None], targets[None])
        loss.backward()

    return count(run)


@functools.lru_cache(maxsize=32)
def adamw_ops(
    config: ModelConfig, world_size: int, dtype: torch.dtype, optimizer: str
) -> pd.DataFrame:
    """One AdamW step over a rank's 1 / ``world_size`` of the parameters: "for-loop" (PyTorch's
    single-tensor AdamW, counted) or "fused" (one kernel: parameter, gradient and both moments
    read, three written)."""
    params = config.num_parameters() / world_size
    width = torch.finfo(dtype).bits // 8
    if optimizer == "fused":
        return pd.DataFrame(
            [("fused AdamW", 1, 0.0, 7 * width * params)], columns=["op", "calls", "flops", "bytes"]
        )
    # PyTorch's for-loop AdamW does the same operators on every parameter: count one (the
    # first step initialises the moments, so count the second) and scale by its size.
    p = torch.nn.Parameter(_meta((1024, 1024), dtype))
    p.grad = torch.empty_like(p)
    adamw = torch.optim.AdamW([p], foreach=False)
    adamw.step()
    ops = count(lambda counter: adamw.step())
    return ops.assign(bytes=ops["bytes"] * params / p.numel(), calls=ops["calls"])


#: The priced rungs, each on top of the ones before: (name, what it changes).
RUNGS = (
    ("naive (eager)", {}),
    ("FlashAttention", {"attention": "flash"}),
    ("fused loss head", {"head": "fused"}),
    ("fused AdamW", {"optimizer": "fused"}),
    ("torch.compile (best case)", {"compiled": True}),
    ("checkpointing every block", {"checkpointing": True}),
)


@dataclass(frozen=True)
class StepPlan:
    """What a step runs: the attention, loss head and optimizer, compiled or not, with or
    without activation checkpointing at every block (its forward recomputed in backward)."""

    attention: str = "naive"
    head: str = "plain"
    optimizer: str = "for-loop"
    compiled: bool = False
    checkpointing: bool = False
    head_chunk: int | None = None  # the fused head's tokens per chunk; None: the default

    def __post_init__(self) -> None:
        for field, valid in (
            ("attention", ("naive", "flash")),
            ("head", ("plain", "fused")),
            ("optimizer", ("for-loop", "fused")),
        ):
            if getattr(self, field) not in valid:
                raise ValueError(
                    f"unknown {field} {getattr(self, field)!r}; valid: {', '.join(valid)}"
                )
        chunk = self.head_chunk
        if chunk is not None and (not isinstance(chunk, int) or chunk < 1):
            raise ValueError(f"head_chunk must be a positive number of tokens, got {chunk!r}")


def _timed(
    ops: pd.DataFrame,
    gpu: GPUSpec,
    eff: Efficiency,
    flops_rate: float,
    part: str,
    repeat: float = 1,
) -> pd.DataFrame:
    """``ops`` repeated ``repeat`` times, each operator at its roofline."""
    ops = ops.assign(
        calls=ops["calls"] * repeat, flops=ops["flops"] * repeat, bytes=ops["bytes"] * repeat
    )
    compute = ops["flops"] / (flops_rate * gpu.bf16_flops)
    memory = ops["bytes"] / (eff.memory * gpu.hbm_bytes_per_s)
    return ops.assign(
        part=part,
        time_s=pd.concat([compute, memory], axis=1).max(axis=1),
        memory_bound=memory > compute,
    )


def step_ops(
    config: ModelConfig,
    plan: StepPlan,
    batch_size: int,
    seq_len: int,
    world_size: int,
    gpu: GPUSpec = B200,
    eff: Efficiency = Efficiency(),
    dtype: str = "bfloat16",
) -> pd.DataFrame:
    """Every operator of one rank's step under FSDP on ``world_size`` GPUs (``batch_size``
    sequences in all, split over the ranks), with its roofline time: columns part, op, calls,
    flops, bytes, time_s, memory_bound. A compiled plan drops the memory-bound operators of the
    blocks, norms and head (the best case); communication is one row, "FSDP collectives",
    whose time counts only what compute does not hide."""
    if world_size < 1 or batch_size % world_size:
        raise ValueError(f"world size {world_size} must divide the batch of {batch_size}")
    torch_dtype = parse_dtype(dtype)
    batch, layers = batch_size // world_size, config.num_layers
    attention = {"naive": naive_attention_ops, "flash": flash_attention_work}[plan.attention]
    attention_rate = eff.matmul if plan.attention == "naive" else eff.attention
    parts = [
        _timed(
            block_ops(config, batch, seq_len, torch_dtype), gpu, eff, eff.matmul, "blocks", layers
        ),
        _timed(
            attention(config, batch, seq_len, torch_dtype),
            gpu,
            eff,
            attention_rate,
            "attention",
            layers,
        ),
        _timed(
            head_ops(config, batch, seq_len, torch_dtype, plan.head, plan.head_chunk),
            gpu,
            eff,
            eff.matmul,
            "loss head",
        ),
        _timed(
            adamw_ops(config, world_size, torch_dtype, plan.optimizer),
            gpu,
            eff,
            eff.matmul,
            "AdamW",
        ),
    ]
    if plan.checkpointing:
        parts += [
            _timed(
                block_ops(config, batch, seq_len, torch_dtype, forward_only=True),
                gpu,
                eff,
                eff.matmul,
                "recomputed forward",
                layers,
            ),
            _timed(
                attention(config, batch, seq_len, torch_dtype, forward_only=True),
                gpu,
                eff,
                attention_rate,
                "recomputed forward",
                layers,
            ),
        ]
    ops = pd.concat(parts, ignore_index=True)
    if plan.compiled:
        fusible = ops["part"].isin(["blocks", "loss head", "recomputed forward"])
        ops = ops[~(fusible & (ops["flops"] == 0))].reset_index(drop=True)
    # FSDP: the weights all-gathered in forward and in backward, the gradients reduce-scattered,
    # each moving (W - 1) / W of the parameters' bytes per rank.
    width = torch.finfo(torch_dtype).bits // 8
    wire = 3 * (world_size - 1) / world_size * config.num_parameters() * width
    comm_s = wire / (eff.link * gpu.nvlink_bytes_per_s)
    exposed = max(0.0, comm_s - ops["time_s"].sum())
    comm = pd.DataFrame(
        [
            {
                "part": "communication",
                "op": "FSDP collectives",
                "calls": 3,
                "flops": 0.0,
                "bytes": wire,
                "time_s": exposed,
                "memory_bound": False,
                "hidden_s": comm_s - exposed,
            }
        ]
    )
    return pd.concat([ops, comm], ignore_index=True)


def _collectives_clause(rung: pd.Series) -> str:
    """What the model says of the last rung's FSDP collectives: hidden behind compute, or how
    much of them the step waits for."""
    hidden, exposed = rung["comm_hidden_s"] * 1e3, rung["comm_exposed_s"] * 1e3
    if exposed <= 0:
        return f"; FSDP's collectives ({hidden:.0f} ms a step) hide behind compute in this model"
    return (
        f"; FSDP's collectives take {hidden + exposed:.0f} ms a step in this model, "
        f"{exposed:.0f} ms of them beyond the compute they overlap"
    )


def price_rungs(
    config: ModelConfig,
    batch_size: int,
    seq_len: int,
    world_size: int,
    gpu: GPUSpec = B200,
    eff: Efficiency = Efficiency(),
    dtype: str = "bfloat16",
) -> pd.DataFrame:
    """Each of ``RUNGS`` on top of the ones before: the estimated step time per rank, its FLOPs
    and bytes, the share of time in memory-bound operators, and the rung's speed-up over the
    one before (``speedup_over_previous``: the time before over the time after; below 1, the
    rung costs time; 1 for the first)."""
    plan, rows = StepPlan(), []
    for name, change in RUNGS:
        plan = replace(plan, **change)
        ops = step_ops(config, plan, batch_size, seq_len, world_size, gpu, eff, dtype)
        total = ops["time_s"].sum()
        rows.append(
            {
                "rung": name,
                "step_s": total,
                "TFLOP_per_rank": ops["flops"].sum() / 1e12,
                "TB_per_rank": ops["bytes"].sum() / 1e12,
                "memory_bound_share": ops.loc[ops["memory_bound"], "time_s"].sum() / total,
                "comm_hidden_s": ops["hidden_s"].sum(),
                "comm_exposed_s": ops.loc[ops["part"] == "communication", "time_s"].sum(),
            }
        )
    table = pd.DataFrame(rows)
    before = table["step_s"].shift().fillna(table["step_s"])
    return table.assign(speedup_over_previous=before / table["step_s"])


def time_by_part(ops: pd.DataFrame) -> pd.DataFrame:
    """``step_ops``'s rows summed per part: seconds, share of the step, FLOPs and bytes."""
    parts = ops.groupby("part", sort=False)[["time_s", "flops", "bytes"]].sum()
    return parts.assign(share=parts["time_s"] / parts["time_s"].sum()).reset_index()


def price_rungs_at(
    config: ModelConfig,
    batch_size: int,
    seq_len: int,
    world_size: int,
    gpus: list[GPUSpec],
    eff: Efficiency = Efficiency(),
    dtype: str = "bfloat16",
) -> pd.DataFrame:
    """``price_rungs`` on each GPU of ``gpus`` (the datasheet's B200 and the handout's figure,
    say), one block of rows per GPU with its name in ``gpu``."""
    return pd.concat(
        [
            price_rungs(config, batch_size, seq_len, world_size, gpu, eff, dtype).assign(
                gpu=gpu.name
            )
            for gpu in gpus
        ],
        ignore_index=True,
    )


def rung_findings(table: pd.DataFrame, config: ModelConfig) -> list[Finding]:
    """Per GPU of ``price_rungs_at``'s table: the naive step and its share of memory-bound
    operators (and whether its score matrices alone could be held), every rung's step and its
    speed-up, the largest saving and the rungs that cost time. Sentences of a model, not of
    measurements: no interval."""
    findings = []
    scores_gb = config.num_heads * config.context_length**2 * 2 / 1e9
    for gpu, rows in table.groupby("gpu", sort=False):
        rows = rows.set_index("rung")
        saved = -rows["step_s"].diff().fillna(0.0)
        naive_s, best_s = rows["step_s"].iloc[0], rows["step_s"].iloc[-1]
        costly = ", ".join(f"{name} ({-saved[name]:.2f} s)" for name in saved.index[saved < 0])
        findings.append(
            Finding(
                f"leaderboard step model on {gpu}",
                f"{gpu}: the naive eager step {naive_s:.1f} s by this model, "
                f"{rows['memory_bound_share'].iloc[0]:.0%} of it in memory-bound operators (its "
                f"score matrix alone is {scores_gb:.0f} GB per sequence and layer in bf16: it "
                f"could not hold its saved activations); every rung {best_s:.2f} s "
                f"({naive_s / best_s:.1f}x faster); "
                f"the largest saving {saved.idxmax()} ({saved.max():.2f} s)"
                + (f"; costing time: {costly}" if costly else "")
                + _collectives_clause(rows.iloc[-1]),
            )
        )
    return findings
