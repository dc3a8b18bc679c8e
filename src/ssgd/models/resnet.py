"""CIFAR ResNets (He et al. 2016, Sec. 4.2), as the `CifarResNet` of the gTop-k code.

Three stages of n basic blocks with widths 16 / 32 / 64, stride 2 at the first block of stages 2 and
3, batch norm, global average pooling and one linear layer: depth 6n + 2. The default shortcut is
option A (parameter-free: stride-2 subsampling, then zero channels appended), as in the paper and the
gTop-k code; ResNet-20 then has 269,722 parameters on 3x32x32 with 10 classes. Option B (1x1 conv +
batch norm projection where the shape changes) adds 2,752 parameters: 272,474.
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ssgd.data.base import DataSpec
from ssgd.errors import BadArgument, ConfigError

SHORTCUTS = ("A", "B")


class ShortcutA(nn.Module):
    """Option-A shortcut: x[:, :, ::stride, ::stride] followed by zero channels up to `out_channels`."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.extra = out_channels - in_channels
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        """x: [B, C_in, H, W] -> [B, C_out, ceil(H / stride), ceil(W / stride)]; no parameters."""
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra))


def _shortcut_b(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False), nn.BatchNorm2d(out_channels)
    )


class BasicBlock(nn.Module):
    """conv3x3 - BN - ReLU - conv3x3 - BN, plus the shortcut, then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, shortcut: str) -> None:
        super().__init__()
        self.conv_a = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn_a = nn.BatchNorm2d(out_channels)
        self.conv_b = nn.Conv2d(out_channels, out_channels, 3, stride=1, padding=1, bias=False)
        self.bn_b = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            make = ShortcutA if shortcut == "A" else _shortcut_b
            self.shortcut = make(in_channels, out_channels, stride)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn_a(self.conv_a(x)))
        out = self.bn_b(self.conv_b(out))
        return F.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet of depth 6n + 2 for small images. Input float32 [B, C, H, W] -> logits [B, num_classes]."""

    def __init__(self, in_channels: int, num_classes: int, blocks_per_stage: int, shortcut: str = "A") -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        stages: list[nn.Module] = []
        width_in = 16
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for i in range(blocks_per_stage):
                blocks.append(BasicBlock(width_in, width, stride if i == 0 else 1, shortcut))
                width_in = width
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.bn(self.conv(x)))
        x = self.pool(self.stages(x)).flatten(1)
        return self.fc(x)


def _build(name: str, blocks_per_stage: int, spec: DataSpec, shortcut: str) -> CifarResNet:
    shape = tuple(spec.input_shape)
    if spec.kind != "image" or len(shape) != 3 or min(shape) < 1:
        raise ConfigError(
            f"model={name} needs image data of shape (C, H, W); dataset {spec.name or '?'} has kind "
            f"'{spec.kind}' and input_shape {shape}"
        )
    if shortcut not in SHORTCUTS:
        raise BadArgument("shortcut", shortcut, f"must be one of {list(SHORTCUTS)}")
    return CifarResNet(shape[0], spec.num_classes, blocks_per_stage, shortcut)


def resnet20(spec: DataSpec, shortcut: str = "A") -> nn.Module:
    """ResNet-20 (n = 3): 269,722 parameters on 3x32x32 with 10 classes (272,474 with shortcut="B")."""
    return _build("resnet20", 3, spec, shortcut)


def resnet56(spec: DataSpec, shortcut: str = "A") -> nn.Module:
    """ResNet-56 (n = 9): 853,018 parameters on 3x32x32 with 10 classes (about 0.85M)."""
    return _build("resnet56", 9, spec, shortcut)
