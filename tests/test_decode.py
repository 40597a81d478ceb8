"""perflab.decode: every cache mode gives the tokens of full recomputation (greedy and seeded
sampling, prompts of unequal lengths, float64 random models); the paged cache's blocks; bad
input."""

import math

import pytest
import torch

from perflab.decode import (
    CACHES,
    ContiguousKVCache,
    PagedKVCache,
    _cached_logits,
    generate,
)
from perflab.model import ModelConfig, TransformerLM

TINY = ModelConfig("decode-test", d_model=32, d_ff=64, num_layers=2, num_heads=2, vocab_size=97,
                   context_length=48)  # fmt: skip


def _model(seed: int) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(TINY).double().eval()


def _prompts(seed: int, lengths=(1, 5, 11, 3)) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, TINY.vocab_size, (n,), generator=generator).tolist() for n in lengths]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_cache_greedily_decodes_like_full_recomputation(seed):
    model, prompts = _model(seed), _prompts(seed)
    reference = generate(model, prompts, 8, cache="none")
    assert [len(t) for t in reference] == [8] * len(prompts)
    assert generate(model, prompts, 8, cache="contiguous") == reference
    for block_size in (1, 4, 16):
        assert generate(model, prompts, 8, cache="paged", block_size=block_size) == reference


def test_cached_logits_equal_the_full_sequence_logits():
    model, prompts = _model(3), _prompts(3, lengths=(6, 2))
    cache = ContiguousKVCache(model, 2, 16)
    for row, prompt in enumerate(prompts):  # prefill one at a time, then one token together
        _cached_logits(model, cache, [row], torch.tensor([prompt]))
    step = _cached_logits(model, cache, [0, 1], torch.tensor([[7], [9]]))
    for row, (prompt, token) in enumerate(zip(prompts, (7, 9), strict=True)):
        full = model(torch.tensor([prompt + [token]]))[0, -1]
        torch.testing.assert_close(step[row], full, rtol=1e-10, atol=1e-10)


def test_sampling_draws_alike_in_every_mode_and_follows_the_seed():
    model, prompts = _model(4), _prompts(4)

    def sample(cache, seed):
        return generate(model, prompts, 6, cache=cache, temperature=1.5, top_k=5,
                        generator=torch.Generator().manual_seed(seed))  # fmt: skip

    reference = sample("none", 0)
    assert all(sample(cache, 0) == reference for cache in CACHES)
    assert sample("paged", 1) != reference  # another seed, other draws
    assert reference != generate(model, prompts, 6)  # not the greedy tokens


def test_top_1_sampling_is_greedy():
    model, prompts = _model(5), _prompts(5)
    drawn = generate(model, prompts, 5, cache="paged", temperature=0.7, top_k=1,
                     generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert drawn == generate(model, prompts, 5, cache="paged")


def test_paged_blocks_are_taken_as_sequences_grow_and_returned():
    model = _model(6)
    cache = PagedKVCache(model, num_blocks=8, block_size=4)
    cache.reserve(0, 5)  # 5 tokens: 2 blocks
    cache.reserve(1, 1)
    assert [len(cache.tables[r]) for r in (0, 1)] == [2, 1] and len(cache.free) == 5
    cache.advance([0], 5)
    cache.reserve(0, 3)  # 8 tokens fit in the same 2 blocks
    assert len(cache.tables[0]) == 2
    cache.release(0)
    assert len(cache.free) == 7 and cache.peak_blocks == 3
    per_block = 2 * TINY.num_layers * TINY.num_heads * 4 * TINY.head_dim * 8  # k and v, float64
    assert cache.block_bytes == per_block
    with pytest.raises(RuntimeError, match="out of blocks: sequence 1 needs 9 more, 7 free of 8"):
        cache.reserve(1, 37)


def test_paged_memory_against_contiguous_for_unequal_requests():
    model, lengths, new = _model(7), [40, 2, 3, 1], 4
    contiguous = ContiguousKVCache(model, len(lengths), max(lengths) + new)
    paged = PagedKVCache(model, num_blocks=64, block_size=4)
    for row, n in enumerate(lengths):
        paged.reserve(row, n + new)
    blocks = sum(math.ceil((n + new) / 4) for n in lengths)
    assert paged.blocks_in_use == blocks
    assert paged.blocks_in_use * paged.block_bytes < contiguous.reserved_bytes / 2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"cache": "ring"}, "unknown cache 'ring'; valid: none, contiguous, paged"),
        ({"prompts": [[1], []]}, "non-empty lists of token ids"),
        ({"prompts": [[1, 97]]}, r"token ids must lie in 0 \.\. 96; got \[97\]"),
        ({"max_new_tokens": 60}, "beyond the model's context of 48"),
        ({"temperature": -1.0}, "need temperature >= 0"),
    ],
)
def test_bad_input_gets_one_clear_error(kwargs, message):
    args = {"prompts": [[1, 2]], "max_new_tokens": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        generate(_model(0), **args)
