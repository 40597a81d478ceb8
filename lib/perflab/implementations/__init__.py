"""The implementations a student compares with: each small, importing only torch, Triton (and
numpy, pandas for the tables it prints) and each other, with the measuring core's named ranges,
GPU figures and kernel compiler (``tests/test_layers.py`` holds them to that).

``model`` (the Transformer and ``build_model``, the one way the library makes a model), with
``model_config`` (shapes, parameters, FLOPs, presets), ``model_loading`` (a student's class by
``package.module:Class``) and ``rotary``; ``attention`` (the reference, the annotated version,
FlashAttention-2 in PyTorch and Triton with its tuning, the weighted sum, and ``correctness``,
the check of any attention against float64); ``checkpointing``;
``fused_cross_entropy`` (the loss head without the full logits); ``layer_norm`` (four ways);
``ddp`` (the data-parallel variants), ``sharded_optimizer`` (ZeRO-1), ``fsdp`` with
``fsdp_shards``; ``decode`` (generation with no cache, a contiguous or a paged KV cache, the
fixed-shape step, int8 weights).

A script imports them through the faces the workbook's specification names: ``perflab.model``,
``perflab.attention``, ``perflab.decode``, ``perflab.distributed``, ``perflab.training``.

Empty on purpose: importing one module here runs this file first.
"""
