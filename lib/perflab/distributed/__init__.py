"""Distributed training on N ranks (notebooks 07 and 08): launching, the DDP benchmarks and
timelines, memory per rank and the parallelism calculators (the all-reduce benchmark and the
ring are notebook 07's, in its lesson package). Gloo on CPU, NCCL on GPUs, the same code. This
face also names the data-parallel variants, ZeRO-1 and FSDP for scripts; they live in
``perflab.implementations`` (``ddp``, ``sharded_optimizer``, ``fsdp``)."""

from perflab.distributed.launch import (
    RankError,
    check_world_size,
    free_port,
    init_process_group_from_env,
    launch,
    max_world_size,
    rank_device,
)
from perflab.implementations.ddp import (
    DDPBucketed,
    DDPFlat,
    DDPIndividualParameters,
    DDPNaive,
    TorchDDP,
    make_data_parallel,
)
from perflab.implementations.fsdp import FSDP
from perflab.implementations.sharded_optimizer import ShardedOptimizer

__all__ = [
    "DDPBucketed",
    "DDPFlat",
    "DDPIndividualParameters",
    "DDPNaive",
    "FSDP",
    "RankError",
    "ShardedOptimizer",
    "TorchDDP",
    "check_world_size",
    "free_port",
    "init_process_group_from_env",
    "launch",
    "make_data_parallel",
    "max_world_size",
    "rank_device",
]
