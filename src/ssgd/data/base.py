"""What a dataset is to the rest of the package: a shape description and four tensors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import Tensor


@dataclass(frozen=True)
class DataSpec:
    """Shape of one sample, as models need to know it.

    kind: "image" -> x is float32 [N, *input_shape], y is int64 [N] class labels in [0, num_classes).
          "tokens" -> x is int64 [N, seq_len] token ids, y is int64 [N, seq_len] next-token ids;
          num_classes is then the vocabulary size and input_shape == (seq_len,).
    """

    kind: Literal["image", "tokens"]
    input_shape: tuple[int, ...]
    num_classes: int
    name: str = ""


@dataclass(frozen=True)
class TensorData:
    """A whole dataset held in memory: train and validation splits plus their spec."""

    spec: DataSpec
    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor
