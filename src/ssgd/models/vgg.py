"""VGG-16 for CIFAR-shaped input: the `VGG('VGG16')` of the gTop-k code (`models/vgg.py`).

As in the gTop-k code (Shi et al., ICDCS 2019): the conv + batch-norm stacks of VGG-16 (Simonyan &
Zisserman, configuration D) and then ONE linear layer 512 -> 10, instead of the three-layer
4096-wide classifier of the ImageNet VGG-16.
"""
from __future__ import annotations

from torch import Tensor, nn

from ssgd.data.base import DataSpec
from ssgd.models.checks import image_shape

VGG16_LAYERS: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                       512, 512, 512, "M", 512, 512, 512, "M")
"""Configuration D: output channels of each 3x3 conv (padding 1), "M" = 2x2 max pooling (stride 2)."""
MIN_SIDE = 32
"""Smallest H and W: five 2x2 poolings must leave at least 1x1."""


class VGG(nn.Module):
    """[conv3x3 (bias) - BN - ReLU]* with max pooling per `layers`, flatten, one linear layer.

    On CIFAR-10 (3x32x32, 10 classes) VGG-16 has 14,728,266 parameters (about 14.73M): 14,714,688
    in the 13 convolutions (weights + biases: the gTop-k code keeps the conv bias although batch
    norm follows), 8,448 in the 13 batch norms (weight + bias; the running statistics are buffers,
    not counted) and 5,130 in the 512 -> 10 layer. The gTop-k code ends `features` with
    `AvgPool2d(kernel_size=1, stride=1)`, the identity, left out here: same parameters, same outputs.

    The input adapts to the spec: C input channels, and for H, W >= 32 the linear layer reads
    512 * (H // 32) * (W // 32) features (512 on 32x32, as in the gTop-k code).

    Input float32 [B, C, H, W] -> logits float32 [B, num_classes].
    """

    def __init__(self, in_channels: int, height: int, width: int, num_classes: int,
                 layers: tuple[int | str, ...] = VGG16_LAYERS) -> None:
        super().__init__()
        modules: list[nn.Module] = []
        channels, pools = in_channels, 0
        for item in layers:
            if item == "M":
                modules.append(nn.MaxPool2d(kernel_size=2, stride=2))
                pools += 1
            else:
                modules += [nn.Conv2d(channels, int(item), kernel_size=3, padding=1),
                            nn.BatchNorm2d(int(item)), nn.ReLU(inplace=True)]
                channels = int(item)
        self.features = nn.Sequential(*modules)
        flat = channels * (height >> pools) * (width >> pools)
        self.fc = nn.Linear(flat, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        """x: float32 [B, C, H, W] -> float32 [B, num_classes]."""
        return self.fc(self.features(x).flatten(1))


def vgg16(spec: DataSpec) -> nn.Module:
    """VGG-16, CIFAR variant (hclhkbu/gtopkssgd `models/vgg.py`): 14,728,266 parameters on 3x32x32
    with 10 classes.

    Raises ConfigError unless spec is image data of shape (C, H, W) with H, W >= 32.
    """
    channels, height, width = image_shape(spec, "vgg16", MIN_SIDE, "CIFAR-10: 3x32x32")
    return VGG(channels, height, width, spec.num_classes)
