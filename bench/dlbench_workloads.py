"""DLBench's workloads as plain data: shapes, batch sizes and pinned parameter counts.

DLBench: Shi, Wang, Xu, Chu, "Benchmarking State-of-the-Art Deep Learning Software Tools",
arXiv:1608.07249; its scripts are in hclhkbu/dlbench.

Imported by the driver (`bench/dlbench.py`) and by every tool's worker, including the Keras worker
that runs in `.venv-tools` without torch: this module imports nothing beyond the standard library.

Parameter counts are "canonical": what every tool's definition must have. PyTorch's `nn.LSTM` keeps
two bias vectors per gate (b_ih and b_hh, whose sum is the one bias of the LSTM equations) where
Keras keeps one; the PyTorch worker therefore reports its count minus the redundant b_hh
(`redundant_lstm_bias`), and the raw count beside it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """One DLBench network on synthetic data of its dataset's shape.

    kind: "image" -> x float32 [B, *input_shape] (channels first), y int64 [B] in [0, classes);
          "tokens" -> x int64 [B, seq_len] in [0, classes), y int64 [B, seq_len] (next tokens).
    """

    key: str
    label: str
    kind: str
    input_shape: tuple[int, ...]
    classes: int
    paper_cpu_batch: int      # DLBench's CPU runs
    paper_batches: tuple[int, ...]   # every size DLBench used for it (real-data runs, per-GPU sizes for FCN-5)
    batch: int                # default here: the largest of the paper's sizes that fits the budget
    params: int               # canonical parameter count (see module docstring)
    definition: str


WORKLOADS: dict[str, Workload] = {w.key: w for w in (
    Workload("fcn5", "FCN-5", "image", (26752,), 26752, 1024, (128, 256, 1024, 2048, 4096), 128, 117_997_696,
             "26752-2048-2048-2048-26752, sigmoid (DLBench ffn26752), synthetic 26,752-class targets"),
    Workload("fcnr", "FCN-R", "image", (1, 28, 28), 10, 1024, (342, 512, 1024, 2048, 4096), 342, 14_205_962,
             "784-2048-4096-1024-10, sigmoid (DLBench ffn5.lua), MNIST-shaped"),
    Workload("alexnet_r", "AlexNet-R", "image", (3, 32, 32), 10, 1024, (86, 128, 256, 512, 1024, 2048), 256, 85_098,
             "cuda-convnet layers-18pct without LRN (ssgd.models.alexnet_r), CIFAR-shaped"),
    Workload("resnet56", "ResNet-56", "image", (3, 32, 32), 10, 128, (11, 16, 32, 64, 128), 32, 853_018,
             "n = 9, option-A shortcuts (ssgd.models.resnet56), CIFAR-shaped"),
    Workload("lstm", "LSTM", "tokens", (32,), 10000, 128, (32, 64, 128, 256, 512, 1024), 32, 6_180_624,
             "2 x LSTM(256), embedding 256, vocabulary 10,000, 32 steps, no dropout (DLBench lstm.py), PTB-shaped"),
)}

LSTM_HIDDEN = 256
LSTM_LAYERS = 2
FCN5_HIDDEN = (2048, 2048, 2048)
FCNR_HIDDEN = (2048, 4096, 1024)
LEARNING_RATE = 0.01
MOMENTUM = 0.9


def redundant_lstm_bias(hidden: int = LSTM_HIDDEN, layers: int = LSTM_LAYERS) -> int:
    """PyTorch's extra LSTM bias (b_hh: 4 * hidden per layer) that Keras folds into its one bias."""
    return 4 * hidden * layers


def dense_params(sizes: tuple[int, ...]) -> int:
    """Parameters of a chain of Linear layers with biases through `sizes` (inputs first)."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
