"""The whole model compiled with torch.compile against eager (notebook 05).

The first call of a compiled model traces and compiles it; that time is reported apart
(compile_s = first call - steady median), and the steady state is timed with the one timer.
Inductor's on-disk caches are switched off for the measurement and dynamo is reset before
each compiled model, so compile_s is a cold compilation, not a cache load.
"""

from __future__ import annotations

import contextlib
import time

import pandas as pd
import torch

from perflab.bench.steps import make_step, random_batch
from perflab.bench.timer import time_fn
from perflab.device import resolve_device, synchronize
from perflab.model import TransformerLM, get_preset


def _no_compile_caches() -> contextlib.ExitStack:
    """Inductor's FX graph cache and AOTAutograd's cache off, so compilation happens for real."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    stack = contextlib.ExitStack()
    stack.enter_context(inductor_config.patch(fx_graph_cache=False))
    stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
    return stack


def compile_vs_eager(preset: str, context_length: int, batch_size: int,
                     device: str | torch.device = "auto", modes=("forward", "train-step"),
                     steps: int = 5) -> pd.DataFrame:  # fmt: skip
    """Per mode, eager and compiled: median step seconds and (compiled) compile seconds."""
    device = resolve_device(device)
    config = get_preset(preset)
    inputs, targets = random_batch(config.vocab_size, batch_size, context_length, device)
    rows = []
    for mode in modes:
        for compiled in (False, True):
            torch.manual_seed(0)
            with torch.device(device):
                model = TransformerLM(config)
            torch._dynamo.reset()
            runner = torch.compile(model) if compiled else model
            optimizer = torch.optim.AdamW(model.parameters()) if mode == "train-step" else None
            step = make_step(runner, inputs, targets, mode, torch.float32, optimizer)
            synchronize(device)
            start = time.perf_counter()
            with _no_compile_caches():
                step()
            synchronize(device)
            first = time.perf_counter() - start
            timing = time_fn(step, warmup=1, steps=steps, device=device)
            compile_s = max(first - timing.median, 0.0) if compiled else 0.0
            rows.append({"mode": mode, "compiled": compiled, "median_s": timing.median,
                         "first_call_s": first, "compile_s": compile_s})  # fmt: skip
    frame = pd.DataFrame(rows)
    eager = frame[~frame["compiled"]].set_index("mode")["median_s"]
    frame["speedup_vs_eager"] = frame["mode"].map(eager) / frame["median_s"]
    return frame
