"""Data-parallel, FSDP and sharded-optimizer adapters against one process, on 2 ranks.

Each check is a rank function for ``perflab.distributed.launch``: every rank imports the
adapters again (by path or module name), builds its model from its own seed (so a wrapper that
forgets to broadcast rank 0's parameters fails), trains on its slice of each global batch, and
compares the parameters with a single-process copy of rank 0's model trained on the whole
batch. The worst difference over ranks is the measured error.
"""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.distributed as dist
from torch import nn

from perflab.distributed.parity import local_slice, max_difference
from perflab.distributed.toy import global_batch, loss_fn, toy_model
from perflab.tools.adapters.loading import NotProvided, call, load_adapters

#: float32 parameters after a few steps: data parallelism sums the same gradients in another
#: order, so they agree to rounding, not bit for bit (perflab's own: 6e-8 for DDP, 1.5e-8 for
#: FSDP on the 2-core Xeon that CI runs on; ``perflab check --adapters perflab.cs336``).
FP32_TOLERANCE = 1e-6
#: Forward under bfloat16 autocast on both sides: the rounding of bfloat16 (8 bits) in
#: products whose sums differ in order (perflab's own: 6.1e-5).
AUTOCAST_TOLERANCE = 1e-3
#: Low-precision compute with float32 master weights (the course's own tolerance for fp16).
LOW_PRECISION_TOLERANCE = 1e-4
#: AdamW normalises each update, so a rounding difference in a gradient can move a parameter
#: by up to the learning rate times a rounding error; 1e-6 is ample for float32.
OPTIMIZER_TOLERANCE = 1e-6

DDP_ADAPTERS = {  # getter -> (after backward, at batch start)
    "get_ddp": ("ddp_on_after_backward", None),
    "get_ddp_individual_parameters": ("ddp_individual_parameters_on_after_backward", None),
    "get_ddp_bucketed": ("ddp_bucketed_on_after_backward", "ddp_bucketed_on_train_batch_start"),
}
#: Bucket sizes (MB) for the bucketed variant: one parameter per bucket, a few, one bucket.
BUCKET_SIZES_MB = (0.001, 0.02, 100.0)


class SmallLM(nn.Module):
    """The shape of the course's FSDP test model: embedding, RMSNorm, two linear layers, an
    output projection; built from ``cs336_basics`` layers where that package is installed (so
    an FSDP that shards only those classes shards here too), else from ``torch.nn``."""

    def __init__(self, vocab_size: int = 100, d_model: int = 64, d_ff: int = 128):
        super().__init__()
        try:
            from cs336_basics.model import Embedding, Linear, RMSNorm
        except ImportError:
            Embedding, RMSNorm = nn.Embedding, nn.RMSNorm

            def Linear(d_in, d_out):  # noqa: N802  (stands in for a class)
                return nn.Linear(d_in, d_out, bias=False)

        self.embedding = Embedding(vocab_size, d_model)
        self.norm1 = RMSNorm(d_model)
        self.linear1 = Linear(d_model, d_ff)
        self.norm2 = RMSNorm(d_ff)
        self.linear2 = Linear(d_ff, d_model)
        self.lm_head = Linear(d_model, vocab_size)

    def forward(self, x):
        x = torch.relu(self.linear1(self.norm1(self.embedding(x))))
        return self.lm_head(self.linear2(self.norm2(x)))


def _worst_over_ranks(value: float) -> float:
    measured = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(measured, op=dist.ReduceOp.MAX)
    return float(measured.item())


def _params_error(module: nn.Module, reference: nn.Module) -> float:
    return _worst_over_ranks(
        max_difference(list(module.parameters()), list(reference.parameters()))
    )


def _not_provided(reason: NotProvided) -> dict:
    return {"status": "not provided", "detail": str(reason)}


def ddp_rank(
    spec: str,
    getter: str,
    mode: str,
    bucket_size_mb: float | None = None,
    steps: int = 3,
    batch_size: int = 8,
    seq_len: int = 16,
) -> dict:
    """``mode``: "fp32" (plain steps), "accumulation" (two micro-batches per step, the first
    under ``no_sync()``), "bf16 autocast" (forward under ``torch.autocast``)."""
    adapters = load_adapters(spec)
    after_backward, batch_start = DDP_ADAPTERS[getter]
    module = toy_model("toy", seed=dist.get_rank())
    reference = toy_model("toy", seed=0)
    kwargs = {} if bucket_size_mb is None else {"bucket_size_mb": bucket_size_mb}
    autocast = (
        (lambda: torch.autocast(module.embedding.weight.device.type, torch.bfloat16))
        if mode == "bf16 autocast"
        else contextlib.nullcontext
    )
    try:
        wrapped = call(adapters, getter, module, **kwargs)
        if mode == "accumulation" and not hasattr(wrapped, "no_sync"):
            return {
                "status": "skipped",
                "detail": "the wrapper has no no_sync() (the handout does not ask for one): "
                "gradient accumulation would all-reduce every micro-batch",
            }
        optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.05)
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
        for step in range(steps):
            inputs, targets = global_batch(reference, batch_size, seq_len, step)
            if batch_start is not None:
                call(adapters, batch_start, wrapped, optimizer)
            optimizer.zero_grad()
            x, y = local_slice(inputs), local_slice(targets)
            if mode == "accumulation":
                (x0, x1), (y0, y1) = x.chunk(2), y.chunk(2)
                with wrapped.no_sync():
                    (loss_fn(wrapped, x0, y0) / 2).backward()
                (loss_fn(wrapped, x1, y1) / 2).backward()
            else:
                with autocast():
                    loss = loss_fn(wrapped, x, y)
                loss.backward()
            call(adapters, after_backward, wrapped, optimizer)
            optimizer.step()
            reference_optimizer.zero_grad()
            with autocast():
                reference_loss = loss_fn(reference, inputs, targets)
            reference_loss.backward()
            reference_optimizer.step()
    except NotProvided as reason:
        return _not_provided(reason)
    return {"status": "measured", "error": _params_error(module, reference)}


def _cast_step(reference: nn.Module, optimizer, dtype: torch.dtype, inputs, targets) -> None:
    """One step of the single-process reference for compute in ``dtype`` with master weights
    in float32: forward and backward on a copy cast to ``dtype``, gradients back in float32."""
    low = copy.deepcopy(reference).to(dtype)
    loss_fn(low, inputs, targets).backward()
    for master, cast in zip(reference.parameters(), low.parameters(), strict=True):
        master.grad = cast.grad.float()
    optimizer.step()


def fsdp_rank(spec: str, mode: str, steps: int = 3, batch_size: int = 8, seq_len: int = 8) -> dict:
    """``mode``: "fp32", "fp16 compute" (``compute_dtype=torch.float16``), "accumulation" (two
    micro-batches per step) or "gradients" (after one backward with fp16 compute, every
    gradient is float32, the master weights' dtype, and shaped like its parameter). Every rank
    builds the same model, as the course's test does: its FSDP need not broadcast."""
    adapters = load_adapters(spec)
    torch.manual_seed(0)
    module = SmallLM()
    reference = copy.deepcopy(module)
    names = [name for name, _ in reference.named_parameters()]
    dtype = torch.float16 if mode in ("fp16 compute", "gradients") else None
    try:
        wrapped = call(adapters, "get_fsdp", module, compute_dtype=dtype)
        optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.01)
        reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.01)
        for step in range(steps):
            inputs, targets = global_batch(reference, batch_size, seq_len, step)
            optimizer.zero_grad(set_to_none=True)
            x, y = local_slice(inputs), local_slice(targets)
            if mode == "accumulation":
                for x_half, y_half in zip(x.chunk(2), y.chunk(2), strict=True):
                    (loss_fn(wrapped, x_half, y_half) / 2).backward()
            else:
                loss_fn(wrapped, x, y).backward()
            call(adapters, "fsdp_on_after_backward", wrapped, optimizer)
            if mode == "gradients":
                wrong = [
                    n
                    for n, p in wrapped.named_parameters()
                    if p.requires_grad
                    and (p.grad is None or p.grad.dtype != torch.float32 or p.grad.shape != p.shape)
                ]
                count = _worst_over_ranks(float(len(wrong)))
                return {"status": "measured", "error": count, "detail": ", ".join(wrong[:3])}
            optimizer.step()
            reference_optimizer.zero_grad(set_to_none=True)
            if dtype is None:
                loss_fn(reference, inputs, targets).backward()
                reference_optimizer.step()
            else:
                _cast_step(reference, reference_optimizer, dtype, inputs, targets)
        full = call(adapters, "fsdp_gather_full_params", wrapped)
    except NotProvided as reason:
        return _not_provided(reason)
    missing = [n for n in names if n not in full]
    if missing:
        return {
            "status": "measured",
            "error": float("inf"),
            "detail": f"fsdp_gather_full_params lacks {', '.join(missing[:3])}",
        }
    error = max_difference([full[n] for n in names], [p for _, p in reference.named_parameters()])
    return {"status": "measured", "error": _worst_over_ranks(error)}


def sharded_optimizer_rank(spec: str, mode: str, steps: int = 5) -> dict:
    """AdamW sharded against AdamW whole, on the same full batches; ``mode`` "round trip"
    rebuilds the sharded optimizer from its ``state_dict`` after ``steps - 2`` steps."""
    adapters = load_adapters(spec)
    kwargs = {"lr": 0.01, "weight_decay": 0.1, "betas": (0.9, 0.999), "eps": 1e-8}
    model = toy_model("toy", seed=0)
    reference = toy_model("toy", seed=0)
    try:
        optimizer = call(
            adapters, "get_sharded_optimizer", model.parameters(), torch.optim.AdamW, **kwargs
        )
    except NotProvided as reason:
        return _not_provided(reason)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), **kwargs)
    detail = ""
    for step in range(steps):
        if mode == "round trip" and step == steps - 2:
            saved = copy.deepcopy(optimizer.state_dict())
            if not saved.get("state"):
                detail = (
                    "state_dict() holds no optimizer state: a checkpoint would lose "
                    "AdamW's moments (an inner optimizer's state is not in it)"
                )
            optimizer = call(
                adapters, "get_sharded_optimizer", model.parameters(), torch.optim.AdamW, **kwargs
            )
            optimizer.load_state_dict(saved)
        inputs, targets = global_batch(reference, 8, 16, step)
        for m, opt in ((model, optimizer), (reference, reference_optimizer)):
            opt.zero_grad()
            loss_fn(m, inputs, targets).backward()
            opt.step()
    return {"status": "measured", "error": _params_error(model, reference), "detail": detail}


#: The rank functions a battery launch runs, by name (the launch pickles names, not functions).
RANK_FUNCTIONS = {"ddp": ddp_rank, "fsdp": fsdp_rank, "optimizer": sharded_optimizer_rank}


#: How ``battery_rank`` names the check that raised, for the caller to find in the rank's
#: traceback: "perflab check 3 raised: ValueError: ...".
FAILED_CHECK = "perflab check {index} raised: "


def battery_rank(spec: str, checks: list[tuple[str, tuple]]) -> list[dict]:
    """Every check of one world size in one launch: ``checks`` lists (rank function name,
    its arguments after ``spec``), run in turn. Each check ends in an all-reduce (its error
    taken over the ranks), so the ranks stay in step; an exception ends the launch, naming the
    check that raised (``FAILED_CHECK``), so the caller runs only the others again."""
    results = []
    for index, (name, args) in enumerate(checks):
        try:
            results.append(RANK_FUNCTIONS[name](spec, *args))
        except Exception as error:
            first = (str(error).splitlines() or [""])[0]
            raise RuntimeError(
                FAILED_CHECK.format(index=index) + f"{type(error).__name__}: {first}"
            ) from error
    return results
