"""Train with data-parallel (sparse) S-SGD on P workers, from a checkout: the app of `ssgd.run.app`
(installed, the same app is `ssgd-train` and `python -m ssgd`).

    python src/train.py                                   # FNN-3, embedded MNIST, gTop-k, 4 workers
    python src/train.py compressor=gtopk cluster=32x1gbe  # 32 virtual workers, 1 GbE modelled
    python src/train.py -m compressor=dense,topk,gtopk    # Hydra multirun (also glob(*), choice(...), range(...))
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run from a checkout without installing

from ssgd.run.app import cli  # noqa: E402

if __name__ == "__main__":
    cli()
