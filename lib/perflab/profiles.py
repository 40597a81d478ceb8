"""Run profiles: the sizes a notebook runs at, defined once and saved with the results.

Every notebook has a ``profile`` parameter. ``"cpu"`` (the committed default) keeps all
notebooks together under 10 minutes on a 2-core CPU; ``"full"`` runs the full sizes and
is meant for a GPU (``perflab run -p profile full``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TypeVar

P = TypeVar("P")


@dataclass(frozen=True)
class BenchmarkingProfile:
    """Sizes of notebook 01."""

    presets: tuple[str, ...]
    context_length: int  # tokens per sequence
    batch_size: int  # sequences per step
    warmup: int  # untimed steps before each measurement
    steps: int  # timed steps
    warmup_study_preset: str  # the model of the warm-up study
    warmup_study_steps: int  # timed steps after each warm-up setting
    warmup_study_warmups: tuple[int, ...] = (0, 1, 2, 5)

    def as_dict(self) -> dict:
        return asdict(self)


BENCHMARKING: dict[str, BenchmarkingProfile] = {
    "cpu": BenchmarkingProfile(
        presets=("cpu-tiny", "cpu-small"),
        context_length=128,
        batch_size=4,
        warmup=2,
        steps=5,
        warmup_study_preset="cpu-small",
        warmup_study_steps=10,
    ),
    "full": BenchmarkingProfile(
        presets=("small", "medium", "large", "xl", "2.7B"),
        context_length=512,
        batch_size=4,
        warmup=5,
        steps=10,
        warmup_study_preset="small",
        warmup_study_steps=20,
    ),
}


@dataclass(frozen=True)
class ProfilingProfile:
    """Sizes of notebook 02."""

    preset: str  # the model profiled
    context_length: int  # tokens per sequence
    batch_size: int  # sequences per step
    warmup: int  # unprofiled steps before the profiled ones
    steps: int  # profiled steps per trace

    def as_dict(self) -> dict:
        return asdict(self)


PROFILING: dict[str, ProfilingProfile] = {
    "cpu": ProfilingProfile(
        preset="cpu-small", context_length=256, batch_size=4, warmup=2, steps=2
    ),
    "full": ProfilingProfile(preset="small", context_length=512, batch_size=4, warmup=5, steps=3),
}


@dataclass(frozen=True)
class PrecisionProfile:
    """Sizes of notebook 03's float32 vs bfloat16 benchmark."""

    presets: tuple[str, ...]
    context_length: int  # tokens per sequence
    batch_size: int  # sequences per step
    warmup: int  # untimed steps
    steps: int  # timed steps

    def as_dict(self) -> dict:
        return asdict(self)


PRECISION: dict[str, PrecisionProfile] = {
    "cpu": PrecisionProfile(
        ("cpu-tiny", "cpu-small"), context_length=128, batch_size=4, warmup=2, steps=5
    ),  # fmt: skip
    "full": PrecisionProfile(
        ("small", "medium", "large", "xl", "2.7B"),
        context_length=512,
        batch_size=4,
        warmup=5,
        steps=10,
    ),  # fmt: skip
}


@dataclass(frozen=True)
class MemoryProfile:
    """Sizes of notebook 04."""

    preset: str  # model of the timelines and the peak-memory table
    context_lengths: tuple[int, ...]  # of the peak-memory table
    batch_size: int  # sequences per step
    checkpoint_preset: str  # block shape of the checkpointing study
    checkpoint_layers: tuple[int, ...]  # depths of the nested-checkpointing fit
    group_sweep_layers: int  # depth of the single-level group-size sweep
    checkpoint_seq_len: int  # tokens per sequence in the checkpointing study

    def as_dict(self) -> dict:
        return asdict(self)


MEMORY: dict[str, MemoryProfile] = {
    "cpu": MemoryProfile(
        "cpu-tiny",
        (64, 128, 256),
        batch_size=4,
        checkpoint_preset="cpu-tiny",
        checkpoint_layers=(4, 8, 16, 32),
        group_sweep_layers=16,
        checkpoint_seq_len=128,
    ),  # fmt: skip
    "full": MemoryProfile(
        "small",
        (128, 256, 512),
        batch_size=4,
        checkpoint_preset="small",
        checkpoint_layers=(4, 8, 16, 32),
        group_sweep_layers=16,
        checkpoint_seq_len=512,
    ),  # fmt: skip
}


@dataclass(frozen=True)
class AttentionProfile:
    """Sizes of notebook 05."""

    batch: int  # sequences per call (no heads)
    head_dims: tuple[int, ...]  # d of q, k, v
    seq_lens: tuple[int, ...]  # sequence lengths
    warmup: int  # untimed calls
    steps: int  # timed calls
    model_preset: str  # the model compiled whole
    model_context_length: int  # tokens per sequence for the whole-model comparison
    model_batch_size: int  # sequences per step for the whole-model comparison

    def as_dict(self) -> dict:
        return asdict(self)


ATTENTION: dict[str, AttentionProfile] = {
    "cpu": AttentionProfile(
        8,
        (16, 64),
        (128, 256, 512),
        warmup=1,
        steps=3,
        model_preset="cpu-tiny",
        model_context_length=128,
        model_batch_size=4,
    ),  # fmt: skip
    "full": AttentionProfile(
        8,
        (16, 32, 64, 128),
        (256, 1024, 4096, 8192, 16384),
        warmup=5,
        steps=20,
        model_preset="small",
        model_context_length=512,
        model_batch_size=4,
    ),  # fmt: skip
}


@dataclass(frozen=True)
class FlashProfile:
    """Sizes of notebook 06."""

    batch: int  # sequences per call
    head_dims: tuple[int, ...]  # d of q, k, v
    seq_lens: tuple[int, ...]  # sequence lengths
    dtypes: tuple[str, ...]  # input dtypes
    warmup: int  # untimed calls
    steps: int  # timed calls
    max_seq_len: tuple[tuple[str, int], ...]  # implementations run only up to this length
    memory_batch: int  # the long-context memory comparison
    memory_seq_len: int
    memory_head_dim: int

    def as_dict(self) -> dict:
        return asdict(self)


FLASH: dict[str, FlashProfile] = {
    # The interpreter runs Triton programs in NumPy: its rows are correctness runs, kept tiny.
    "cpu": FlashProfile(
        4,
        (16, 64),
        (128, 256, 512),
        ("float32",),
        warmup=1,
        steps=3,
        max_seq_len=(("flash_triton", 128),),
        memory_batch=8,
        memory_seq_len=4096,
        memory_head_dim=64,
    ),  # fmt: skip
    "full": FlashProfile(
        1,
        (16, 32, 64, 128),
        tuple(2**i for i in range(7, 17)),
        ("float32", "bfloat16"),
        warmup=5,
        steps=20,
        max_seq_len=(("flash_torch", 8192),),
        memory_batch=8,
        memory_seq_len=4096,
        memory_head_dim=64,
    ),  # fmt: skip
}


@dataclass(frozen=True)
class CommunicationProfile:
    """Sizes of notebook 07. Models are ``perflab.distributed.toy.build_model`` names."""

    sizes_mb: tuple[float, ...]  # all-reduce sizes, MB = 10^6 bytes
    world_sizes: tuple[int, ...]  # ranks per all-reduce run (as many as the machine holds)
    allreduce_warmup: int
    allreduce_steps: int
    parity_models: tuple[str, ...]  # trained with each variant next to one process
    ddp_model: str  # the benchmarked model (at least 50 parameter tensors)
    ddp_world_size: int
    batch_per_rank: int
    seq_len: int
    warmup: int  # untimed rounds (one step of every variant per round)
    rounds: int  # timed rounds
    bucket_sizes_mb: tuple[float, ...]

    def as_dict(self) -> dict:
        return asdict(self)


COMMUNICATION: dict[str, CommunicationProfile] = {
    # 1 GB all-reduces take seconds each on Gloo over loopback: the full profile has them.
    "cpu": CommunicationProfile(
        sizes_mb=(1, 10, 100),
        world_sizes=(2, 4, 6),
        allreduce_warmup=2,
        allreduce_steps=5,
        parity_models=("toy", "lm:64:8"),
        ddp_model="lm:128:8",
        ddp_world_size=2,
        batch_per_rank=4,
        seq_len=64,
        warmup=2,
        rounds=8,
        bucket_sizes_mb=(1, 10, 100, 1000),
    ),
    "full": CommunicationProfile(
        sizes_mb=(1, 10, 100, 1000),
        world_sizes=(2, 4, 6),
        allreduce_warmup=5,
        allreduce_steps=20,
        parity_models=("toy", "lm:64:8"),
        ddp_model="lm:768:12",
        ddp_world_size=2,
        batch_per_rank=4,
        seq_len=512,
        warmup=3,
        rounds=10,
        bucket_sizes_mb=(1, 10, 100, 1000),
    ),
}


@dataclass(frozen=True)
class ShardingProfile:
    """Sizes of notebook 08."""

    world_size: int
    memory_model: str  # whose optimizer-state and parameter memory is measured
    fp16_parity_model: str  # FSDP with an fp16 compute dtype against fp32 on one process
    calculator_presets: tuple[str, ...]  # model presets of the calculators
    calculator_seq_len: int
    calculator_batch_sizes: tuple[int, ...]

    def as_dict(self) -> dict:
        return asdict(self)


_CALCULATOR_BATCHES = tuple(2**i for i in range(0, 15))
SHARDING: dict[str, ShardingProfile] = {
    "cpu": ShardingProfile(
        2, "lm:128:8", "lm:64:2", ("small", "xl", "10B"), 1024, _CALCULATOR_BATCHES
    ),  # fmt: skip
    "full": ShardingProfile(
        2, "lm:768:12", "lm:64:2", ("small", "xl", "10B"), 1024, _CALCULATOR_BATCHES
    ),  # fmt: skip
}


def get_profile(table: dict[str, P], name: str) -> P:
    """``table[name]`` or a ValueError listing the valid profile names."""
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; valid: {', '.join(table)}") from None
