"""Datasheet figures of the GPUs the workbook models, compiles for or runs on, each with its
source: the one table of them (the step model of notebook 09, the calculators of notebook 08,
the compile targets of notebook 06 and MFU against the datasheet all read it).

These are cited, not measured: a datasheet's "up to" figures are peaks no kernel reaches, and
the tensor-core figures NVIDIA prints first are with 2:4 structured sparsity, twice the dense
rate that training uses; the dense rate is kept here. NVLink is quoted as the sum of both
directions; a collective's bandwidth per direction is half of it, kept here. Where the workbook
measures a peak (``perflab.measure.peak``) it reports both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GPUSpec:
    """One GPU as its datasheet gives it."""

    name: str
    arch: int  # compute capability x 10: sm_90 is 90
    bf16_flops: float  # dense bfloat16 tensor-core peak, FLOP/s
    hbm_bytes_per_s: float
    nvlink_bytes_per_s: float  # one direction
    memory_bytes: float
    max_shared_bytes: int  # shared memory per block, opt-in maximum
    source: str

    def __post_init__(self) -> None:
        for field in ("bf16_flops", "hbm_bytes_per_s", "nvlink_bytes_per_s", "memory_bytes"):
            if not getattr(self, field) > 0:
                raise ValueError(f"{field} of {self.name} must be positive")


#: Shared memory per block (opt-in maximum) by compute capability: CUDA C++ Programming Guide,
#: "Technical Specifications per Compute Capability".
_SHARED = {80: 163 * 1024, 90: 227 * 1024, 100: 227 * 1024}

GPUS = {
    spec.name: spec
    for spec in (
        GPUSpec("A100 SXM4 80GB", 80, 312e12, 2.039e12, 300e9, 80e9, _SHARED[80],
                "NVIDIA A100 datasheet (2021): BF16 624 TFLOPS with sparsity (312 dense), "
                "HBM2e 2,039 GB/s, NVLink 600 GB/s, 80 GB"),
        GPUSpec("H100 SXM5 80GB", 90, 989.5e12, 3.35e12, 450e9, 80e9, _SHARED[90],
                "NVIDIA H100 datasheet (2023): BF16 1,979 TFLOPS with sparsity (989.5 dense), "
                "HBM3 3.35 TB/s, NVLink 900 GB/s, 80 GB"),
        GPUSpec("H200 SXM 141GB", 90, 989.5e12, 4.8e12, 450e9, 141e9, _SHARED[90],
                "NVIDIA H200 datasheet (2024): BF16 1,979 TFLOPS with sparsity (989.5 dense), "
                "HBM3e 4.8 TB/s, NVLink 900 GB/s, 141 GB"),
        GPUSpec("HGX B200", 100, 2.25e15, 7.7e12, 900e9, 180e9, _SHARED[100],
                "NVIDIA HGX B200 datasheet (2025), per GPU of 8: BF16 36 PFLOPS with sparsity "
                "over 8 GPUs (4.5 each, 2.25 dense), HBM3e 62 TB/s and 1.4 TB over 8 (about "
                "7.7 TB/s and 180 GB each), NVLink 5 1.8 TB/s"),
        GPUSpec("GB200 (B200 in an NVL72)", 100, 2.5e15, 8e12, 900e9, 186e9, _SHARED[100],
                "NVIDIA GB200 NVL72 datasheet (2025), per GPU of 72: BF16 360 PFLOPS with "
                "sparsity over 72 (5 each, 2.5 dense), HBM3e 576 TB/s and 13.4 TB over 72 "
                "(8 TB/s and about 186 GB each), NVLink 5 1.8 TB/s"),
    )
}  # fmt: skip

#: The 2026 handout prices the leaderboard's B200 at 2,500 TFLOP/s BF16, the GB200's dense
#: figure; an HGX B200 (the leaderboard's 8-GPU box) is rated 2,250. Kept apart and named so.
HANDOUT_B200 = replace(
    GPUS["HGX B200"],
    name="B200 at the handout's 2,500 TFLOP/s",
    bf16_flops=2.5e15,
    source="CS336 2026 systems handout, leaderboard section: 2,500 TFLOP/s BF16 per B200 "
    "(the GB200's dense figure); the rest from the HGX B200 datasheet",
)


def gpu(name: str) -> GPUSpec:
    """``GPUS[name]``, or one clear error naming the GPUs there are."""
    if name not in GPUS:
        raise ValueError(f"unknown GPU {name!r}; valid: {', '.join(GPUS)}")
    return GPUS[name]


#: Words in a device name (as ``torch.cuda.get_device_name`` gives it) -> the table's GPU.
_DEVICE_NAMES = (
    ("A100", "A100 SXM4 80GB"),
    ("H100", "H100 SXM5 80GB"),
    ("H200", "H200 SXM 141GB"),
    ("GB200", "GB200 (B200 in an NVL72)"),
    ("B200", "HGX B200"),
)


def datasheet_for(device_name: str) -> GPUSpec | None:
    """The table's GPU for a device name such as "NVIDIA H100 80GB HBM3", or None (a CPU, or a
    GPU not in the table). PCIe and NVL variants have lower clocks than the SXM figures: the
    name is matched by its family only, so read the result as the family's best case."""
    for word, name in _DEVICE_NAMES:
        if word in device_name:
            return GPUS[name]
    return None
