"""Datasets as in-memory tensors: embedded real MNIST, synthetic images and tokens, local MNIST files.

Each loader returns a `TensorData` (train and val tensors plus their `DataSpec`); nothing here
downloads, and nothing here knows about workers.
"""
from ssgd.data.base import DataSpec, TensorData
from ssgd.data.embedded import mnist_embedded
from ssgd.data.mnist import mnist
from ssgd.data.synthetic import synthetic_images, synthetic_tokens

__all__ = ["DataSpec", "TensorData", "mnist_embedded", "synthetic_images", "synthetic_tokens", "mnist"]
