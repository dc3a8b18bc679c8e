"""torchvision's AlexNet and ResNet-50 for ImageNet-shaped input, as the gTop-k code uses them.

The gTop-k code builds `torchvision.models.alexnet()` and a ResNet-50 (hclhkbu/gtopkssgd
`dl_trainer.py` `create_net`). These
factories build torchvision's definitions with random weights (`weights=None`: nothing is ever
downloaded) and then swap every stock `nn.Dropout` for a `GenDropout` of the same p, since the
trainer refuses dropout that draws from torch's global RNG. torchvision is imported inside the
factories: importing it costs about 2 s, which every `import ssgd.models` (and every MPI rank) would pay.
"""
from __future__ import annotations

from torch import nn

from ssgd.data.base import DataSpec
from ssgd.errors import ConfigError
from ssgd.models.dropout import GenDropout

ALEXNET_MIN_SIDE = 63
"""Smallest H and W for AlexNet: conv 11/4 and three 3/2 max poolings must leave at least 1x1."""
RESNET50_MIN_SIDE = 32
"""Smallest H and W for ResNet-50 (stride 32 in all): layer4 then sees 1x1."""


def swap_dropout(module: nn.Module) -> nn.Module:
    """Replace, in place, every module of type exactly `nn.Dropout` by `GenDropout` with the same p.

    Returns `module` itself. Values are unchanged: on the CPU with the same RNG state `GenDropout`
    draws the same mask as `nn.Dropout` (see `ssgd.models.dropout`). Other dropout kinds
    (`nn.Dropout2d`'s channel masks, `nn.AlphaDropout`) have no `GenDropout` equivalent and are left
    in place, where `has_global_dropout` still reports them.
    """
    for parent in module.modules():
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, GenDropout(child.p))
    return module


def _check_rgb(name: str, spec: DataSpec, min_side: int) -> None:
    shape = tuple(spec.input_shape)
    if spec.kind != "image" or len(shape) != 3 or shape[0] != 3 or min(shape[1:]) < min_side:
        raise ConfigError(
            f"model={name} needs RGB image data of shape (3, H, W) with H, W >= {min_side} "
            f"(ImageNet: 3x224x224); dataset {spec.name or '?'} has kind '{spec.kind}' and input_shape {shape}"
        )


def alexnet(spec: DataSpec) -> nn.Module:
    """torchvision's AlexNet (the one-GPU variant of Krizhevsky 2014) with spec.num_classes outputs.

    61,100,840 parameters for 1000 classes. Its `AdaptiveAvgPool2d((6, 6))` makes the count the
    same for any input of at least 63x63; 3x224x224 is the size it was designed for. The two
    dropouts (p = 0.5) of the classifier are `GenDropout`s.

    Input float32 [B, 3, H, W] -> logits float32 [B, num_classes]. Raises ConfigError on other specs.
    """
    _check_rgb("alexnet", spec, ALEXNET_MIN_SIDE)
    import torchvision.models

    return swap_dropout(torchvision.models.alexnet(weights=None, num_classes=spec.num_classes))


def resnet50(spec: DataSpec) -> nn.Module:
    """torchvision's ResNet-50 (He et al. 2016, bottleneck v1.5: stride 2 in the 3x3 conv).

    25,557,032 parameters for 1000 classes, for any input of at least 32x32 (global average
    pooling); 3x224x224 is the ImageNet size. No dropout. The gTop-k code's own
    `models/imagenet_resnet.py` is the same network (same stride placement, same count, the same
    He-normal fan-out init of the convolutions) except a fixed `AvgPool2d(7)`, which accepts 224x224 only.

    Input float32 [B, 3, H, W] -> logits float32 [B, num_classes]. Raises ConfigError on other specs.
    """
    _check_rgb("resnet50", spec, RESNET50_MIN_SIDE)
    import torchvision.models

    return swap_dropout(torchvision.models.resnet50(weights=None, num_classes=spec.num_classes))
