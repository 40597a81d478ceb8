"""perflab.implementations.decode: every cache mode gives the tokens of full recomputation (greedy
and seeded sampling, prompts of unequal lengths, float64 random models); the paged cache's blocks;
bad input."""

import math

import pytest
import torch

from perflab.implementations.decode import (
    CACHES,
    ContiguousKVCache,
    PagedKVCache,
    StaticDecoder,
    cached_logits,
    generate,
    make_cache,
)
from perflab.implementations.model import ModelConfig, TransformerLM

TINY = ModelConfig(
    "decode-test", d_model=32, d_ff=64, num_layers=2, num_heads=2, vocab_size=97, context_length=48
)


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


def testcached_logits_equal_the_full_sequence_logits():
    model, prompts = _model(3), _prompts(3, lengths=(6, 2))
    cache = ContiguousKVCache(model, 2, 16)
    for row, prompt in enumerate(prompts):  # prefill one at a time, then one token together
        cached_logits(model, cache, [row], torch.tensor([prompt]))
    step = cached_logits(model, cache, [0, 1], torch.tensor([[7], [9]]))
    for row, (prompt, token) in enumerate(zip(prompts, (7, 9), strict=True)):
        full = model(torch.tensor([prompt + [token]]))[0, -1]
        torch.testing.assert_close(step[row], full, rtol=1e-10, atol=1e-10)


def test_sampling_draws_alike_in_every_mode_and_follows_the_seed():
    model, prompts = _model(4), _prompts(4)

    def sample(cache, seed):
        return generate(
            model,
            prompts,
            6,
            cache=cache,
            temperature=1.5,
            top_k=5,
            generator=torch.Generator().manual_seed(seed),
        )

    reference = sample("none", 0)
    assert all(sample(cache, 0) == reference for cache in CACHES)
    assert sample("paged", 1) != reference  # another seed, other draws
    assert reference != generate(model, prompts, 6)  # not the greedy tokens


def test_top_1_sampling_is_greedy():
    model, prompts = _model(5), _prompts(5)
    drawn = generate(
        model,
        prompts,
        5,
        cache="paged",
        temperature=0.7,
        top_k=1,
        generator=torch.Generator().manual_seed(0),
    )
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


def test_paged_block_tables_go_to_the_device_only_when_they_change():
    """A block table is copied to the cache's device when its row takes blocks, not for each
    layer's read and write of each step: prompts of 3 and 9 tokens in 4-token blocks take 1
    and 3 blocks (a copy each); 6 new tokens each take row 0 two more blocks, one at a time
    (at tokens 5 and 9), and row 1 one (at token 13): 5 copies, whatever the layers and
    steps."""
    model = _model(3)
    cache = PagedKVCache(model, num_blocks=16, block_size=4)
    prompts = _prompts(3, lengths=(3, 9))
    with torch.no_grad():
        for row, prompt in enumerate(prompts):
            cache.reserve(row, len(prompt))
            cached_logits(model, cache, [row], torch.tensor([prompt]))
        tokens = torch.zeros(2, 1, dtype=torch.long)
        for _ in range(6):
            for row in (0, 1):
                cache.reserve(row, 1)
            cached_logits(model, cache, [0, 1], tokens)
    assert [len(cache.tables[row]) for row in (0, 1)] == [3, 4]
    assert cache.table_uploads == 5


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
        ({"prompts": [[1], []]}, "non-empty lists of integer token ids"),
        ({"prompts": [[1, 97]]}, r"token ids must lie in 0 \.\. 96; got \[97\]"),
        ({"max_new_tokens": 60}, "beyond the model's context of 48"),
        ({"temperature": -1.0}, "need temperature >= 0"),
    ],
)
def test_bad_input_gets_one_clear_error(kwargs, message):
    args = {"prompts": [[1, 2]], "max_new_tokens": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        generate(_model(0), **args)


def test_unequal_budgets_decode_like_full_recomputation_and_free_the_blocks():
    model, prompts = _model(8), _prompts(8)
    budgets = [7, 0, 2, 5]
    reference = generate(model, prompts, 7, cache="none")
    expected = [tokens[:n] for tokens, n in zip(reference, budgets, strict=True)]
    assert generate(model, prompts, budgets, cache="none") == expected
    assert generate(model, prompts, budgets, cache="contiguous") == expected
    paged = make_cache(model, "paged", prompts, budgets, block_size=2)
    assert generate(model, prompts, budgets, cache=paged) == expected
    assert paged.blocks_in_use == 0 and not paged.tables  # every block back in the pool
    at_once = sum(math.ceil((len(p) + n) / 2) for p, n in zip(prompts, budgets, strict=True))
    assert paged.peak_blocks < at_once  # finished sequences gave theirs back early
    with pytest.raises(ValueError, match="3 entries for 4 prompts"):
        generate(model, prompts, [1, 2, 3])


def test_static_decoder_eager_and_traced_decode_like_full_recomputation():
    model, prompts = _model(9), _prompts(9)
    reference = generate(model, prompts, 6, cache="none")
    decoder = StaticDecoder(model, len(prompts), 20)
    assert decoder.generate(prompts, 6) == reference
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    traced = torch.compile(decoder, backend=counting_backend, fullgraph=True)
    assert decoder.generate(prompts, 6, step=traced) == reference  # a second run: reset, reused
    assert len(graphs) == 1  # the shapes never change: traced once
    torch._dynamo.reset()
    with pytest.raises(ValueError, match="max_len must be in 1 .. 48"):
        StaticDecoder(model, 2, 49)
    with pytest.raises(ValueError, match="the cache holds 20"):
        decoder.generate(prompts, 12)


def test_rotary_tables_computed_every_step_equal_the_precomputed_ones():
    model, prompts = _model(10), _prompts(10)
    reference = generate(model, prompts, 5, cache="contiguous")
    model.blocks[0].attn.rope.precomputed = False  # shared by every block
    assert generate(model, prompts, 5, cache="contiguous") == reference
    x = torch.randn(1, 2, 9, TINY.head_dim, dtype=torch.float64)
    rope = model.blocks[0].attn.rope
    every = rope(x)
    rope.precomputed = True
    # float32 cos and sin of the same angles, vectorised differently: within a few ulps
    torch.testing.assert_close(every, rope(x), rtol=0, atol=1e-6)


def test_paged_cache_tracks_the_most_token_bytes_held_at_once():
    model = _model(11)
    cache = PagedKVCache(model, num_blocks=8, block_size=4)
    for row, n in enumerate((3, 6)):
        cache.reserve(row, n)
        cache.advance([row], n)
    cache.release(1)
    cache.reserve(0, 1)
    cache.advance([0], 1)
    token = 2 * TINY.num_layers * TINY.d_model * 8
    assert cache.token_bytes == token
    assert cache.peak_stored_bytes == 9 * token and cache.stored_bytes == 4 * token
    assert cache.peak_bytes == 3 * cache.block_bytes


def test_bad_prompts_budgets_and_caches_are_one_clear_error():
    from perflab.implementations.decode import ContiguousKVCache, generate, make_cache

    torch.manual_seed(0)
    model = TransformerLM(
        ModelConfig(
            "d", d_model=16, d_ff=32, num_layers=1, num_heads=2, vocab_size=20, context_length=12
        )
    ).double()
    with pytest.raises(ValueError, match="prompts must be a non-empty list of non-empty lists"):
        generate(model, torch.tensor([[1, 2]]), 2)
    with pytest.raises(ValueError, match="max_new_tokens must be an integer"):
        generate(model, [[1, 2]], "4")
    with pytest.raises(ValueError, match="num_blocks must be a positive integer or None"):
        make_cache(model, "paged", [[1, 2]], 2, num_blocks=0)
    used = ContiguousKVCache(model, 1, 12)
    generate(model, [[1, 2]], 2, cache=used)
    with pytest.raises(ValueError, match="was used already"):
        generate(model, [[1, 2]], 2, cache=used)
    with pytest.raises(
        ValueError, match="holds 1 sequences of 4 tokens; these prompts need 1 of 5"
    ):
        generate(model, [[1, 2, 3, 4, 5]], 0, cache=ContiguousKVCache(model, 1, 4))
