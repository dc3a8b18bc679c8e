"""SmallCNN: the LeNet-style `mnistnet` of the Gaussian-k / gTop-k code, adapted to the input shape."""
from __future__ import annotations

from torch import Tensor, nn

from ssgd.data.base import DataSpec
from ssgd.models.checks import image_shape
from ssgd.models.dropout import GenDropout

MIN_SIDE = 16
"""Smallest H and W: 5x5 conv -> pool 2 -> 5x5 conv -> pool 2 must leave at least 1x1."""


def _features_side(side: int) -> int:
    """Side length after conv5 -> pool2 -> conv5 -> pool2 (valid convolutions, floor pooling)."""
    return ((side - 4) // 2 - 4) // 2


class SmallCNN(nn.Module):
    """conv 5x5 (C->20) - ReLU - maxpool 2 - conv 5x5 (20->50) - ReLU - maxpool 2 - fc 500 - ReLU
    - [GenDropout] - fc num_classes.

    On MNIST (1x28x28, 10 classes) it has 431,080 parameters. The fc input size follows the image:
    50 * h * w with h = ((H - 4) // 2 - 4) // 2, so any (C, H, W) with H, W >= 16 works.

    Input float32 [B, C, H, W] -> logits float32 [B, num_classes].
    """

    def __init__(self, spec: DataSpec, dropout: float = 0.0) -> None:
        super().__init__()
        channels, height, width = image_shape(spec, "cnn", MIN_SIDE)
        flat = 50 * _features_side(height) * _features_side(width)
        self.features = nn.Sequential(
            nn.Conv2d(channels, 20, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(20, 50, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        head: list[nn.Module] = [nn.Linear(flat, 500), nn.ReLU()]
        if dropout > 0:
            head.append(GenDropout(dropout))
        head.append(nn.Linear(500, spec.num_classes))
        self.classifier = nn.Sequential(*head)

    def forward(self, x: Tensor) -> Tensor:
        """x: float32 [B, C, H, W] -> float32 [B, num_classes]."""
        return self.classifier(self.features(x))
