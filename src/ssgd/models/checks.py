"""Shape checks shared by the image models: one clear ConfigError when a dataset does not fit."""
from __future__ import annotations

from ssgd.data.base import DataSpec
from ssgd.errors import ConfigError


def image_shape(spec: DataSpec, model: str, min_side: int = 1, example: str = "") -> tuple[int, int, int]:
    """(C, H, W) of `spec`, or ConfigError naming `model=<model>` unless it is image data with
    H, W >= min_side. `example` names a dataset shape that fits (e.g. "CIFAR-10: 3x32x32")."""
    shape = tuple(spec.input_shape)
    if spec.kind != "image" or len(shape) != 3 or shape[0] < 1 or min(shape[1:]) < min_side:
        hint = f" ({example})" if example else ""
        raise ConfigError(f"model={model} needs image data of shape (C, H, W) with H, W >= {min_side}{hint}; "
                          f"dataset {spec.name or '?'} has kind '{spec.kind}' and input_shape {shape}")
    return shape  # type: ignore[return-value]
