"""The public API that ``../shared/WORKBOOK.md`` specifies and notebooks rely on, imported the
way it is documented."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perflab.measure.device import triton_available

NEEDS_TRITON = pytest.mark.skipif(not triton_available(), reason="Triton is not installed")


@NEEDS_TRITON
def test_attention_functions_import_from_the_package():
    from perflab.attention import FlashAttentionTorch, FlashAttentionTriton

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # compiled Triton: CUDA tensors
    q, k, v = (torch.randn(2, 20, 16, device=device, requires_grad=True) for _ in range(3))
    for function in (FlashAttentionTorch, FlashAttentionTriton):
        assert issubclass(function, torch.autograd.Function)
        out = function.apply(q, k, v, True)
        assert out.shape == (2, 20, 16)
        lse = [t for t in out.grad_fn.saved_tensors if t.shape == (2, 20)]
        assert len(lse) == 1  # the logsumexp is the one saved tensor of shape (batch, n_q)


def test_model_and_distributed_names():
    from perflab.distributed import (
        FSDP,
        DDPBucketed,
        DDPIndividualParameters,
        ShardedOptimizer,
    )
    from perflab.model import PRESETS, ModelConfig, TransformerLM

    assert isinstance(PRESETS, dict) and issubclass(TransformerLM, torch.nn.Module)
    assert ModelConfig is type(next(iter(PRESETS.values())))
    assert issubclass(ShardedOptimizer, torch.optim.Optimizer)
    for wrapper in (DDPIndividualParameters, DDPBucketed, FSDP):
        assert issubclass(wrapper, torch.nn.Module)
        assert callable(wrapper.finish_gradient_synchronization)
    for wrapper in (DDPIndividualParameters, DDPBucketed):
        assert callable(wrapper.no_sync)


LAYOUT = Path(__file__).resolve().parents[1] / "docs" / "layout.md"
#: The package faces whose ``__all__`` promises names to a user's own code (docs/layout.md).
FACES = [
    "perflab.cs336",
    "perflab.attention",
    "perflab.decode",
    "perflab.bench",
    "perflab.profiling",
    "perflab.distributed",
    "perflab.training",
]


def test_docs_layout_lists_these_faces_and_every_name_it_spells_out_imports_from_them():
    """docs/layout.md's "What a user imports": its faces are ``FACES`` (with the model's module,
    the lessons and the command line); each face's ``__all__`` names what it has; and each name
    a row spells out is importable from a module that row names."""
    section = LAYOUT.read_text().split("## What a user imports")[1].split("\n## ")[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ")][1:]
    modules = r"`(perflab(?:\.[a-z_0-9]+)+)`"
    named = {module for row in rows for module in re.findall(modules, row[-1])}
    assert named == {
        *FACES,
        "perflab.model",
        "perflab.lessons",
        "perflab.tools.cli",
    }, named
    for face in FACES:
        module = importlib.import_module(face)
        assert module.__all__, face
        assert [name for name in module.__all__ if not hasattr(module, name)] == [], face
    for who, what, where in rows:
        if "command line" in who:
            continue
        faces = [importlib.import_module(module) for module in re.findall(modules, where)]
        for name in re.findall(r"`([A-Za-z]\w*)`", what):
            assert any(hasattr(face, name) for face in faces), f"{name} ({who})"


def _fresh_cpu_python(code: str) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter that sees no GPU and has not chosen TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


@NEEDS_TRITON
def test_triton_imported_before_perflab_is_one_clear_error():
    """torch.compile imports Triton; if that happens before perflab chose the interpreter, the
    interpreted kernels would fail deep inside Triton: refuse with the reason instead."""
    code = (
        "import torch\n"
        "torch.compile(lambda x: x * 2, backend='aot_eager_decomp_partition')(torch.ones(2))\n"
        "import triton.language\n"
        "from perflab.attention import FlashAttentionTriton\n"
        "FlashAttentionTriton.apply\n"
    )
    done = _fresh_cpu_python(code)
    assert done.returncode != 0
    assert "before TRITON_INTERPRET=1 was set" in done.stderr.strip().splitlines()[-1]


@NEEDS_TRITON
def test_torch_compile_after_import_perflab_leaves_the_kernels_working():
    code = (
        "import perflab, torch\n"
        "torch.compile(lambda x: x * 2, backend='aot_eager_decomp_partition')(torch.ones(2))\n"
        "from perflab.attention import FlashAttentionTriton\n"
        "q = torch.randn(1, 20, 16)\n"
        "print(FlashAttentionTriton.apply(q, q, q, True).shape)\n"
    )
    done = _fresh_cpu_python(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "torch.Size([1, 20, 16])" in done.stdout
