"""The rule that chose the FlashAttention autotune configurations (``kernels.fitting`` and
``kernels.choose``), on small compile tables made by hand, and the kept table's coverage."""

import pandas as pd
import pytest

from perflab.implementations.attention.flash_configs import (
    HEAD_DIMS,
    KERNELS,
    SPILLING,
    kept_configs,
)
from perflab.tools.kernels import choose, fitting, spilling

SHARED = 232448


def compile_row(config, target="sm_90", spills=0, shared=1000, status="ok", head_dim=64):
    bq, bk, warps, stages = config
    return {
        "kernel": "flash_forward",
        "target": target,
        "head_dim": head_dim,
        "block_q": bq,
        "block_k": bk,
        "num_warps": warps,
        "num_stages": stages,
        "status": status,
        "spill_stores": spills if status == "ok" else None,
        "shared_bytes": shared,
        "max_shared_bytes": SHARED,
    }


def test_a_configuration_fits_only_when_every_compile_of_it_fits():
    table = pd.DataFrame(
        [
            compile_row((32, 32, 4, 3)),
            compile_row((32, 32, 4, 3), target="sm_80", spills=4),
            compile_row((32, 32, 4, 2)),
            compile_row((32, 32, 4, 2), target="sm_80"),
            compile_row((64, 64, 4, 3), shared=SHARED + 1),
            compile_row((64, 64, 4, 2), status="error"),
        ]
    )
    fits = fitting(table).set_index(["block_q", "block_k", "num_stages"])
    assert not fits.loc[(32, 32, 3), "fits"] and fits.loc[(32, 32, 3), "worst_spill_stores"] == 4
    assert fits.loc[(32, 32, 2), "fits"]
    assert not fits.loc[(64, 64, 3), "within_shared"] and not fits.loc[(64, 64, 2), "fits"]
    assert choose(fitting(table)) == {"flash_forward": {64: [(32, 32, 4, 2)]}}


def test_choose_keeps_per_tile_the_deepest_pipeline_then_the_preferred_warps():
    table = pd.DataFrame(
        [
            compile_row(c)
            for c in [
                (32, 32, 4, 2),
                (32, 32, 8, 3),
                (32, 32, 4, 3),  # 4 warps preferred for 32 x 32
                (128, 64, 4, 2),
                (128, 64, 8, 2),
                (128, 64, 4, 4),  # deepest wins over warps
                (128, 128, 4, 3),
                (128, 128, 8, 3),  # 8 warps preferred past 64 x 64
            ]
        ]
    )
    assert choose(fitting(table))["flash_forward"][64] == [
        (32, 32, 4, 3),
        (128, 64, 4, 4),
        (128, 128, 8, 3),
    ]
    assert spilling(fitting(table)) == []


def test_where_nothing_fits_the_least_spilling_configuration_is_kept_alone():
    table = pd.DataFrame(
        [
            compile_row((32, 32, 4, 2), spills=300),
            compile_row((32, 32, 4, 2), "sm_80", spills=0),
            compile_row((32, 64, 8, 2), spills=2),
            compile_row((32, 64, 8, 2), "sm_80", spills=1),
            compile_row((16, 32, 4, 2), spills=0, shared=SHARED * 2),  # cannot launch: never kept
        ]
    )
    fits = fitting(table)
    assert choose(fits) == {"flash_forward": {64: [(32, 64, 8, 2)]}}
    assert spilling(fits) == [("flash_forward", 64)]


@pytest.mark.parametrize("element_size", [2, 4])
def test_every_kernel_has_configurations_at_every_head_dimension(element_size):
    for name in KERNELS:
        for head_dim in HEAD_DIMS:
            configs = kept_configs(name, head_dim, element_size)
            assert configs and len(set(configs)) == len(configs)
            if (name, head_dim) in SPILLING.get(element_size, ()):
                assert len(configs) == 1  # the least-spilling one, alone


def test_an_unsupported_head_dimension_or_kernel_is_refused_by_name():
    with pytest.raises(ValueError, match=r"head dimension 48 unsupported; valid: \[16, 32"):
        kept_configs("flash_forward", 48, 2)
    with pytest.raises(ValueError, match="no configurations for 'flash_sideways'"):
        kept_configs("flash_sideways", 64, 2)
