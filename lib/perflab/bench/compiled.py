"""The whole model compiled with torch.compile against eager (notebook 05).

The first call of a compiled model traces and compiles it; that time is reported apart
(compile_s = first call - steady median), and the steady state of the two is compared
interleaved (``perflab.bench.compare``), the compiled step against the eager one.
Inductor's on-disk caches are switched off for the measurement and dynamo is reset before
each compiled model, so compile_s is a cold compilation, not a cache load.
"""

from __future__ import annotations

import contextlib
import time

import pandas as pd
import torch

from perflab.bench.comparison import compare
from perflab.bench.steps import make_step, random_batch
from perflab.device import synchronize
from perflab.model import TransformerLM, get_preset, sized_for


def _no_compile_caches() -> contextlib.ExitStack:
    """Inductor's FX graph cache and AOTAutograd's cache off, so compilation happens for real."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    stack = contextlib.ExitStack()
    stack.enter_context(inductor_config.patch(fx_graph_cache=False))
    stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
    return stack


def compile_vs_eager(preset: str, context_length: int, batch_size: int,
                     device: torch.device, modes=("forward", "train-step"),
                     steps: int = 5) -> pd.DataFrame:  # fmt: skip
    """Per mode: the compiled step against the eager one (``Comparison.as_row``: medians,
    time ratio compiled / eager with its interval and confidence, verdict), the compiled
    model's first call and its compile seconds (first call - steady median)."""
    config = sized_for(get_preset(preset), context_length)
    inputs, targets = random_batch(config.vocab_size, batch_size, context_length, device)
    rows = []
    for mode in modes:
        torch._dynamo.reset()
        steps_by_kind = {}
        for compiled in (False, True):
            torch.manual_seed(0)
            with torch.device(device):
                model = TransformerLM(config)
            runner = torch.compile(model) if compiled else model
            optimizer = torch.optim.AdamW(model.parameters()) if mode == "train-step" else None
            steps_by_kind[compiled] = make_step(runner, inputs, targets, mode, torch.float32,
                                                optimizer)  # fmt: skip
        synchronize(device)
        start = time.perf_counter()
        with _no_compile_caches():
            steps_by_kind[True]()
        synchronize(device)
        first = time.perf_counter() - start
        result = compare(steps_by_kind[False], steps_by_kind[True], rounds=steps, warmup=1,
                         device=device, names=("eager", "compiled"))  # fmt: skip
        row = result.as_row()
        rows.append({"mode": mode, **row, "first_call_s": first,
                     "compile_s": max(first - row["median_b_s"], 0.0)})  # fmt: skip
    return pd.DataFrame(rows)
