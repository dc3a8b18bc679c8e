"""Plain model factories: each takes the dataset's `DataSpec` and checks that it fits.

No distributed logic lives here. Randomness inside models comes only from `GenDropout`, which draws
from a per-rank generator set with `use_generator`.
"""
from torch import nn

from ssgd.models.alexnet_r import alexnet_r
from ssgd.models.cnn import SmallCNN
from ssgd.models.dropout import GenDropout, has_global_dropout, use_generator
from ssgd.models.imagenet import alexnet, resnet50, swap_dropout
from ssgd.models.lstm import LSTMLM
from ssgd.models.mlp import FNN3
from ssgd.models.replay import Replay
from ssgd.models.resnet import resnet20, resnet56
from ssgd.models.vgg import vgg16


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters d (trainable or not; buffers such as BN statistics excluded)."""
    return sum(p.numel() for p in model.parameters())


__all__ = [
    "FNN3",
    "SmallCNN",
    "resnet20",
    "resnet56",
    "vgg16",
    "alexnet",
    "resnet50",
    "alexnet_r",
    "LSTMLM",
    "Replay",
    "GenDropout",
    "swap_dropout",
    "use_generator",
    "has_global_dropout",
    "count_parameters",
]
