"""Real Penn Treebank (PTB) word-level language-model data from the user's local text files.

Layout: `ptb.train.txt` and `ptb.valid.txt` (Mikolov's preprocessed PTB: the `data/` folder of
`simple-examples.tgz`), in `data_dir/` itself or in `data_dir/simple-examples/data/`. Each line is
one sentence of space-separated words, already lower-cased, with rare words replaced by `<unk>`
and numbers by `N`; the vocabulary is 10,000 words including `<eos>`.

Reading follows the gTop-k code's `ptb_reader.py` (after TensorFlow's PTB tutorial): every line ends
with an `<eos>` token, the vocabulary is the training file's words sorted by decreasing count, ties
broken alphabetically (so ids are deterministic and frequent words get small ids), and each file
becomes one token stream. Differences, on purpose: a validation word that is not in the vocabulary
maps to `<unk>` (the gTop-k reader drops it; PTB's valid file has none), and a last line without a
final newline still gets its `<eos>`.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import torch
from torch import Tensor

from ssgd.data.base import DataSpec, TensorData
from ssgd.errors import ConfigError

TRAIN_FILE = "ptb.train.txt"
VALID_FILE = "ptb.valid.txt"
SUBDIR = Path("simple-examples") / "data"
EOS = "<eos>"
UNK = "<unk>"


def read_words(path: str | os.PathLike[str]) -> list[str]:
    """The words of a UTF-8 text file, line by line, each line followed by `<eos>`.

    Lines are split at "\\n" only (a final newline does not start an extra line) and words at any
    whitespace; an empty line contributes just `<eos>`. Raises ConfigError naming the file if it
    cannot be read or decoded.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"dataset=ptb: cannot read '{path}' ({err.strerror})") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"dataset=ptb: '{path}' is not UTF-8 text ({err.reason} at byte {err.start})") from err
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    words: list[str] = []
    for line in lines:
        words += line.split()
        words.append(EOS)
    return words


def build_vocab(words: list[str]) -> list[str]:
    """Distinct words sorted by decreasing count, ties alphabetically: entry i is the word of id i."""
    counts = Counter(words)
    return sorted(counts, key=lambda word: (-counts[word], word))


def to_ids(words: list[str], word_to_id: dict[str, int], path: Path) -> Tensor:
    """int64 [len(words)] ids; words missing from `word_to_id` become `<unk>` (ConfigError without it)."""
    unk = word_to_id.get(UNK)
    ids = []
    for word in words:
        index = word_to_id.get(word, unk)
        if index is None:
            raise ConfigError(f"dataset=ptb: '{path}' has the word {word!r}, which the training file lacks, and "
                              f"the training file has no {UNK} to map it to")
        ids.append(index)
    return torch.tensor(ids, dtype=torch.int64)


def to_windows(stream: Tensor, seq_len: int, path: Path) -> tuple[Tensor, Tensor]:
    """Cut int64 [L] into n = (L - 1) // seq_len windows of seq_len + 1 tokens at stride seq_len.

    Window i is w = stream[i * seq_len : (i + 1) * seq_len + 1], x = w[:-1], y = w[1:]: consecutive
    windows share one token, so every token but the first is a target exactly once (as the gTop-k
    code's `TrainDataset`; `synthetic_tokens` uses stride seq_len + 1 instead). The last
    (L - 1) % seq_len targets are dropped. Returns x, y int64 [n, seq_len], contiguous.
    """
    n = (stream.numel() - 1) // seq_len
    if n < 1:
        raise ConfigError(f"dataset=ptb: '{path}' has {stream.numel()} tokens, fewer than dataset.seq_len + 1 = "
                          f"{seq_len + 1}")
    x = stream[: n * seq_len].view(n, seq_len).clone()
    y = stream[1: n * seq_len + 1].view(n, seq_len).clone()
    return x, y


def _find_folder(data_dir: Path) -> Path | None:
    for folder in (data_dir, data_dir / SUBDIR):
        if (folder / TRAIN_FILE).is_file() and (folder / VALID_FILE).is_file():
            return folder
    return None


def ptb(data_dir: str | os.PathLike[str] = "data/ptb", seq_len: int = 35) -> TensorData:
    """PTB from local text files: train = ptb.train.txt, val = ptb.valid.txt, as windows of seq_len.

    Returns x, y int64 [N, seq_len] with ids in [0, V), y the next token of each x position, and
    spec DataSpec("tokens", (seq_len,), V, "ptb") with V the training vocabulary size (10,000 on PTB).
    Models start every window from a zero state: no hidden state is carried between windows, unlike
    the gTop-k code, which carries it across the batches of one epoch.
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ConfigError(f"dataset.seq_len={seq_len!r}: must be an int >= 1")
    root = Path(data_dir).expanduser()
    folder = _find_folder(root)
    if folder is None:
        raise ConfigError(
            f"dataset=ptb: no PTB text files in '{root}' or '{root / SUBDIR}' (expected {TRAIN_FILE} and "
            f"{VALID_FILE}, one sentence of space-separated words per line); extract the data/ folder of "
            f"Mikolov's simple-examples.tgz yourself and set dataset.data_dir, this project never downloads"
        )
    train_path, valid_path = folder / TRAIN_FILE, folder / VALID_FILE
    train_words = read_words(train_path)
    vocab = build_vocab(train_words)
    if len(vocab) < 2:
        raise ConfigError(f"dataset=ptb: '{train_path}' has a vocabulary of {len(vocab)} word(s); expected >= 2")
    word_to_id = {word: i for i, word in enumerate(vocab)}
    x_train, y_train = to_windows(to_ids(train_words, word_to_id, train_path), seq_len, train_path)
    x_val, y_val = to_windows(to_ids(read_words(valid_path), word_to_id, valid_path), seq_len, valid_path)
    return TensorData(DataSpec("tokens", (seq_len,), len(vocab), "ptb"), x_train, y_train, x_val, y_val)
