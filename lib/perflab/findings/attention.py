"""What notebooks 05 and 06's attention measurements say: naive against compiled attention over
the grid, what ran out of memory against the formula, the compiled model's matmul shapes, each
implementation against naive attention and SDPA, and the memory at a long context, as frames
and findings computed from the numbers (``tests/test_attention_findings.py``)."""

from __future__ import annotations

import pandas as pd
import torch

from perflab.bench.attention_timing import compare_attention, naive_memory_bytes, ratios_to
from perflab.measure.comparison import Comparison, comparison_frame
from perflab.measure.conclusions import Finding
from perflab.measure.device import parse_dtype
from perflab.measure.paths import results_elsewhere
from perflab.measure.stats import apart

GiB = 2**30


def oom_lines(
    results: pd.DataFrame, batch: int, memory_gib: float, device_memory_bytes: int | None = None
) -> list[str]:
    """The smallest size that ran out of memory (``measure_attention``'s "oom" rows) beside
    the formula's peak, and whether the full grid's largest size (n 16384, d 128) fits a GPU
    of ``memory_gib``."""
    failed = results[results["status"] == "oom"]
    if len(failed):
        smallest = failed.sort_values(["seq_len", "head_dim"]).iloc[0]
        need = naive_memory_bytes(
            batch, int(smallest.seq_len), int(smallest.head_dim), torch.float32
        )
        first = (
            f"smallest failing size: seq {smallest.seq_len}, d {smallest.head_dim} "
            f"({smallest.implementation}): forward peak by the formula "
            f"{need['forward_peak'] / GiB:.1f} GiB, held for backward "
            f"{need['held_for_backward'] / GiB:.1f} GiB"
            + (
                f", against {device_memory_bytes / GiB:.1f} GiB on the device"
                if device_memory_bytes
                else ""
            )
        )
    else:
        first = "no configuration ran out of memory on this device at these sizes"
    full = naive_memory_bytes(batch, 16384, 128, torch.float32)["forward_peak"]
    fits = full <= memory_gib * GiB
    needs, has = apart(full / GiB, memory_gib, 1)  # printed on their own sides of each other
    return [
        first,
        f"by the formula, the full grid's largest size (batch {batch}, n 16384, d 128, float32) "
        f"needs {needs} GiB at the forward peak: "
        + (f"it fits a {has} GiB GPU" if fits else f"more than a {has} GiB GPU has"),
    ]


def compiled_against_naive(
    batch: int, head_dims, seq_lens, device, *, rounds: int, warmup: int
) -> list[Comparison]:
    """At every point of the grid, compiled naive attention against naive, forward + backward
    taking turns (``compare_attention``), labelled by head dimension and length."""
    return [
        compare_attention(
            "naive",
            "naive_compiled",
            batch=batch,
            seq_len=n,
            head_dim=d,
            device=device,
            rounds=rounds,
            warmup=warmup,
        ).with_labels(head_dim=d, seq_len=n)
        for d in head_dims
        for n in seq_lens
    ]


def compiled_grid(comparisons: list[Comparison], results: pd.DataFrame) -> pd.DataFrame:
    """``comparison_frame`` of ``compiled_against_naive`` with each point's peak-memory ratio
    from the sweep's rows (compiled over naive)."""
    grid = comparison_frame(comparisons)
    memory = ratios_to(results, "naive", "peak_bytes")["naive_compiled_over_naive"]
    return grid.join(memory.rename("peak_memory_ratio"), on=["head_dim", "seq_len"])


def grid_findings(grid: pd.DataFrame, comparisons: list[Comparison]) -> tuple[str, Finding]:
    """The verdicts over the grid in counts, and the finding at its largest point (with its
    peak-memory ratio)."""
    counts = grid["verdict"].value_counts()
    largest, comparison = grid.iloc[-1], comparisons[-1]
    tally = (
        f"compiled attention over {len(grid)} grid points: {counts.get('faster', 0)} faster, "
        f"{counts.get('same', 0)} the same within the noise band, {counts.get('slower', 0)} "
        f"slower, {counts.get('inconclusive', 0)} inconclusive"
    )
    finding = Finding(
        "compiled attention at the largest size",
        f"{comparison.sentence()} at d {largest.head_dim}, n {largest.seq_len}; peak memory "
        f"{largest.peak_memory_ratio:.2f}x of naive",
        comparison,
    )
    return tally, finding


def yours_against_naive(
    names, head_dim: int, seq_len: int, batch: int, device, *, rounds: int, warmup: int
) -> list[Finding]:
    """Each of your attention implementations against naive and compiled attention at one
    size, taking turns."""
    findings = []
    for name in names:
        for base in ("naive", "naive_compiled"):
            versus = compare_attention(
                base,
                name,
                batch=batch,
                seq_len=seq_len,
                head_dim=head_dim,
                device=device,
                rounds=rounds,
                warmup=warmup,
            )
            findings.append(
                Finding(
                    f"{name} vs {base}", f"{versus.sentence()} at d {head_dim}, n {seq_len}", versus
                )
            )
    return findings


def matmul_shapes_line(model: pd.DataFrame) -> str:
    """How many distinct matmul shapes the compiled train step runs (``compile_vs_eager``)."""
    return (
        f"the train step runs {model['matmul_shapes'].iloc[-1]} distinct matmul shapes: what "
        "max-autotune tunes, each once, at compile time"
    )


# Notebook 06


def against_naive(
    contenders,
    longest: pd.Series,
    batch: int,
    head_dim: int,
    device,
    dtype: str,
    *,
    rounds: int,
    warmup: int,
) -> tuple[pd.DataFrame, list[Finding]]:
    """Each contender against naive attention, causal forward + backward taking turns, at the
    longest length both ran in the sweep (``longest``: the longest length per implementation);
    one row each (``comparison_frame``) and their findings."""
    compared, findings = [], []
    for name in contenders:
        if name not in longest or "naive" not in longest:  # no row of it ran in the sweep
            findings.append(Finding(f"{name} vs naive", f"{name}: not compared (no sweep row ran)"))
            continue
        seq_len = int(min(longest["naive"], longest[name]))
        result = compare_attention(
            "naive",
            name,
            batch=batch,
            seq_len=seq_len,
            head_dim=head_dim,
            device=device,
            dtype=parse_dtype(dtype),
            causal=True,
            rounds=rounds,
            warmup=warmup,
        )
        compared.append(result.with_labels(seq_len=seq_len, dtype=dtype))
        findings.append(
            Finding(
                f"{name} vs naive",
                f"{result.sentence()} (b={batch}, n={seq_len}, d={head_dim}, {dtype}, causal)",
                result,
            )
        )
    return comparison_frame(compared), findings


def against_sdpa_findings(against_sdpa: list[Comparison]) -> list[Finding]:
    """``flash_speed``'s comparisons against SDPA, one finding per heads and length; each
    sentence names its case, as the key does (a notebook prints the sentences alone)."""
    findings = []
    for result in against_sdpa:
        heads, seq_len = result.labels["heads"], result.labels["seq_len"]
        case = f"{heads} head{'' if heads == 1 else 's'}, n={seq_len}"
        findings.append(
            Finding(
                f"{result.name_b} vs sdpa, {heads} heads, n={seq_len}",
                f"{result.sentence()} at {case}",
                result,
            )
        )
    return findings


def memory_line(memory: pd.DataFrame, batch: int, seq_len: int, head_dim: int, dtype: str) -> str:
    """The tiled implementation's peak against naive attention's at a long context
    (``attention_peak_memory`` rows), beside the score matrix's own size."""
    peaks = memory.set_index("implementation")["peak_bytes"]
    flash = "flash_triton" if "flash_triton" in peaks else "flash_torch"
    scores = batch * seq_len**2 * parse_dtype(dtype).itemsize / 2**20
    return (
        f"b={batch}, n={seq_len}, d={head_dim}, {dtype}: {flash} peak / naive peak = "
        f"{peaks[flash] / peaks['naive']:.3f}; the (b x n x n) scores alone take {scores:.0f} MiB"
    )


def smoke_comparisons_elsewhere(device: torch.device | str) -> list[str]:
    """The GPU smoke command's Triton FlashAttention against SDPA (``smoke_flash_vs_sdpa.csv``,
    interleaved where it ran, with its verdict) on every other device whose rows are committed:
    per device where the rows come from, then each comparison's sentence at its heads and
    length."""
    lines = []
    found = results_elsewhere("06_flash_attention", "smoke_flash_vs_sdpa.csv", device)
    for slug, rows in found.items():
        lines.append(f"{slug}: {rows.attrs['source']}")
        lines += [f"{r.heads} heads, {r.seq_len} tokens: {r.sentence}" for r in rows.itertuples()]
    return lines
