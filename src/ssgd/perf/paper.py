"""The gTop-k paper's measurements that the shipped profiles are calibrated to and the scaling
figures compare against (data only).

Paper: Shi, Wang, Zhao, Tang, Wang, Huang, Chu, "A Distributed Synchronous SGD Algorithm with Global
Top-k Sparsification for Low Bandwidth Networks", ICDCS 2019 (arXiv:1901.04359): 32 machines on
1 Gbps Ethernet, one GPU each (a P102-100, by a code comment of the released code).

The numbers are the ones hard-coded in the authors' plotting script hclhkbu/gtopkssgd
scripts/icdcs2019/communication.py: `realdata_speedup` (throughput of dense, Top-k and gTop-k S-SGD
at P = 1, 4, 8, 16, 32 in samples/s, per worker as the efficiency v_P / v_1 the script plots implies;
the P = 1 entry is shared by the three schemes) and
`plot_breakdown` (computation / compression / communication seconds of one gTop-k iteration at 32
workers). Whether they are exactly the published figures' data cannot be checked without the
authors' logs.
"""
from __future__ import annotations

from dataclasses import dataclass

P_SCALING = (4, 8, 16, 32)                     # worker counts of `realdata_speedup` after P = 1
SCALING_SCHEMES = ("dense", "topk", "gtopk")   # its three curves: Dense (Horovod), Top-k, gTop-k S-SGD
TOPK_SECONDS_PER_NLOGN = 2.18896957e-10        # `topk_perf_model` s (hclhkbu/GaussianK-SGD utils.py, "P102-100")


@dataclass(frozen=True)
class PaperModel:
    """One model of the paper's scaling figure.

    batch_size: samples per worker of the scaling runs (VGG-16 128, the others 32).
    v1: the P = 1 per-worker throughput, samples/s.
    dense, topk, gtopk: per-worker throughput at P = 4, 8, 16, 32 (`P_SCALING`).
    breakdown_s: computation, compression, communication seconds of one 32-worker gTop-k iteration
    (`plot_breakdown`), None where the script has none; breakdown_samples: its batch per worker.
    """

    name: str
    title: str
    batch_size: int
    v1: float
    dense: tuple[float, float, float, float]
    topk: tuple[float, float, float, float]
    gtopk: tuple[float, float, float, float]
    breakdown_s: tuple[float, float, float] | None = None
    breakdown_samples: int | None = None

    def throughput(self, scheme: str) -> tuple[float, ...]:
        """Per-worker samples/s of `scheme` (one of SCALING_SCHEMES) at P_SCALING."""
        if scheme not in SCALING_SCHEMES:
            raise ValueError(f"scheme={scheme!r}: the paper's scaling data has {', '.join(SCALING_SCHEMES)}")
        return getattr(self, scheme)

    def seconds(self, scheme: str) -> tuple[float, ...]:
        """Seconds per iteration, batch_size / throughput, at P_SCALING."""
        return tuple(self.batch_size / v for v in self.throughput(scheme))

    def efficiency(self, scheme: str) -> tuple[float, ...]:
        """Scaling efficiency v_P / v_1 at P_SCALING, as `realdata_speedup` plots it."""
        return tuple(v / self.v1 for v in self.throughput(scheme))


PAPER_MODELS = (
    PaperModel("vgg16", "VGG-16 (CIFAR-10)", 128, 1317.333, (104.2, 92.56, 39.48, 12.6),
               (110.576, 109.9, 97.865, 63.002), (131.06, 130.551, 126.434, 123.2), (0.1395, 0.0914, 0.8118), 128),
    PaperModel("resnet20", "ResNet-20 (CIFAR-10)", 32, 920.632, (821.7, 705.2, 520.4, 287.9),
               (908.837, 752.985, 737.594, 696.029), (916.26, 868.73, 808.5, 789.3), (0.1460, 0.00162, 0.0247), 128),
    PaperModel("alexnet", "AlexNet (ImageNet)", 32, 173.469, (14.01, 12.118, 4.936, 1.234),
               (14.238, 13.865, 13.352, 9.236), (16.536, 16.446, 16.359, 15.777), (0.2572, 0.3838, 3.3630), 64),
    PaperModel("resnet50", "ResNet-50 (ImageNet)", 32, 52.873, (39.002, 36.989, 23.176, 10.721),
               (37.729, 35.703, 34.495, 30.583), (39.795, 39.713, 39.06, 39.119), (4.882, 0.154, 1.424), 256),
    PaperModel("lstm_ptb", "LSTM-PTB", 32, 392.0, (12.657, 8.7, 4.1, 2.1), (19.9, 18.6, 14.8, 5.4),
               (17.8, 17.6, 15.1, 10.8)),
)


def paper_model(name: str) -> PaperModel | None:
    """The PAPER_MODELS entry called `name`, or None."""
    return next((pm for pm in PAPER_MODELS if pm.name == name), None)
