"""The public API that ``../shared/WORKBOOK.md`` specifies and notebooks rely on, imported the
way it is documented."""

import torch


def test_attention_functions_import_from_the_package():
    from perflab.attention import FlashAttentionTorch, FlashAttentionTriton

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 20, 16, requires_grad=True) for _ in range(3))
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
