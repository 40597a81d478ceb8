"""What one generated token costs, counted from the model's shapes (notebook 10): FLOPs, and
bytes of weights and keys/values read from memory, for prefill (the prompt, all tokens in one
pass) and decode (one new token per sequence and step).

Per token, a forward pass does 2 FLOPs per weight of the matmuls (``matmul_weights``: the
blocks' projections and the LM head; the embedding is a lookup) plus attention, 2 x 2 x
context x d_model per layer (scores and weighted sum over ``context`` keys). Decode reads every
matmul weight once per step, shared by the ``batch`` sequences of the step, and each
sequence's keys and values (2 x layers x kv_dim per token of context; kv_dim = d_model unless
grouped-query attention shares key and value heads). Its arithmetic
intensity is therefore about 2 x ``batch`` / bytes per element FLOPs per byte of weights: far
below a GPU's or a CPU's FLOPs-to-bandwidth ratio, so decode is bound by memory bandwidth
(the roofline: Williams et al. 2009), and larger batches amortise the weights.

Attention is counted over the whole square, as a dense kernel computes it (the convention of
``ModelConfig.forward_flops``), and the LM head only where logits are computed: for the last
token of a prefilled prompt, for every decoded token.
"""

from __future__ import annotations

from perflab.implementations.attention.reference import attention_matmul_flops
from perflab.implementations.model import ModelConfig


def matmul_weights(config: ModelConfig) -> int:
    """Weights of the matmuls of one token's forward pass: per layer the attention projections
    (``ModelConfig.attention_weights``: 4 d^2 for multi-head attention) + 3 d d_ff (SwiGLU),
    and the LM head d V."""
    d = config.d_model
    per_layer = config.attention_weights() + 3 * d * config.d_ff
    return config.num_layers * per_layer + d * config.vocab_size


def kv_bytes_per_token(config: ModelConfig, element_bytes: int) -> int:
    """Keys and values of one token over all layers: 2 x layers x kv_dim elements (kv_dim =
    d_model for multi-head attention, less with grouped-query attention)."""
    return 2 * config.num_layers * config.kv_dim * element_bytes


def flops_per_token(config: ModelConfig, context: int) -> int:
    """FLOPs of one token attending over ``context`` keys: 2 x matmul weights + 4 x context x
    d_model per layer."""
    attention = attention_matmul_flops(1, 1, context, config.d_model)  # all heads: d_model wide
    return 2 * matmul_weights(config) + attention * config.num_layers


def decode_step_bytes(config: ModelConfig, batch: int, context: int, element_bytes: int) -> int:
    """Bytes a decode step must read or write at least: the matmul weights once, and for each
    of ``batch`` sequences the keys and values of ``context`` tokens read and one token's
    written."""
    kv = kv_bytes_per_token(config, element_bytes)
    return matmul_weights(config) * element_bytes + batch * (context + 1) * kv


def prefill_cost(config: ModelConfig, prompt_len: int, element_bytes: int) -> dict:
    """Per token of a prompt of ``prompt_len`` tokens, prefilled in one pass: FLOPs (the
    blocks' matmuls, attention over the ``prompt_len`` keys, and the LM head once for the
    prompt: only its last token's logits are needed), and bytes (the weights read once for the
    whole prompt, the keys and values written)."""
    head = config.d_model * config.vocab_size
    flops = (
        2 * (matmul_weights(config) - head)
        + 2 * head / prompt_len
        + attention_matmul_flops(1, 1, prompt_len, config.d_model) * config.num_layers
    )
    weights = matmul_weights(config) * element_bytes
    bytes_ = weights / prompt_len + kv_bytes_per_token(config, element_bytes)
    return {"flops_per_token": flops, "bytes_per_token": bytes_}


def decode_cost(config: ModelConfig, batch: int, context: int, element_bytes: int) -> dict:
    """Per generated token of a decode step of ``batch`` sequences at ``context``: FLOPs and
    bytes (``decode_step_bytes`` shared by the batch)."""
    return {
        "flops_per_token": flops_per_token(config, context),
        "bytes_per_token": decode_step_bytes(config, batch, context, element_bytes) / batch,
    }


def recompute_cost(config: ModelConfig, batch: int, context: int, element_bytes: int) -> dict:
    """Per generated token when no cache is kept: the whole sequence of ``context`` + 1 tokens
    runs again (``ModelConfig.forward_flops``, the LM head on every position, as the model's
    forward computes it), and the matmul weights are read once per step, shared by ``batch``
    sequences (a lower bound: the activations are left out)."""
    return {
        "flops_per_token": config.forward_flops(1, context + 1),
        "bytes_per_token": matmul_weights(config) * element_bytes / batch,
    }


def rooflines(cost: dict, bandwidth: float, peak_flops: float) -> dict:
    """The most tokens/s a step of this ``cost`` (``flops_per_token``, ``bytes_per_token``)
    can reach: memory-bound ``bandwidth / bytes per token``, compute-bound ``peak / FLOPs per
    token``; the lower of the two bounds it (bandwidth in bytes/s, peak in FLOP/s, both
    measured). ``bound`` names the lower one."""
    memory = bandwidth / cost["bytes_per_token"]
    compute = peak_flops / cost["flops_per_token"]
    return {
        "memory_bound_tokens_per_s": memory,
        "compute_bound_tokens_per_s": compute,
        "roofline_tokens_per_s": min(memory, compute),
        "bound": "memory" if memory <= compute else "compute",
    }


def roofline_tokens_per_s(
    config: ModelConfig,
    batch: int,
    context: int,
    element_bytes: int,
    bandwidth: float,
    peak_flops: float,
) -> dict:
    """The rooflines of a decode step of ``batch`` sequences at ``context`` (``decode_cost``):
    memory-bound ``batch x bandwidth / step bytes``, compute-bound ``peak / FLOPs per token``."""
    return rooflines(decode_cost(config, batch, context, element_bytes), bandwidth, peak_flops)
