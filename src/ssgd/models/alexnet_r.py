"""AlexNet-R: DLBench's small AlexNet for CIFAR-10 (cuda-convnet "layers-18pct" without LRN).

DLBench's real-data AlexNet-R (Shi, Wang, Xu, Chu, arXiv:1608.07249; hclhkbu/dlbench). This follows
DLBench's Torch7 definition (`tools/torch/Models/alexnet.lua`), whose LRN layers are commented out:

    conv 5x5 (C -> 32, pad 2) - maxpool 3/2 - ReLU
    conv 5x5 (32 -> 32, pad 2) - ReLU - maxpool 3/2
    conv 5x5 (32 -> 64, pad 2) - ReLU - avgpool 3/2 - linear (64 * h * w -> num_classes)

Torch7 pools with floor rounding: 32 -> 15 -> 7 -> 3, a 576-feature linear layer and 85,098
parameters on 3x32x32 with 10 classes. DLBench's Caffe prototxt (which keeps LRN) pools with
Caffe's ceil rounding: 32 -> 16 -> 8 -> 4, 1,024 features and 89,578 parameters; `ceil_mode=True`
gives that geometry. Weights use PyTorch's default initialisation, not the Gaussian(0, 0.01) of the
Caffe file. No dropout.
"""
from __future__ import annotations

import math

from torch import Tensor, nn

from ssgd.data.base import DataSpec
from ssgd.models.checks import image_shape
from ssgd.errors import BadArgument

MIN_SIDE = 15
"""Smallest H and W: three 3/2 poolings must leave at least 1x1."""


def _pooled(side: int, ceil_mode: bool) -> int:
    """Side after one 3x3 stride-2 pooling without padding (PyTorch's rule in both modes)."""
    rounding = math.ceil if ceil_mode else math.floor
    out = rounding((side - 3) / 2) + 1
    return out - 1 if ceil_mode and (out - 1) * 2 >= side else out  # last window must start inside


class AlexNetR(nn.Module):
    """DLBench AlexNet-R. Input float32 [B, C, H, W] -> logits float32 [B, num_classes]."""

    def __init__(self, in_channels: int, height: int, width: int, num_classes: int,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 5, padding=2), nn.MaxPool2d(3, 2, ceil_mode=ceil_mode), nn.ReLU(),
            nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=ceil_mode),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.AvgPool2d(3, 2, ceil_mode=ceil_mode),
        )
        h, w = height, width
        for _ in range(3):
            h, w = _pooled(h, ceil_mode), _pooled(w, ceil_mode)
        self.fc = nn.Linear(64 * h * w, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """x: float32 [B, C, H, W] -> float32 [B, num_classes]."""
        return self.fc(self.features(x).flatten(1))


def alexnet_r(spec: DataSpec, ceil_mode: bool = False) -> nn.Module:
    """DLBench AlexNet-R: 85,098 parameters on 3x32x32 with 10 classes (89,578 with ceil_mode=True).

    Raises ConfigError unless spec is image data of shape (C, H, W) with H, W >= 15.
    """
    channels, height, width = image_shape(spec, "alexnet_r", MIN_SIDE, "CIFAR-10: 3x32x32")
    if not isinstance(ceil_mode, bool):
        raise BadArgument("ceil_mode", ceil_mode, "must be true or false")
    return AlexNetR(channels, height, width, spec.num_classes, ceil_mode)
