"""Every Triton kernel of the workbook compiled ahead of time for sm_80, sm_90 and sm_100 on
this CPU machine (Triton's CUDA backend and the ptxas in its wheel; no GPU), since the
interpreter that runs them in the other tests does not type-check what the compiler rejects.

Covered: every kernel, every configuration ``flash_configs`` keeps, causal and not, float16
and bfloat16 at head dimension 128 (the most registers and shared memory) on all three targets,
each of which must compile without spilling and within shared memory (the rule of
``flash_configs``); float32 at head dimension 128 on all three targets too (causal), where
only the kernels ``flash_configs.SPILLING`` names may spill; on sm_90 the smaller head
dimensions in float16. Compiles run in child processes without the interpreter; Triton's cache
makes a second run fast.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perflab.measure.device import triton_available  # noqa: E402

if not triton_available():
    pytest.skip("Triton is not installed (Linux-only): nothing to compile", allow_module_level=True)

from perflab.implementations.attention.flash_configs import KERNELS as FLASH_KERNELS
from perflab.implementations.attention.flash_configs import SPILLING, kept_configs
from perflab.measure.triton_compile import TARGETS, get_target, kernel_source
from perflab.tools.kernels import KERNEL_NAMES, KERNELS, compile_table, jobs, summary

LIB = Path(__file__).resolve().parents[1] / "lib" / "perflab"


@pytest.fixture(scope="module")
def table():
    job_list = (
        jobs(targets=TARGETS, dtypes=("fp16", "bf16"), head_dims=(128,))
        + jobs(
            kernels=FLASH_KERNELS,
            targets=TARGETS,
            dtypes=("fp32",),
            head_dims=(128,),
            causal=(True,),
        )
        + jobs(
            kernels=FLASH_KERNELS,
            targets=("sm_90",),
            dtypes=("fp16",),
            head_dims=(16, 32, 64),
            causal=(True,),
        )
    )
    return compile_table(job_list)


def test_every_triton_kernel_of_the_library_is_in_the_catalogue():
    """A new ``@triton.jit`` kernel (a function named ``*_kernel``) anywhere in perflab must be
    added to ``kernels.KERNELS``, or it would reach a GPU uncompiled."""
    found = set()
    for path in LIB.rglob("*.py"):
        module = ".".join(path.relative_to(LIB.parent).with_suffix("").parts)
        for name in re.findall(
            r"@triton\.jit(?:\([^)]*\))?\s*\ndef (\w+_kernel)\(", path.read_text()
        ):
            found.add((module, name))
    catalogued = {(spec.module, spec.attr) for spec in KERNELS}
    assert found, "no Triton kernels found: the scan is broken"
    assert found == catalogued


def test_every_kernel_compiles_for_every_target_config_and_dtype(table):
    failed = table[table["status"] != "ok"]
    assert failed.empty, failed[["kernel", "target", "dtype", "causal", "error"]].to_string()
    flash = table[table["kernel"].isin(FLASH_KERNELS)]
    half = flash[flash["dtype"].isin(["fp16", "bf16"]) & (flash["head_dim"] == 128)]
    per_case = half.groupby(["kernel", "target", "dtype", "causal"]).size()
    assert len(per_case) == 3 * len(TARGETS) * 2 * 2
    for (kernel, *_), count in per_case.items():
        assert count == len(kept_configs(kernel, 128, 2))
    assert set(table["target"]) == set(TARGETS)
    assert set(table["kernel"]) == set(KERNEL_NAMES)
    assert set(flash["causal"]) == {True, False}


def test_compiled_metadata_is_read(table):
    ok = table[table["status"] == "ok"]
    assert (ok["registers"] > 0).all() and (ok["registers"] <= 255).all()
    assert (ok["shared_bytes"] > 0).all()  # every kernel stages tiles or reduces in shared
    # Two readings that must agree: the SASS's spill stores (STL) go to local memory, the
    # stack frame cuobjdump reports; no spill, no stack (no kernel here keeps a local array).
    spills = ok["spill_stores"] > 0
    assert spills.any() and (spills == (ok["stack_bytes"] > 0)).all()
    # A flash kernel keeps K and V tiles in shared memory: more for larger tiles and stages.
    fwd = ok.query(
        "kernel == 'flash_forward' and target == 'sm_90' and dtype == 'fp16' "
        "and head_dim == 128 and causal == False"
    )
    small = fwd[(fwd["block_k"] == 64) & (fwd["block_q"] == 32)]
    large = fwd[(fwd["block_k"] == 64) & (fwd["block_q"] == 128)]
    assert small["shared_bytes"].iloc[0] < large["shared_bytes"].iloc[0]
    rows = summary(table)
    assert len(rows) == len(KERNEL_NAMES) * len(TARGETS)
    assert (rows["failed"] == 0).all()


def test_float32_spills_only_where_no_configuration_fits(table):
    """float32 at head dimension 128 on every target: within shared memory everywhere, and no
    spill but in the kernels ``SPILLING`` names (their least-spilling configuration)."""
    fp32 = table[table["kernel"].isin(FLASH_KERNELS) & (table["dtype"] == "fp32")]
    assert set(fp32["target"]) == set(TARGETS) and (fp32["status"] == "ok").all()
    assert (fp32["shared_bytes"] <= fp32["max_shared_bytes"]).all()
    spilled = set(fp32.loc[fp32["spill_stores"] > 0, "kernel"])
    assert spilled <= {kernel for kernel, head_dim in SPILLING[4] if head_dim == 128}
    assert fp32[fp32["kernel"] == "flash_backward_q"]["spill_stores"].eq(0).all()


#: Strides that multiply a program-dependent index which can pass 2^31 elements: the batch
#: element's offset in the flash kernels, the row offset in the weighted sum.
WIDE_STRIDES = {
    "flash_forward": "stride_kb stride_lb stride_ob stride_qb stride_vb",
    "flash_forward_plain": "stride_kb stride_lb stride_ob stride_qb stride_vb",
    "flash_backward_preprocess": "stride_lb stride_ob",
    "flash_backward_kv": "stride_kb stride_lb stride_qb stride_vb",
    "flash_backward_q": "stride_kb stride_lb stride_qb stride_vb",
    "weighted_sum_forward": "stride_x",
    "weighted_sum_backward": "stride_dx stride_x",
}


def test_large_offsets_are_computed_in_64_bits(table):
    """``b * stride_qb`` in 32 bits wraps past 2^31 elements (batch x heads x n x d); the
    compiled IR must widen every such stride to i64. (The interpreter computes in 64 bits
    either way, so only the compiled kernels can show this.)"""
    ok = table[table["status"] == "ok"]
    for kernel, rows in ok.groupby("kernel"):
        assert set(rows["int64_strides"]) == {WIDE_STRIDES[kernel]}, kernel


def test_every_kept_configuration_spills_nothing_and_fits_every_target(table):
    """The rule of ``flash_configs``, held to the kernels as they are now: at head dimension
    128 (the most registers and shared memory), float16 and bfloat16, causal and not, every
    kept configuration of every FlashAttention kernel compiles for sm_80, sm_90 and sm_100
    without a spill and within the target's shared memory; each main loop's SASS counted."""
    flash = table[table["kernel"].isin(FLASH_KERNELS) & table["dtype"].isin(["fp16", "bf16"])]
    rows = summary(flash[flash["head_dim"] == 128])
    assert len(rows) == len(FLASH_KERNELS) * len(TARGETS)
    assert (rows[["failed", "compiles_spilling", "compiles_over_shared_limit"]] == 0).all().all()
    assert (rows["main_loop_min"] > 0).all()
    # The unmasked stage is the smallest loop: a forward has two (unmasked, then masked).
    forward = flash[(flash["kernel"] == "flash_forward") & (flash["head_dim"] == 128)]
    assert forward["loop_instructions"].str.split().map(len).eq(2).all()


def test_the_pruner_keeps_exactly_what_fits_a_smaller_gpu():
    """On a GPU whose architecture the table was not compiled for (99 KiB of shared memory,
    as sm_86), the autotuner's prune step compiles the kept configurations for it and keeps
    exactly those within its shared memory (``configs_that_fit``, run here for a named
    target with a fake launch's arguments)."""
    script = textwrap.dedent("""
        import json, torch
        # flash_triton imported: its autotuners built, as on a GPU
        from perflab.implementations.attention import flash_triton
        from perflab.implementations.attention import flash_tuning as ft
        from perflab.implementations.attention.flash_backward import _flash_backward_q_kernel
        from perflab.implementations.attention.flash_configs import autotune_configs, configs_for
        from perflab.measure.triton_compile import Target, compile_kernel
        q = torch.empty(2, 256, 128, dtype=torch.float16)
        lse = torch.empty(2, 256)
        args = dict(Q=q, K=q, V=q, DO=q, L=lse, DELTA=lse, DQ=q, stride_qb=256 * 128,
                    stride_qn=128, stride_kb=256 * 128, stride_kn=128, stride_vb=256 * 128,
                    stride_vn=128, stride_lb=256, N_Q=256, N_K=256, scale=128 ** -0.5,
                    BATCH_BUCKET=2)
        constexprs = dict(D=128, IS_CAUSAL=True, PRECISION="tf32", EVEN_Q=False, EVEN_K=False)
        target = Target("sm_86", 86, "RTX 3090", 99 * 1024)
        configs = configs_for("flash_backward_q", 128, 2, autotune_configs("flash_backward_q"))
        kept = ft.configs_that_fit(_flash_backward_q_kernel, configs, args, constexprs, target)
        types, divisible = ft.argument_types(args)
        shared = [compile_kernel(_flash_backward_q_kernel, types, {**constexprs, **c.kwargs},
                                 num_warps=c.num_warps, num_stages=c.num_stages, target=target,
                                 divisible=divisible).metadata.shared for c in configs]
        assert flash_triton._forward.early_config_prune is not None  # an Autotuner with its pruner
        print(json.dumps({"configs": len(configs), "kept": [str(c) for c in kept],
                          "fit": [str(c) for c, b in zip(configs, shared) if b <= 99 * 1024]}))
    """)
    env = {"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    ).stdout
    found = json.loads(out.strip().splitlines()[-1])
    assert found["kept"] == found["fit"]
    assert 0 < len(found["kept"]) < found["configs"]  # some need more than 99 KiB


def test_the_disassembly_is_kept_by_the_cubins_hash_and_read_back(tmp_path, monkeypatch):
    """``disassembly`` keeps cuobjdump's output beside Triton's cache, one entry per cubin (two
    targets, two entries): a second compile reads it back (here a planted register count shows
    it was read, not made again, and for that cubin only); a cut-short or damaged entry is made
    again from the cubin, and a cache that cannot be written costs only the disassembly."""
    import gzip

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    job = jobs(kernels=["weighted_sum_backward"], targets=("sm_80", "sm_90"), dtypes=("fp16",))
    first = compile_table(job).set_index("target")
    assert (first.status == "ok").all(), first.error
    assert (first.registers != 7).all()  # the planted count below is no real one
    entries = {}
    for path in (tmp_path / "perflab-sass").glob("*.json.gz"):
        usage, sass = json.loads(gzip.decompress(path.read_bytes()))
        (target,) = re.findall(r"code for (sm_\d+)", sass)
        entries[target.removesuffix("a")] = path, usage, sass
    assert sorted(entries) == ["sm_80", "sm_90"]
    for target, (_, usage, _) in entries.items():
        row = first.loc[target]
        assert f"REG:{row.registers} STACK:{row.stack_bytes}" in usage
    entry, usage, sass = entries["sm_90"]
    planted = re.sub(r"REG:\d+", "REG:7", usage)
    entry.write_bytes(gzip.compress(json.dumps([planted, sass]).encode()))
    again = compile_table(job).set_index("target").registers
    assert again["sm_90"] == 7 and again["sm_80"] == first.registers["sm_80"]
    whole = entry.read_bytes()
    for damaged in (whole[:20], whole[:30] + bytes([whole[30] ^ 0xFF]) + whole[31:]):
        entry.write_bytes(damaged)  # a write cut short, a flipped byte
        assert compile_table(job).set_index("target").registers.equals(first.registers)
        assert json.loads(gzip.decompress(entry.read_bytes()))[0] == usage
    for path, *_ in entries.values():
        path.unlink()
    entry.parent.rmdir()
    entry.parent.write_text("")  # a file where the cache's folder would be: nothing written
    assert compile_table(job).set_index("target").registers.equals(first.registers)


def test_bad_names_get_one_clear_error():
    with pytest.raises(ValueError, match="valid: sm_80, sm_90, sm_100"):
        get_target("sm_75")
    with pytest.raises(ValueError, match="unknown kernel 'flash'; valid: flash_forward"):
        jobs(kernels=["flash"])
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        jobs(dtypes=["fp8"])


def test_kernel_source_is_the_kernels_own_code():
    from perflab.implementations.attention.flash_forward import (
        _flash_forward_kernel,
        _forward_stage,
    )
    from perflab.implementations.attention.weighted_sum import _weighted_sum_forward_kernel

    source = kernel_source(_flash_forward_kernel)
    assert source.startswith(
        '@triton.jit(do_not_specialize=["BATCH_BUCKET"])\ndef _flash_forward_kernel('
    )
    assert "_forward_stage(" in source  # the kernel runs its loop twice: unmasked, then masked
    assert "tl.dot" in kernel_source(_forward_stage)
    assert "def _weighted_sum_forward_kernel(" in kernel_source(_weighted_sum_forward_kernel)
    with pytest.raises(ValueError, match="not a Triton kernel or a function"):
        kernel_source(3)


def test_the_structure_costs_what_the_instruction_counts_say():
    """The plain one-loop forward against the lean two-stage one, compiled alike for sm_90:
    the lean one's unmasked loop issues fewer instructions per tile than the plain loop, its
    masked stage more than its unmasked one; the sentence reads the table."""
    from perflab.tools.kernels import structure_cost, structure_findings

    table = structure_cost(("sm_90",))
    by = table.set_index("kernel")
    plain, lean = (
        by.loc[k, "main_loop_instructions"] for k in ("flash_forward_plain", "flash_forward")
    )
    assert lean < plain
    unmasked, masked = map(int, by.loc["flash_forward", "loop_instructions"].split())
    assert unmasked == lean < masked
    (sentence,) = structure_findings(table)
    assert f"issues {plain:.0f} SASS" in sentence and f"unmasked loop {lean:.0f}" in sentence


def _running_in_group(group: int) -> list[int]:
    """The processes of process group ``group`` that still run (zombies have ended)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(pgrp) == group and state != "Z":
            found.append(int(stat.parent.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_an_interrupted_table_leaves_no_compiler_running(monkeypatch):
    """``compile_table``'s child compiles in a group of its own (``own_group``): an interrupt
    while its rows come in (Ctrl-C, Jupyter's) kills it and every worker it forked."""
    import contextlib
    import time

    import perflab.measure.progress as progress_module
    import perflab.tools.kernels as kernels
    from perflab.measure.processes import alive

    started, running_at_interrupt = [], []
    real_own_group = kernels.own_group

    @contextlib.contextmanager
    def spy(*args, **kwargs):
        with real_own_group(*args, **kwargs) as child:
            started.append(child.pid)
            yield child

    class InterruptedBar:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self):
            running_at_interrupt.append(_running_in_group(started[0]))
            raise KeyboardInterrupt

    monkeypatch.setattr(kernels, "own_group", spy)
    monkeypatch.setattr(progress_module, "progress", lambda **kwargs: InterruptedBar())
    job_list = jobs(kernels=FLASH_KERNELS, targets=("sm_90",), dtypes=("fp16",), head_dims=(64,))
    with pytest.raises(KeyboardInterrupt):
        compile_table(job_list, workers=2)
    (child,) = started
    assert child in running_at_interrupt[0]  # still compiling when interrupted
    deadline = time.monotonic() + 5
    while _running_in_group(child) and time.monotonic() < deadline:  # SIGKILL lands at once
        time.sleep(0.05)
    left = _running_in_group(child)
    if left:  # leave no compiler behind, even when failing
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)
    assert not alive(child) and not left
