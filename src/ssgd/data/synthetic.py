"""Synthetic, learnable data in the shapes of the papers' datasets (CIFAR-10, PTB) that no package ships.

Everything is drawn from a `torch.Generator` seeded from `seed`: the same arguments give the same
tensors. That generator is seeded from (seed, loader name) through `derive_seed`, never with `seed`
itself: with a plain `manual_seed(seed)` the class means would come from the same stream as a model
initialised after `torch.manual_seed(seed)`, correlating weights and data (an initial loss of 8
instead of ln 10).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ssgd.data.base import DataSpec, TensorData
from ssgd.errors import ConfigError
from ssgd.utils.seeding import rank_generator

SUCCESSOR_PROBS = (0.4, 0.3, 0.2, 0.1)
"""Probabilities of each token's likely successors in the synthetic token chain."""
JUMP_PROB = 0.1
"""Chance that the next token ignores the chain and is drawn from the Zipf unigram distribution."""


def _check_int(key: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"dataset.{key}={value!r}: must be an int >= {low}")
    return value


def synthetic_images_size(shape: Sequence[int] = (1, 28, 28), num_classes: int = 10, n_train: int = 2048,
                          n_val: int = 512, noise: float = 1.0, seed: int = 0,
                          name: str = "synthetic") -> tuple[int, DataSpec]:
    """(training samples, spec) of `synthetic_images` with these arguments, checked, without drawing any."""
    dims = tuple(shape)
    if not dims or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in dims):
        raise ConfigError(f"dataset.shape={list(dims)}: must be a non-empty list of positive ints")
    _check_int("num_classes", num_classes, 2)
    _check_int("n_train", n_train, 1)
    _check_int("n_val", n_val, 1)
    if not (isinstance(noise, (int, float)) and math.isfinite(noise) and noise >= 0):
        raise ConfigError(f"dataset.noise={noise!r}: must be a finite number >= 0")
    return n_train, DataSpec("image", dims, num_classes, name)


def synthetic_images(shape: Sequence[int] = (1, 28, 28), num_classes: int = 10, n_train: int = 2048,
                     n_val: int = 512, noise: float = 1.0, seed: int = 0, name: str = "synthetic") -> TensorData:
    """Class-conditional Gaussian images: x = mean[y] + noise * N(0, I).

    Each class has one mean image with i.i.d. N(0, 1) pixels, so the per-pixel signal-to-noise ratio
    is 1 / noise and two class means are about sqrt(2 * prod(shape)) / noise noise-units apart: a
    linear model separates the default (784 pixels, noise 1) almost perfectly within a few steps;
    raise `noise` for a harder task. Labels are balanced (counts differ by at most one) and shuffled.

    Returns x float32 [N, *shape], y int64 [N] for train (n_train) and val (n_val);
    spec = DataSpec("image", tuple(shape), num_classes, name).
    """
    _, spec = synthetic_images_size(shape, num_classes, n_train, n_val, noise, seed, name)
    dims = spec.input_shape
    gen = rank_generator(seed, 0, "data/synthetic_images")
    means = torch.randn((num_classes, *dims), generator=gen)

    def draw(n: int) -> tuple[Tensor, Tensor]:
        y = (torch.arange(n) % num_classes)[torch.randperm(n, generator=gen)]
        x = means[y] + noise * torch.randn((n, *dims), generator=gen)
        return x, y

    x_train, y_train = draw(n_train)
    x_val, y_val = draw(n_val)
    return TensorData(spec, x_train, y_train, x_val, y_val)


def _markov_stream(vocab_size: int, length: int, gen: torch.Generator) -> Tensor:
    """int64 [length] token stream from a sparse first-order Markov chain.

    Token frequencies follow Zipf's law (weight 1 / (id + 1)), as word ids sorted by frequency do.
    Each token has len(SUCCESSOR_PROBS) successors drawn from that law; the next token is the j-th
    successor with probability (1 - JUMP_PROB) * SUCCESSOR_PROBS[j], or a fresh Zipf draw with
    probability JUMP_PROB (which keeps the chain from locking into a small cycle).
    """
    zipf = 1.0 / torch.arange(1, vocab_size + 1, dtype=torch.float64)
    k = len(SUCCESSOR_PROBS)
    successors = torch.multinomial(zipf, vocab_size * k, replacement=True, generator=gen).view(vocab_size, k)
    choice = torch.multinomial(torch.tensor(SUCCESSOR_PROBS), length, replacement=True, generator=gen)
    jump = torch.rand(length, generator=gen) < JUMP_PROB
    fresh = torch.multinomial(zipf, length, replacement=True, generator=gen)
    table, choice_l, jump_l, fresh_l = successors.tolist(), choice.tolist(), jump.tolist(), fresh.tolist()
    stream = [fresh_l[0]]
    for i in range(1, length):  # sequential by nature; Python ints keep this ~20x faster than torch ops
        stream.append(fresh_l[i] if jump_l[i] else table[stream[-1]][choice_l[i]])
    return torch.tensor(stream, dtype=torch.int64)


def synthetic_tokens_size(vocab_size: int = 10000, seq_len: int = 35, n_train: int = 1024, n_val: int = 256,
                          seed: int = 0, name: str = "synthetic_ptb") -> tuple[int, DataSpec]:
    """(training windows, spec) of `synthetic_tokens` with these arguments, checked, without drawing any."""
    _check_int("vocab_size", vocab_size, 2)
    _check_int("seq_len", seq_len, 1)
    _check_int("n_train", n_train, 1)
    _check_int("n_val", n_val, 1)
    return n_train, DataSpec("tokens", (seq_len,), vocab_size, name)


def synthetic_tokens(vocab_size: int = 10000, seq_len: int = 35, n_train: int = 1024, n_val: int = 256,
                     seed: int = 0, name: str = "synthetic_ptb") -> TensorData:
    """PTB-shaped language-model data: one Markov-chain token stream cut into windows.

    The stream (see `_markov_stream`) is cut into n_train + n_val non-overlapping windows w of
    seq_len + 1 tokens, x = w[:-1], y = w[1:]; the first n_train windows are train, the rest val.

    Returns x, y int64 [N, seq_len] with ids in [0, vocab_size);
    spec = DataSpec("tokens", (seq_len,), vocab_size, name).
    """
    _, spec = synthetic_tokens_size(vocab_size, seq_len, n_train, n_val, seed, name)
    gen = rank_generator(seed, 0, "data/synthetic_tokens")
    windows = _markov_stream(vocab_size, (n_train + n_val) * (seq_len + 1), gen).view(-1, seq_len + 1)
    x, y = windows[:, :-1], windows[:, 1:]
    return TensorData(spec, x[:n_train].contiguous(), y[:n_train].contiguous(),
                      x[n_train:].contiguous(), y[n_train:].contiguous())
