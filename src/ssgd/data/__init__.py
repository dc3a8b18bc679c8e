"""Datasets as tensors: embedded real MNIST, synthetic images and tokens, and the user's local MNIST,
CIFAR-10, PTB and ImageNet files.

Each loader returns a `TensorData` (train and val tensors plus their `DataSpec`); nothing here
downloads, and nothing here knows about workers. All are held in memory except ImageNet, whose
images are decoded when indexed (`ssgd.data.imagenet.ImageFiles`).
"""
from ssgd.data.base import DataSpec, TensorData
from ssgd.data.cifar10 import cifar10
from ssgd.data.embedded import mnist_embedded
from ssgd.data.imagenet import ImageFiles, imagenet
from ssgd.data.mnist import mnist
from ssgd.data.ptb import ptb
from ssgd.data.synthetic import synthetic_images, synthetic_tokens

__all__ = ["DataSpec", "TensorData", "mnist_embedded", "synthetic_images", "synthetic_tokens", "mnist",
           "cifar10", "ptb", "imagenet", "ImageFiles"]
