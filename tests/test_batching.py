"""perflab.lessons.nb09_training_step.batching: the loss in one call equals the loop over examples
(float64), a loop that sums instead of averaging is caught; every sequence lands in exactly one
batch row in both orders, padded only to its batch's longest and ignored by the loss; bucketing pads
less."""

import dataclasses
import statistics

import pytest
import torch

import perflab.lessons.nb09_training_step.batching as batching
from perflab.implementations.model import get_preset
from perflab.lessons.nb09_training_step.batching import (
    IGNORE,
    ORDERS,
    check_bucketing,
    check_loss_batching,
    compare_bucketing,
    compare_loss_batching,
    length_batches,
    padding_share,
    speeches,
)

BYTES = dataclasses.replace(
    get_preset("cpu-tiny"), d_model=32, d_ff=64, num_heads=2, vocab_size=256, context_length=64
)


def _sequences(lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), generator=generator) for n in lengths]


def test_the_loss_in_one_call_equals_the_loop_and_a_summing_loop_is_caught(monkeypatch):
    check = check_loss_batching(5, 7, 11)
    assert check["matches"] and check["dtype"] == "float64" and check["loss_diff"] <= 1e-12
    summing = lambda logits, targets: torch.stack(  # noqa: E731
        [torch.nn.functional.cross_entropy(logits[i], targets[i]) for i in range(len(logits))]
    ).sum()
    monkeypatch.setattr(batching, "loss_loop", summing)
    assert not check_loss_batching(5, 7, 11)["matches"]


def test_the_loss_comparison_names_both_sides():
    result = compare_loss_batching(3, 4, 16, rounds=2, warmup=0)
    assert (result.name_a, result.name_b) == ("loss loop", "one call") and result.rounds == 2
    with pytest.raises(ValueError, match="must be positive"):
        compare_loss_batching(0, 4, 16, rounds=2)


@pytest.mark.parametrize("order", ORDERS)
def test_every_sequence_is_one_row_padded_to_its_batch_and_ignored(order):
    sequences = _sequences([5, 17, 2, 9, 30, 3, 12])
    batches = length_batches(sequences, 3, order, seed=1)
    assert [len(inputs) for inputs, _ in batches] in ([3, 3, 1], [1, 3, 3], [3, 1, 3])
    rows = []
    for inputs, targets in batches:
        real = (targets != IGNORE).sum(dim=1)
        assert inputs.shape[1] == real.max()  # padded to this batch's longest only
        for row, n in enumerate(real.tolist()):
            assert (inputs[row, n:] == 0).all() and (targets[row, n:] == IGNORE).all()
            rows.append(torch.cat([inputs[row, :1], targets[row, :n]]).tolist())
    assert sorted(rows) == sorted(s.tolist() for s in sequences)  # each sequence once, intact


def test_bucketing_pads_less_and_bad_input_is_one_line():
    sequences = _sequences([3, 40, 4, 38, 5, 41, 6, 39])
    shares = {order: padding_share(length_batches(sequences, 2, order)) for order in ORDERS}
    assert shares["bucketed"] < 0.1 < shares["random"]
    with pytest.raises(ValueError, match="unknown order 'sorted'; valid: random, bucketed"):
        length_batches(sequences, 2, "sorted")
    with pytest.raises(ValueError, match="at least 2 tokens"):
        length_batches(_sequences([1, 5]), 2, "random")


def test_bucketed_batches_hold_similar_lengths_in_a_shuffled_order():
    sequences = _sequences(list(range(2, 42)))
    batches = length_batches(sequences, 2, "bucketed", seed=3)
    widths = [inputs.shape[1] for inputs, _ in batches]
    for _, targets in batches:  # two neighbours in length: one token apart
        real = (targets != IGNORE).sum(dim=1)
        assert real.max() - real.min() <= 1
    assert widths != sorted(widths) and widths != sorted(widths, reverse=True)


def test_padding_changes_no_real_tokens_loss_in_float64():
    check = check_bucketing(BYTES, _sequences([3, 20, 7, 33, 2, 15]), 4)
    assert check["matches"], check
    assert check["loss_sum_random"] == pytest.approx(check["loss_sum_one_at_a_time"], rel=1e-12)


def test_speeches_are_cut_and_filtered():
    text = "a\n\nbb\n\n" + "c" * 50 + "\n\n\n\nddd"
    found = speeches(text, 10, min_len=2)
    assert [len(s) for s in found] == [11, 3]  # "a" and "bb" too short; the c's cut to 10 + 1
    assert found[0].dtype == torch.int64
    with pytest.raises(ValueError, match="no speech of at least 6 bytes"):
        speeches("a\n\nbb", 10, min_len=5)


def test_the_bucketing_rows_count_the_same_real_tokens():
    model = batching.build_model(BYTES, seed=0)
    sequences = _sequences([3, 20, 7, 33, 2, 15, 9, 25])
    rows, result = compare_bucketing(model, sequences, 4, rounds=2, warmup=0)
    rows = rows.set_index("order")
    assert (rows["real_tokens"] == sum(len(s) - 1 for s in sequences)).all()
    assert rows.loc["bucketed", "positions"] < rows.loc["random", "positions"]
    # each order's row reads its own side of the comparison (random is a, bucketed b)
    assert rows.loc["random", "median_s"] == statistics.median(result.times_a)
    assert rows.loc["bucketed", "median_s"] == statistics.median(result.times_b)
    assert (result.name_a, result.name_b) == ORDERS
    assert rows["unstable"].dtype == bool  # check-results asks it of every median
