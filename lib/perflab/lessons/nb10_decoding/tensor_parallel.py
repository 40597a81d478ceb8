"""Decoding with the model split over ranks by tensor parallelism (notebook 10, section 8).

Megatron-LM's split (Shoeybi et al. 2019) of each block over W ranks: rank r keeps heads
r H/W .. (r+1) H/W - 1 (their rows of the q, k and v weights, their columns of the output
projection, and their keys and values in its own cache; with grouped-query attention, its
share of the key and value heads, each with its group of query heads) and the same share of
the feed-forward
(rows of W1 and W3, columns of W2). Each rank's attention and feed-forward then give a partial
sum of the block's output, and one all-reduce per sub-layer adds them: 2 all-reduces per layer
and token, each of batch x d_model values, whatever W. Embedding, norms and LM head are
replicated. Every rank ends each step with the same hidden states, so each picks the same next
token, and the tokens must equal one process's.
"""

from __future__ import annotations

import time

import pandas as pd
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from perflab.distributed.launch import launch
from perflab.implementations.decode import generate
from perflab.implementations.decode.decoder import attend, pick
from perflab.implementations.model import ModelConfig, TransformerLM
from perflab.lessons.nb10_decoding.inputs import inference_model, random_prompts
from perflab.measure.conclusions import Finding
from perflab.measure.stats import is_unstable


def _check_split(config: ModelConfig, world_size: int) -> None:
    if config.kv_heads % world_size or config.d_ff % world_size:
        raise ValueError(
            f"tensor parallelism over {world_size} ranks needs the key and value "
            f"heads ({config.kv_heads}; query heads: a multiple of them) and d_ff "
            f"({config.d_ff}) divisible by {world_size}"
        )


class ShardedDecoder:
    """Rank ``rank`` of ``world_size``'s share of ``model`` (its weights sliced, not copied
    whole) and its own cache of its heads' keys and values for ``batch`` sequences of up to
    ``max_len`` tokens. ``counts`` adds up, step by step, the all-reduces it calls, the values
    they sum and the bytes of the weights and cache it reads (the embedding's rows of the
    tokens, the norms, its shards, the replicated LM head, its cache up to the step's end);
    ``world_size`` 1 is one process, with no all-reduce."""

    def __init__(self, model: TransformerLM, rank: int, world_size: int, batch: int, max_len: int):
        config = model.config
        _check_split(config, world_size)
        self.model, self.config = model, config
        self.heads = config.num_heads // world_size
        self.kv_heads = config.kv_heads // world_size  # a group's query heads stay together
        width, ff = config.d_model // world_size, config.d_ff // world_size
        kv_width = config.kv_dim // world_size
        cols, ffs = slice(rank * width, (rank + 1) * width), slice(rank * ff, (rank + 1) * ff)
        kv_cols = slice(rank * kv_width, (rank + 1) * kv_width)
        self.sizes = [width, kv_width, kv_width]
        self.layers = []
        for block in model.blocks:
            q, k, v = block.attn.qkv.weight.detach().split(block.attn.qkv.sizes)
            self.layers.append(
                {
                    "qkv": torch.cat([q[cols], k[kv_cols], v[kv_cols]]),
                    "out": block.attn.out.weight.detach()[:, cols],
                    "w1": block.ffn.w1.weight.detach()[ffs],
                    "w3": block.ffn.w3.weight.detach()[ffs],
                    "w2": block.ffn.w2.weight.detach()[:, ffs],
                }
            )
        shape = (batch, self.kv_heads, max_len, config.head_dim)
        dtype = model.embedding.weight.dtype
        self.k = [torch.zeros(shape, dtype=dtype) for _ in model.blocks]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in model.blocks]
        self.length = 0
        self.world_size = world_size
        self.counts = dict.fromkeys(("all_reduces", "values_reduced", "bytes_read"), 0)

    def _read(self, *tensors: Tensor) -> None:
        self.counts["bytes_read"] += sum(t.numel() * t.element_size() for t in tensors)

    def _all_reduce(self, partial: Tensor) -> None:
        if self.world_size > 1:
            self.counts["all_reduces"] += 1
            self.counts["values_reduced"] += partial.numel()
            dist.all_reduce(partial)

    @torch.no_grad()
    def step(self, tokens: Tensor) -> Tensor:
        """Logits (batch, vocab) of the last of ``tokens`` (batch, new), all sequences at the
        same length; their keys and values join this rank's cache."""
        model, new = self.model, tokens.shape[1]
        positions = (self.length + torch.arange(new))[None].expand(tokens.shape[0], new)
        end = self.length + new
        x = model.embedding(tokens)
        self._read(x)  # the tokens' rows of the embedding
        for block, shard, k_cache, v_cache in zip(
            model.blocks, self.layers, self.k, self.v, strict=True
        ):
            self._read(*shard.values(), block.attn_norm.weight, block.ffn_norm.weight)
            h = block.attn_norm(x)
            q, k, v = (
                t.reshape(*x.shape[:2], heads, -1).transpose(1, 2)
                for t, heads in zip(
                    F.linear(h, shard["qkv"]).split(self.sizes, dim=-1),
                    (self.heads, self.kv_heads, self.kv_heads),
                    strict=True,
                )
            )
            q, k = block.attn.rope(q, positions), block.attn.rope(k, positions)
            k_cache[:, :, self.length : end], v_cache[:, :, self.length : end] = k, v
            self._read(k_cache[:, :, :end], v_cache[:, :, :end])
            y = attend(q, k_cache[:, :, :end], v_cache[:, :, :end], positions)
            partial = F.linear(y.transpose(1, 2).reshape(*x.shape[:2], -1), shard["out"])
            self._all_reduce(partial)  # the heads' shares of the output projection, summed
            x = x + partial
            h = block.ffn_norm(x)
            partial = F.linear(
                F.silu(F.linear(h, shard["w1"])) * F.linear(h, shard["w3"]), shard["w2"]
            )
            self._all_reduce(partial)
            x = x + partial
        self.length = end
        self._read(model.final_norm.weight, model.lm_head.weight)
        return model.lm_head(model.final_norm(x[:, -1]))


def _tensor_parallel_rank(
    config: ModelConfig, dtype: torch.dtype, prompts: list[list[int]], new_tokens: int, seed: int
) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = inference_model(config, torch.device("cpu"), dtype, seed)  # the same weights everywhere
    decoder = ShardedDecoder(model, rank, world_size, len(prompts), len(prompts[0]) + new_tokens)
    logits = decoder.step(torch.tensor(prompts))
    first_logits, out, seconds = logits.clone(), [], []
    decoder.counts = dict.fromkeys(decoder.counts, 0)  # the decode steps' only, not the prompt's
    for i in range(new_tokens):
        tokens = pick(logits)
        out.append(tokens.tolist())
        if i + 1 < new_tokens:
            start = time.perf_counter()
            logits = decoder.step(tokens[:, None])
            seconds.append(time.perf_counter() - start)
    per_step = {name: count / (new_tokens - 1) for name, count in decoder.counts.items()}
    tokens = [list(row) for row in zip(*out, strict=True)]
    return {
        "rank": rank,
        "tokens": tokens,
        "first_logits": first_logits,
        "step_s": seconds,
        **per_step,
    }


def _one_process_bytes_per_step(
    model: TransformerLM, prompts: list[list[int]], new_tokens: int
) -> float:
    """The bytes one process reads per decode step over the same tokens (a ``ShardedDecoder``
    of world size 1 counts them as the ranks count theirs)."""
    decoder = ShardedDecoder(model, 0, 1, len(prompts), len(prompts[0]) + new_tokens)
    logits = decoder.step(torch.tensor(prompts))
    decoder.counts["bytes_read"] = 0
    for _ in range(new_tokens - 1):
        logits = decoder.step(pick(logits)[:, None])
    return decoder.counts["bytes_read"] / (new_tokens - 1)


def tensor_parallel_decode(
    config: ModelConfig,
    prompts: list[list[int]],
    new_tokens: int,
    *,
    world_size: int = 2,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
) -> pd.DataFrame:
    """Greedy decoding of ``prompts`` (all of one length) on ``world_size`` ranks with the
    model split by heads and feed-forward columns (``ShardedDecoder``), against one process
    (``generate`` with the contiguous cache) on the same weights: per rank, whether its tokens
    equal one process's, the largest difference of the prompt's last logits, the median seconds
    of a decode step (the ranks' clocks, all-reduces included) with ``unstable`` (fewer than 3
    steps, or too spread), and, counted over the decode steps, the all-reduces and values summed
    per generated token (2 per layer, batch x d_model values each) and the bytes the rank read
    per step beside one process's (``share_of_one_process``: above 1 / world_size, since the
    embedding, norms and LM head are replicated)."""
    _check_split(config, world_size)
    if not prompts or len({len(p) for p in prompts}) != 1 or new_tokens < 2:
        raise ValueError("need prompts of one length and new_tokens >= 2 (one decode step timed)")
    if len(prompts[0]) + new_tokens > config.context_length:
        raise ValueError(
            f"prompt + new_tokens reach {len(prompts[0]) + new_tokens} tokens; the "
            f"model's context is {config.context_length}"
        )
    model = inference_model(config, torch.device("cpu"), dtype, seed)
    expected = generate(model, prompts, new_tokens, "contiguous")
    with torch.no_grad():
        reference = model(torch.tensor(prompts))[:, -1]
    one_process = _one_process_bytes_per_step(model, prompts, new_tokens)
    ranks = launch(_tensor_parallel_rank, world_size, (config, dtype, prompts, new_tokens, seed))
    return pd.DataFrame(
        [
            {
                "rank": r["rank"],
                "world_size": world_size,
                "dtype": str(dtype).removeprefix("torch."),
                "batch": len(prompts),
                "new_tokens": new_tokens,
                "same_tokens": r["tokens"] == expected,
                "max_abs_logit_diff": (r["first_logits"] - reference).abs().max().item(),
                "step_median_s": float(pd.Series(r["step_s"]).median()),
                "unstable": is_unstable(r["step_s"]),
                "all_reduces_per_token": r["all_reduces"],
                "values_reduced_per_token": r["values_reduced"],
                "bytes_read_per_step": r["bytes_read"],
                "one_process_bytes_read_per_step": one_process,
                "share_of_one_process": r["bytes_read"] / one_process,
            }
            for r in ranks
        ]
    )


def tensor_parallel_study(
    config: ModelConfig, batch: int, prompt_len: int, new_tokens: int, world_size: int
) -> pd.DataFrame:
    """Notebook 10's section 8: ``tensor_parallel_decode`` of ``batch`` random prompts of
    ``prompt_len`` tokens (seed 1) in float64, where no near-tie can flip a token (the
    exactness check), then in float32 (the timed rows), in one table."""
    prompts = random_prompts(config.vocab_size, [prompt_len] * batch, seed=1)
    return pd.concat(
        [
            tensor_parallel_decode(config, prompts, new_tokens, world_size=world_size, dtype=dtype)
            for dtype in (torch.float64, torch.float32)
        ],
        ignore_index=True,
    )


def exactness_line(table: pd.DataFrame) -> str:
    """Whether ``tensor_parallel_study``'s float64 ranks decoded one process's tokens, and
    the prompt's logits within 1e-12 of one process's."""
    exact = table[table["dtype"] == "float64"]
    return (
        f"{exact['rank'].nunique()} ranks, float64: the tokens of one process on every rank: "
        f"{bool(exact['same_tokens'].all())}; the prompt's logits within 1e-12: "
        f"{bool((exact['max_abs_logit_diff'] <= 1e-12).all())}"
    )


def tensor_parallel_findings(table: pd.DataFrame) -> list[Finding]:
    """Notebook 10's reading of ``tensor_parallel_decode``'s float32 rows: whether every rank
    decoded one process's tokens, the step's median (the slower rank's), its all-reduces and the
    share of one process's bytes a rank reads. No comparison with one process's step: none was
    timed on the same work (section 2's is another decoder at another context, in another
    launch), so none is drawn."""
    own = table[table["dtype"] == "float32"]
    step_s = own["step_median_s"].max()
    share = own["share_of_one_process"].max()
    return [
        Finding(
            "tensor-parallel decode step",
            (
                f"{int(own['world_size'].iloc[0])} ranks in float32: the same tokens as one "
                f"process on every rank: {bool(own['same_tokens'].all())}; a decode step took "
                f"{step_s * 1e3:.1f} ms (median, the slower rank"
                + (", unstable" if own["unstable"].any() else "")
                + f") with {own['all_reduces_per_token'].iloc[0]:.0f} all-reduces per token, "
                f"each rank reading {share:.0%} of the bytes one process reads a step (its share "
                "of the blocks' weights and cache, and all of the replicated embedding, norms and "
                "LM head); no one-process step was timed on the same work, so whether splitting "
                "saves time is not measured here"
            ),
        )
    ]
