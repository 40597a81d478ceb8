"""The whole-model compile comparison's set-up (perflab.bench.compiled); the comparison itself
runs in notebook 05 under nbval."""

import os

import pytest
import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir

from perflab.bench.compiled import _no_compile_caches, compile_vs_eager


def test_a_cold_compile_writes_its_kernels_to_a_fresh_directory():
    before = cache_dir()
    with _no_compile_caches():
        inside = cache_dir()
        assert inside != before
        assert os.listdir(inside) == []
        assert torch._inductor.config.fx_graph_cache is False
    assert cache_dir() == before
    assert not os.path.exists(inside)


def test_an_unknown_compile_mode_is_named():
    with pytest.raises(
        ValueError,
        match="unknown compile mode 'reduce-overhead'; valid: default, max-autotune-no-cudagraphs",
    ):
        compile_vs_eager(
            "cpu-tiny", 8, 1, torch.device("cpu"), compile_modes=("default", "reduce-overhead")
        )
