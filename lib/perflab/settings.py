"""Notebook settings: each notebook declares its own in its ``parameters`` cell; here live only
the full sizes (one override set per notebook, for a GPU) and the record of a run's settings.

The committed values of a parameters cell are the CPU sizes: all notebooks together run in
about 10 minutes on a 2-core CPU (``perflab run`` prints the time). ``perflab run --full``
applies ``FULL_SIZES[notebook]`` on top of them (the handout's sizes, meant for a GPU box);
``perflab run --lease`` the full sizes cut by ``LEASE_SIZES`` to fit a short GPU lease
(``perflab.tools.lease``); ``-p NAME VALUE`` still wins over all. ``tests/test_settings.py``
checks that every name here is a parameter of its notebook.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from perflab.measure.paths import NOTEBOOKS_DIR

# Per notebook, the parameters whose GPU value differs from the committed CPU one.
FULL_SIZES: dict[str, dict[str, object]] = {
    "01_benchmarking": {
        "presets": ["small", "medium", "large", "xl", "10B"],
        "context_length": 512,
        "warmup": 5,
        "steps": 10,
        "warmup_study_preset": "small",
        "warmup_study_warmups": [0, 1, 2, 5],
    },
    "02_profiling": {
        "preset": "small",
        "context_length": 512,
        "warmup": 5,
        "steps": 3,
        "ln_tokens": 16384,
        "ln_width": 4096,
        "copy_seq_len": 512,
        "copy_rounds": 10,
        "grid_presets": ["small", "medium"],
        "grid_batch_size": 4,
    },
    "03_mixed_precision": {
        "presets": ["small", "medium", "large", "xl", "10B"],
        "context_length": 512,
        "warmup": 5,
        "batch_size": 4,
        "rounds": 10,
    },
    "04_memory": {
        "preset": "small",
        "context_lengths": [128, 256, 512],
        "checkpoint_preset": "small",
        "checkpoint_seq_len": 512,
        "group_sweep_layers": 16,
        "checkpoint_layers": [4, 8, 16, 32],
        "cost_rounds": 10,
    },
    "05_attention_compile": {
        "head_dims": [16, 32, 64, 128],
        "seq_lens": [256, 1024, 4096, 8192, 16384],
        "warmup": 5,
        "steps": 20,
        "model_preset": "small",
        "model_context_length": 512,
    },
    "06_flash_attention": {
        "batch": 1,
        "head_dims": [16, 32, 64, 128],
        "seq_lens": [2**i for i in range(7, 17)],
        "dtypes": ["float32", "bfloat16"],
        "warmup": 5,
        "steps": 20,
        # The tiled PyTorch version loops over tiles in Python, its work growing as the square
        # of the sequence: its forward at 1024 on an H100 is in
        # data/results/06_flash_attention/nvidia-h100-80gb-hbm3; 4096 would be 16x that work.
        "max_seq_len": {"flash_torch": 1024},
        "memory_batch": 8,
        "memory_seq_len": 16384,
        "kernel_targets": ["sm_80", "sm_90", "sm_100"],
        "kernel_dtypes": ["fp16", "bf16"],
        "kernel_causal": [False, True],
        "structure_targets": ["sm_80", "sm_90", "sm_100"],
        "memory_dtype": "bfloat16",
        "memory_implementations": ["naive", "sdpa", "flash_triton"],
    },
    "07_distributed_ddp": {
        "sizes_mb": [1, 10, 100, 1000],
        "allreduce_warmup": 5,
        "allreduce_steps": 20,
        "ddp_model": "lm:768:12",
        "seq_len": 512,
        "warmup": 3,
        "rounds": 10,
        "ring_sizes_mb": [10, 100, 1000],
        "ring_world_sizes": [2, 4, 8],
    },
    "08_sharding": {
        "memory_model": "lm:768:12",
        "zero_time_model": "lm:768:12",
        "zero_seq_len": 512,
        "zero_rounds": 10,
    },
    "09_training_step": {
        "preset": "small",
        "batch_size": 4,
        "seq_len": 512,
        "phase_steps": 10,
        "rungs": [
            "bf16 autocast",
            "fused QKV",
            "FlashAttention",
            "SDPA",
            "fused loss head",
            "foreach AdamW",
            "fused AdamW",
            "torch.compile",
            "activation checkpointing",
        ],
        "rounds": 10,
        "budget_s": 60,
        "data_rounds": 10,
        "loss_batch": 16,
        "loss_seq_len": 512,
        "bucket_preset": "small",
        "bucket_sequences": 256,
        "bucket_batch": 16,
        "head_tokens": 4096,
        "head_vocab": 32000,
        "batch_sizes": [1, 2, 4, 8, 16],
        "global_batch": 16,
        "trace_steps": 5,
        # The 2026 leaderboard's step: the 8B model, 2 x 32,768 tokens, bf16, on two GPUs
        # (notebook 08's FSDP); timed only: no one process holds it to compare with.
        "sharded_preset": "leaderboard-8B",
        "sharded_seq_len": 32768,
        "sharded_dtype": "bfloat16",
        "sharded_state": "bfloat16",  # fp32 state: above an H100's memory (09 prints the sum)
        "sharded_steps": 5,
        "sharded_check": False,
    },
    "10_decoding": {
        # The leaderboard's 8B-class model in bfloat16 on one GPU (16 GB of weights).
        "preset": "leaderboard-8B",
        "dtype": "bfloat16",
        "prompt_len": 1024,
        "context": 1024,
        "batch_sizes": [1, 4, 16, 64],
        "steps": 10,
        "rounds": 10,
        "cache_prompt_lens": [20, 400, 100, 1500],
        "cache_new_tokens": 16,  # no cache at 8B: every step runs each whole sequence again
        "cache_rounds": 10,
        "kv_preset": "leaderboard-8B",
        "kv_prompt_lens": [100, 3000, 250, 1200, 40, 2000, 600, 80],
        "kv_new_tokens": [128, 16, 96, 64, 120, 32, 48, 100],
        "block_sizes": [1, 16, 64, 256],
        "compile_preset": "leaderboard-8B",
        "compile_batch": 8,
        # Grouped-query attention on the 8B shape: 8 key and value heads for its 32 query heads
        # (the 8B model's weights and a multi-head cache at 16 x 2048 tokens: 10 prints both).
        "gqa_kv_heads": 8,
        "gqa_context": 2048,
        "gqa_rounds": 10,
        "gqa_compiled": True,
        # Freezing gives a CPU's linears inductor's GEMM kernels; on a GPU it would fold the
        # 16 GB of weights into each compiled graph for no such gain, at one more compile.
        "freeze": False,
    },
}


#: The lease profile (``perflab run --lease``, ``perflab.tools.lease``): the full sizes cut so that
#: every notebook fits a command of a 15-minute GPU lease (at most 9 minutes each, one or two
#: notebooks a command), on any GPU box. Applied on top of ``FULL_SIZES``.
LEASE_SIZES: dict[str, dict[str, object]] = {
    "01_benchmarking": {"presets": ["small", "medium", "xl"]},
    "02_profiling": {"grid_presets": ["small"], "copy_rounds": 6},
    "03_mixed_precision": {"presets": ["small", "large", "xl"], "rounds": 6, "budget_s": 20},
    "04_memory": {"context_lengths": [128, 512], "checkpoint_layers": [4, 8, 16],
                  "cost_rounds": 6},
    "05_attention_compile": {"head_dims": [64], "seq_lens": [1024, 4096, 16384], "steps": 10},
    "06_flash_attention": {"head_dims": [64], "seq_lens": [1024, 4096, 16384],
                           "dtypes": ["bfloat16"], "steps": 10, "kernel_dtypes": ["bf16"]},
    "07_distributed_ddp": {"sizes_mb": [1, 10, 100], "world_sizes": [2, 4], "seq_len": 256,
                           "rounds": 6, "ring_sizes_mb": [10, 100], "ring_world_sizes": [2, 4]},
    "08_sharding": {"memory_model": "lm:256:4", "zero_time_model": "lm:256:4",
                    "zero_seq_len": 256, "zero_rounds": 6},
    "09_training_step": {"rounds": 6, "budget_s": 10, "data_rounds": 6,
                         "sharded_preset": "cpu-small", "sharded_seq_len": 256,
                         "sharded_dtype": "float32", "sharded_state": "float32",
                         "sharded_check": True},
    # Section 5 counts dynamo's graphs and times a compiled step on the small preset: traced
    # and compiled again at 8B they took minutes; the 8B step is compiled in section 2 (batch
    # 1 and 16, reused by the profile) and by the int8 comparison.
    "10_decoding": {"batch_sizes": [1, 16], "compile_preset": "small", "compile_batch": 16,
                    "compile_calls": 4, "rounds": 6, "cache_rounds": 6, "gqa_context": 1024,
                    "gqa_rounds": 6, "gqa_compiled": False},
}  # fmt: skip


@cache
def parameter_names(notebook: str, directory: Path = NOTEBOOKS_DIR) -> tuple[str, ...]:
    """The names a notebook's ``parameters`` cell declares, in order (papermill's reading)."""
    import papermill

    path = directory / f"{notebook}.ipynb"
    if not path.exists():
        valid = ", ".join(sorted(p.stem for p in directory.glob("[0-9][0-9]_*.ipynb")))
        raise ValueError(f"unknown notebook {notebook!r}; valid: {valid}")
    return tuple(papermill.inspect_notebook(str(path)))


def record_settings(notebook: str, namespace: dict) -> dict:
    """The values of ``notebook``'s parameters as they are in ``namespace`` (the notebook's
    ``globals()`` after papermill injected its overrides): saved with every result."""
    return {name: namespace[name] for name in parameter_names(notebook) if name in namespace}


def full_sizes(notebook: str) -> dict[str, object]:
    """``FULL_SIZES[notebook]``, or {} for a notebook whose sizes are the same everywhere."""
    return dict(FULL_SIZES.get(notebook, {}))


def lease_sizes(notebook: str) -> dict[str, object]:
    """The full sizes cut by ``LEASE_SIZES[notebook]``: what ``perflab run --lease`` runs."""
    return {**full_sizes(notebook), **LEASE_SIZES.get(notebook, {})}
