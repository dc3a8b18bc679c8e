"""FNN-3: the papers' fully connected network (784-200-200-10 with ReLU on MNIST), adapted to the input."""
from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor, nn

from ssgd.data.base import DataSpec
from ssgd.errors import BadArgument, ConfigError
from ssgd.models.dropout import GenDropout


class FNN3(nn.Module):
    """Multilayer perceptron: flatten -> [Linear -> ReLU -> (GenDropout)] per hidden width -> Linear.

    in_features = prod(spec.input_shape), out_features = spec.num_classes. With the defaults on
    MNIST (1x28x28, 10 classes) it has 199,210 parameters, as the gTop-k code's `fcn5net`.

    Args:
        spec: an image spec.
        hidden: the hidden widths, each a positive int; at least one.
        dropout: probability in [0, 1); 0 adds no dropout modules.

    Input float32 [B, *spec.input_shape] -> logits float32 [B, num_classes].
    """

    def __init__(self, spec: DataSpec, hidden: Sequence[int] = (200, 200), dropout: float = 0.0) -> None:
        super().__init__()
        if spec.kind != "image":
            raise ConfigError(
                f"model=fnn3 needs an image dataset, but dataset {spec.name or '?'} has kind "
                f"'{spec.kind}'; use model=lstm for token data"
            )
        widths = tuple(hidden)
        if not widths or any(isinstance(w, bool) or not isinstance(w, int) or w <= 0 for w in widths):
            raise BadArgument("hidden", list(widths), "must be a non-empty list of positive ints")
        layers: list[nn.Module] = [nn.Flatten()]
        width_in = math.prod(spec.input_shape)
        for width in widths:
            layers += [nn.Linear(width_in, width), nn.ReLU()]
            if dropout > 0:
                layers.append(GenDropout(dropout))
            width_in = width
        layers.append(nn.Linear(width_in, spec.num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """x: float32 [B, *input_shape] -> float32 [B, num_classes]."""
        return self.net(x)
