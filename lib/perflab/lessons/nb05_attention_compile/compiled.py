"""The whole model compiled with torch.compile against eager (notebook 05).

The first call of a compiled model traces and compiles it; that time is reported apart
(compile_s = first call - steady median), and the steady state of the two is compared
interleaved (``perflab.bench.compare``), the compiled step against the eager one.
Inductor's on-disk caches are switched off (its compiled kernels go to a fresh empty
directory) for the first call and dynamo is reset before each compiled model, so compile_s is
a cold compilation, not a cache load.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import warnings

import numpy as np
import torch

from perflab.bench.steps import make_step, random_batch
from perflab.implementations.model import build_model, get_preset, sized_for
from perflab.measure.comparison import Comparison, compare
from perflab.measure.conclusions import Finding
from perflab.measure.device import synchronize


def _no_compile_caches() -> contextlib.ExitStack:
    """Inductor's FX graph cache and AOTAutograd's cache off, and its kernel cache in a fresh
    empty directory (kernels compiled earlier, by this process or another run, would otherwise
    be loaded from disk), so compilation happens for real; max-autotune's per-matmul timing
    tables, written to stderr, are not printed, nor inductor's own warning that its template
    selection calls the deprecated ``TypedStorage`` (nothing the caller can act on)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    stack = contextlib.ExitStack()
    stack.enter_context(temporary_cache_dir(stack.enter_context(tempfile.TemporaryDirectory())))
    stack.enter_context(
        inductor_config.patch(
            fx_graph_cache=False,
            autotune_num_choices_displayed=0,
            max_autotune_report_choices_stats=False,
        )
    )
    stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
    stack.enter_context(warnings.catch_warnings())
    warnings.filterwarnings("ignore", message="TypedStorage is deprecated", category=UserWarning)
    return stack


#: torch.compile's modes that the workbook compares (``torch.compile(mode=...)``): "default"
#: and "max-autotune-no-cudagraphs", which also benchmarks matmul and convolution templates
#: (Triton on a GPU, C++ on a CPU) against the library kernels and keeps the fastest, without
#: CUDA graphs (the 100M profiling note's setting).
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")


def _check_compile_mode(mode: str) -> None:
    if mode not in COMPILE_MODES:
        raise ValueError(f"unknown compile mode {mode!r}; valid: {', '.join(COMPILE_MODES)}")


def _model_step(
    config, inputs, targets, step_mode: str, device: torch.device, compile_mode: str | None
):
    """A fresh model's step (``make_step``), compiled with ``compile_mode`` (None: eager)."""
    model = build_model(config, seed=0, device=device)
    runner = model if compile_mode is None else torch.compile(model, mode=compile_mode)
    optimizer = torch.optim.AdamW(model.parameters()) if step_mode == "train-step" else None
    return make_step(runner, inputs, targets, step_mode, torch.float32, optimizer)


def _first_call_s(step, device: torch.device) -> float:
    """Seconds of ``step``'s first call, compiled from cold (no on-disk caches)."""
    synchronize(device)
    start = time.perf_counter()
    with _no_compile_caches():
        step()
    synchronize(device)
    return time.perf_counter() - start


def compile_vs_eager(
    preset: str,
    context_length: int,
    batch_size: int,
    device: torch.device,
    modes=("forward", "train-step"),
    steps: int = 5,
    compile_modes=("default",),
) -> list[Comparison]:
    """Per step mode (``modes``, as ``make_step``) and per ``torch.compile`` mode
    (``compile_modes``, from ``COMPILE_MODES``): the compiled step against the eager one
    (``b`` names the compile mode, "compiled" for the default), labelled with the step mode
    (``comparison_frame`` makes them a table); the details hold the compiled model's first call
    from cold and its compile seconds (first call - steady median), and the distinct matmul
    shapes of the step (``matmul_shapes``: what max-autotune tunes). Every
    other compile mode is also compared with the default directly (``a`` "compiled"):
    max-autotune's gain, where there is one, is in the matmuls it tunes, its cost the tuning,
    paid at compile time."""
    for compile_mode in compile_modes:
        _check_compile_mode(compile_mode)
    config = sized_for(get_preset(preset), context_length)
    inputs, targets = random_batch(config.vocab_size, batch_size, context_length, device)
    # One throwaway compilation first: the compiler's one-time start-up (imports, the C++
    # toolchain's first use) would otherwise fall on the first model compiled.
    torch.compile(torch.sin)(torch.ones(2, device=device))
    rows = []
    for mode in modes:
        eager = _model_step(config, inputs, targets, mode, device, None)
        shapes = matmul_shapes(eager)
        compiled, first = {}, {}
        torch._dynamo.reset()  # once per step mode: a reset between compile modes would throw
        for compile_mode in compile_modes:  # away the default's graphs, compiled again unseen
            compiled[compile_mode] = _model_step(
                config, inputs, targets, mode, device, compile_mode
            )
            first[compile_mode] = _first_call_s(compiled[compile_mode], device)
        pairs = [(("eager", eager), (m, compiled[m])) for m in compile_modes]
        pairs += [
            (("default", compiled["default"]), (m, compiled[m]))
            for m in compile_modes
            if m != "default" and "default" in compiled
        ]
        for (name_a, step_a), (name_b, step_b) in pairs:
            result = compare(
                step_a,
                step_b,
                rounds=steps,
                warmup=1,
                device=device,
                names=tuple(_NAMES.get(n, n) for n in (name_a, name_b)),
            )
            rows.append(
                result.with_labels(mode=mode).with_details(
                    first_call_s=first[name_b],
                    compile_s=max(first[name_b] - result.median_b_s, 0.0),
                    matmul_shapes=shapes,
                )
            )
    return rows


def compile_findings(comparisons: list[Comparison]) -> list[Finding]:
    """One finding per comparison of ``compile_vs_eager``: its sentence, then what compilation
    costs: against eager, after how many steps a faster compiled step pays its compile time
    back (at the median ratio, and at the ends of its interval, eager's median the scale);
    against the default mode, the two modes' compile seconds (one compilation each)."""
    default_s = {
        (result.labels["mode"], result.name_b): result.details["compile_s"]
        for result in comparisons
        if result.name_a == "eager"
    }
    findings = []
    for result in comparisons:
        mode, compile_s = result.labels["mode"], result.details["compile_s"]
        if result.name_a == "eager":
            # a step saves eager's median x (1 - ratio); the ratio's interval bounds it
            eager = float(np.median(result.times_a))
            low, high = result.ci
            cost = (
                f"; the {compile_s:.1f} s of compilation (one compilation timed) pay back after "
                f"about {compile_s / (eager * (1 - result.ratio)):.0f} steps "
                f"({compile_s / (eager * (1 - low)):.0f}-{compile_s / (eager * (1 - high)):.0f} "
                "by the ratio's interval)"
                if result.verdict == "faster"
                else f"; {compile_s:.1f} s of compilation on the first call"
            )
            key = f"{result.name_b} model {mode}"
        else:
            cost = (
                f"; it compiles in {compile_s:.1f} s against "
                f"{default_s[(mode, 'compiled')]:.1f} s for the default mode (one compilation "
                "each)"
            )
            key = f"{result.name_b} against default {mode}"
        findings.append(Finding(key, f"{mode}: {result.sentence()}{cost}", result))
    return findings


_MATMULS = {"mm", "addmm", "bmm", "baddbmm"}


def matmul_shapes(step) -> int:
    """Distinct matrix multiplications (operator and input shapes) one call of ``step`` runs
    eagerly: what max-autotune benchmarks its templates for, each once, at compile time."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = set()

    class Shapes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in _MATMULS:
                seen.add((name, *(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))))
            return func(*args, **(kwargs or {}))

    with Shapes():
        step()
    return len(seen)


#: How the rows name a compile mode: the default one is "compiled".
_NAMES = {"default": "compiled"}
