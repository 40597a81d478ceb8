"""Every Triton kernel of the workbook compiled ahead of time for sm_80, sm_90 and sm_100 on
this CPU machine (Triton's CUDA backend and the ptxas in its wheel; no GPU), since the
interpreter that runs them in the other tests does not type-check what the compiler rejects.

Covered: every kernel, every autotune configuration, causal and not, float16 and bfloat16 at
head dimension 128 (the most registers and shared memory) on all three targets; on sm_90 also
float32 (at the smallest configuration: larger float32 tiles at d = 128 spill tens of thousands
of instructions and take ptxas seconds each, and the autotuner never picks them) and the
smaller head dimensions. Compiles run in child processes without the interpreter; Triton's
cache makes a second run fast.
"""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from perflab.device import triton_available  # noqa: E402

if not triton_available():
    pytest.skip("Triton is not installed (Linux-only): nothing to compile", allow_module_level=True)

from perflab.attention.aot import KERNEL_NAMES, KERNELS, compile_table, jobs, summary
from perflab.attention.flash_triton import AUTOTUNE_CONFIGS
from perflab.attention.triton_compile import TARGETS, get_target, kernel_source

SMALLEST = [min(AUTOTUNE_CONFIGS, key=lambda c: (c[0] * c[1], c[3]))]
LIB = Path(__file__).resolve().parents[1] / "lib" / "perflab"


@pytest.fixture(scope="module")
def table():
    job_list = (
        jobs(targets=TARGETS, dtypes=("fp16", "bf16"), head_dims=(128,))
        + jobs(targets=("sm_90",), dtypes=("fp32",), head_dims=(128,), configs=SMALLEST)
        + jobs(kernels=KERNEL_NAMES[:3], targets=("sm_90",), dtypes=("fp16",),
               head_dims=(16, 32, 64), configs=AUTOTUNE_CONFIGS[:1])
    )  # fmt: skip
    return compile_table(job_list)


def test_every_triton_kernel_of_the_library_is_in_the_catalogue():
    """A new ``@triton.jit`` kernel (a function named ``*_kernel``) anywhere in perflab must be
    added to ``aot.KERNELS``, or it would reach a GPU uncompiled."""
    found = set()
    for path in LIB.rglob("*.py"):
        module = ".".join(path.relative_to(LIB.parent).with_suffix("").parts)
        for name in re.findall(r"@triton\.jit\s*\ndef (\w+_kernel)\(", path.read_text()):
            found.add((module, name))
    catalogued = {(spec.module, spec.attr) for spec in KERNELS}
    assert found, "no Triton kernels found: the scan is broken"
    assert found == catalogued


def test_every_kernel_compiles_for_every_target_config_and_dtype(table):
    failed = table[table["status"] != "ok"]
    assert failed.empty, failed[["kernel", "target", "dtype", "causal", "error"]].to_string()
    flash = table[table["kernel"].str.startswith("flash")]
    half = flash[flash["dtype"].isin(["fp16", "bf16"]) & (flash["head_dim"] == 128)]
    per_case = half.groupby(["kernel", "target", "dtype", "causal"]).size()
    assert len(per_case) == 3 * len(TARGETS) * 2 * 2
    assert set(per_case) == {len(AUTOTUNE_CONFIGS)}
    assert set(table["target"]) == set(TARGETS)
    assert set(table["kernel"]) == set(KERNEL_NAMES)
    assert set(flash["causal"]) == {True, False}


def test_compiled_metadata_is_read(table):
    ok = table[table["status"] == "ok"]
    assert (ok["registers"] > 0).all() and (ok["registers"] <= 255).all()
    assert (ok["shared_bytes"] >= 0).all() and (ok["stack_bytes"] >= 0).all()
    # A flash kernel keeps K and V tiles in shared memory: more for larger tiles and stages.
    fwd = ok.query("kernel == 'flash_forward' and target == 'sm_90' and dtype == 'fp16' "
                   "and head_dim == 128 and causal == False")  # fmt: skip
    small = fwd[(fwd["block_k"] == 64) & (fwd["block_q"] == 32) & (fwd["num_stages"] == 2)]
    large = fwd[(fwd["block_k"] == 128) & (fwd["block_q"] == 128) & (fwd["num_stages"] == 3)]
    assert small["shared_bytes"].iloc[0] < large["shared_bytes"].iloc[0]
    rows = summary(table)
    assert len(rows) == len(KERNEL_NAMES) * len(TARGETS)
    assert (rows["failed"] == 0).all()


#: Strides that multiply a program-dependent index which can pass 2^31 elements: the batch
#: element's offset in the flash kernels, the row offset in the weighted sum.
WIDE_STRIDES = {
    "flash_forward": "stride_kb stride_lb stride_ob stride_qb stride_vb",
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


def test_autotuner_prunes_exactly_the_configs_over_the_shared_memory_limit(table):
    """``configs_that_fit`` (the autotuner's early prune on a GPU) run here for named targets
    with a fake launch's arguments; it keeps exactly the configurations the table says fit."""
    script = textwrap.dedent("""
        import json, torch, triton
        from perflab.attention import flash_triton as ft
        from perflab.attention.triton_compile import get_target
        q = torch.empty(2, 256, 128, dtype=torch.float16)
        lse = torch.empty(2, 256)
        args = dict(Q=q, K=q, V=q, DO=q, L=lse, DELTA=lse, DQ=q, stride_qb=256 * 128,
                    stride_qn=128, stride_kb=256 * 128, stride_kn=128, stride_vb=256 * 128,
                    stride_vn=128, stride_lb=256, N_Q=256, N_K=256, scale=128 ** -0.5)
        kept = {}
        for target in ("sm_80", "sm_90"):
            configs = ft.configs_that_fit(ft._flash_backward_q_kernel, ft._triton_configs(), args,
                                          dict(D=128, IS_CAUSAL=True, PRECISION="tf32"),
                                          get_target(target))
            kept[target] = [[c.kwargs["BQ"], c.kwargs["BK"], c.num_warps, c.num_stages]
                            for c in configs]
        print(json.dumps(kept))
    """)
    env = {"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, **env}, check=True).stdout  # fmt: skip
    kept = json.loads(out.strip().splitlines()[-1])
    rows = table[(table["kernel"] == "flash_backward_q") & (table["dtype"] == "fp16")
                 & (table["head_dim"] == 128) & table["causal"].astype(bool)]  # fmt: skip
    for target, configs in kept.items():
        here = rows[rows["target"] == target]
        fits = here[here["shared_bytes"] <= get_target(target).max_shared_bytes]
        expected = {tuple(int(x) for x in r) for r in
                    fits[["block_q", "block_k", "num_warps", "num_stages"]].to_numpy()}  # fmt: skip
        assert {tuple(c) for c in configs} == expected
        assert 0 < len(configs) <= len(AUTOTUNE_CONFIGS)
    # At head dimension 128 some configuration needs more than an A100's 163 KiB.
    assert len(kept["sm_80"]) < len(AUTOTUNE_CONFIGS)


def test_bad_names_get_one_clear_error():
    with pytest.raises(ValueError, match="valid: sm_80, sm_90, sm_100"):
        get_target("sm_75")
    with pytest.raises(ValueError, match="unknown kernel 'flash'; valid: flash_forward"):
        jobs(kernels=["flash"])
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        jobs(dtypes=["fp8"])


def test_kernel_source_is_the_kernels_own_code():
    from perflab.attention.flash_triton import _flash_forward_kernel
    from perflab.attention.weighted_sum import _weighted_sum_forward_kernel

    source = kernel_source(_flash_forward_kernel)
    assert source.startswith("@triton.jit\ndef _flash_forward_kernel(") and "tl.dot" in source
    assert "def _weighted_sum_forward_kernel(" in kernel_source(_weighted_sum_forward_kernel)
    with pytest.raises(ValueError, match="not a Triton kernel or a function"):
        kernel_source(3)
