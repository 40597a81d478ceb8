"""The data path of a training step on real text (notebook 09).

The corpus is the shipped ``data/text/tinyshakespeare.txt`` (public domain, with its note);
the tokenizer maps each UTF-8 byte to its id (vocabulary 256), so any text round-trips. A batch
is ``batch_size`` windows of ``seq_len + 1`` tokens at random offsets (seeded): inputs and
their next-token targets. Ways to get batches to the model, each an iterator of (inputs,
targets) on the CPU:

- ``"tokenise every step"``: the corpus is encoded again for every batch (the mistake a
  training-loop review finds: re-tokenising every batch);
- ``"pre-tokenised"``: encoded once into a tensor, windows cut by indexing in the main process;
- ``"DataLoader, n workers"``: the same windows from ``torch.utils.data.DataLoader`` with n
  worker processes preparing batches while the main process trains.

- ``"DataLoader, 2 workers, pinned"``: batches in page-locked host memory, which lets the
  ``non_blocking`` host-to-GPU copy (``TrainingStep.set_batch``) overlap with compute: a GPU
  effect, measured only where there is a GPU (``CPU_DATA_PATHS`` leaves it out).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from perflab.measure.device import synchronize
from perflab.measure.paths import REPO_ROOT

CORPUS = REPO_ROOT / "data" / "text" / "tinyshakespeare.txt"
Batch = tuple[torch.Tensor, torch.Tensor]


class ByteTokenizer:
    """Text <-> UTF-8 byte ids (0-255); decoding replaces an incomplete multi-byte tail."""

    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")


def read_corpus(path: str | Path = CORPUS) -> str:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no corpus at {path}; the workbook ships data/text/ (see its note)"
        )
    return path.read_text(encoding="utf-8")


def _offsets(n_tokens: int, seq_len: int, count: int, seed: int) -> torch.Tensor:
    """``count`` window starts drawn from every valid one, 0 .. n_tokens - (seq_len + 1)."""
    if n_tokens < seq_len + 1:
        raise ValueError(
            f"the corpus has {n_tokens} tokens, fewer than a window of {seq_len + 1} (seq_len + 1)"
        )
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_tokens - seq_len, (count,), generator=generator)  # high exclusive


def _windows(tokens: torch.Tensor, starts: torch.Tensor, seq_len: int) -> Batch:
    window = tokens[starts[:, None] + torch.arange(seq_len + 1)].long()
    return window[:, :-1], window[:, 1:]


class Windows(Dataset):
    """Window ``i`` of a pre-tokenised corpus: (inputs, targets), ``seq_len`` tokens each."""

    def __init__(self, tokens: torch.Tensor, seq_len: int, count: int, seed: int = 0):
        self.tokens, self.seq_len = tokens, seq_len
        self.starts = _offsets(len(tokens), seq_len, count, seed)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> Batch:
        inputs, targets = _windows(self.tokens, self.starts[index : index + 1], self.seq_len)
        return inputs[0], targets[0]


def tokenise(text: str, tokenizer: ByteTokenizer | None = None) -> torch.Tensor:
    """The whole text as a uint8 tensor of byte ids."""
    return torch.tensor((tokenizer or ByteTokenizer()).encode(text), dtype=torch.uint8)


def batches(
    mode: str, text: str, batch_size: int, seq_len: int, steps: int, *, seed: int = 0
) -> Iterator[Batch]:
    """``steps`` batches by ``mode`` (``DATA_PATHS``): the same windows whatever the mode."""
    if mode not in DATA_PATHS:
        raise ValueError(f"unknown data path {mode!r}; valid: {', '.join(DATA_PATHS)}")
    count = batch_size * steps
    if mode == "tokenise every step":
        starts = _offsets(len(text.encode("utf-8")), seq_len, count, seed)
        for step in range(steps):
            tokens = tokenise(text)  # again, every batch
            yield _windows(tokens, starts[step * batch_size : (step + 1) * batch_size], seq_len)
        return
    tokens = tokenise(text)
    if mode == "pre-tokenised":
        starts = _offsets(len(tokens), seq_len, count, seed)
        for step in range(steps):
            yield _windows(tokens, starts[step * batch_size : (step + 1) * batch_size], seq_len)
        return
    workers, pinned = DATA_PATHS[mode]
    loader = DataLoader(
        Windows(tokens, seq_len, count, seed),
        batch_size=batch_size,
        num_workers=workers,
        pin_memory=pinned,
    )
    yield from loader


#: Data paths: DataLoader worker processes (None: no DataLoader) and pinned host memory.
DATA_PATHS = {
    "tokenise every step": (None, False),
    "pre-tokenised": (None, False),
    "DataLoader, 1 worker": (1, False),
    "DataLoader, 2 workers": (2, False),
    "DataLoader, 2 workers, pinned": (2, True),  # a GPU effect: with non_blocking copies
}
CPU_DATA_PATHS = tuple(mode for mode, (_, pinned) in DATA_PATHS.items() if not pinned)


def data_path_steps(
    run, text: str, rounds: int, *, modes=CPU_DATA_PATHS, warmup: int = 1
) -> dict[str, list[float]]:
    """Seconds of one training step of ``run`` (a ``TrainingStep``) fed by each data path:
    getting the next batch, moving it to the device and the step itself, against
    ``"synthetic"``, the same step on the random batch it already holds. The modes take turns
    in every round, each round starting at the next mode, so a slow moment of the machine falls
    on all of them; each DataLoader's workers start before the first round."""
    batch_size, seq_len = run.inputs.shape
    if run.model.config.vocab_size < ByteTokenizer.vocab_size:
        raise ValueError(
            f"byte ids need a vocabulary of at least 256, got {run.model.config.vocab_size}"
        )
    synthetic = (run.inputs, run.targets)
    iterators = {
        mode: batches(mode, text, batch_size, seq_len, rounds + warmup + 1) for mode in modes
    }
    for iterator in iterators.values():
        next(iterator)  # start-up (workers) outside the rounds
    names = ("synthetic", *modes)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(warmup + rounds):
        shift = round_ % len(names)  # each round starts elsewhere: no mode always follows another
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            run.set_batch(*(synthetic if name == "synthetic" else next(iterators[name])))
            run.step()
            synchronize(run.device)
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
    run.set_batch(*synthetic)
    return times


def loader_rates(
    text: str,
    batch_size: int,
    seq_len: int,
    batches_per_round: int,
    rounds: int,
    modes=CPU_DATA_PATHS,
) -> dict[str, list[float]]:
    """Seconds per batch of each data path alone (no training), the modes taking turns for
    ``rounds`` rounds of ``batches_per_round`` batches each (workers started beforehand)."""
    iterators = {
        mode: batches(mode, text, batch_size, seq_len, 1 + rounds * batches_per_round)
        for mode in modes
    }
    for iterator in iterators.values():
        next(iterator)
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(rounds):
        for mode, iterator in iterators.items():
            start = time.perf_counter()
            for _ in itertools.islice(iterator, batches_per_round):
                pass
            times[mode].append((time.perf_counter() - start) / batches_per_round)
    return times
