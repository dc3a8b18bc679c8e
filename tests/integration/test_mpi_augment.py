"""CIFAR-10 augmentation under backend=mpi draws the crops of backend=thread: virtual rank r and MPI rank r
read the same generator (seed, rank, epoch, step), so the two backends end with the same parameters."""
from pathlib import Path

import pytest
import torch

from tests.integration.test_mpi import train
from tests.unit.test_paper_data import write_cifar

pytestmark = pytest.mark.slow

RUN = ["model=fnn3", "compressor=topk", "cluster.world_size=3", "trainer.batch_size=4", "trainer.epochs=1",
       "trainer.checkpoint_every=1", "seed=5"]   # 5 steps of 3 x 4 augmented images


def test_thread_and_mpi_draw_the_same_crops(tmp_path: Path):
    write_cifar(tmp_path / "cifar", per_batch=12)
    data = ["dataset=cifar10", f"dataset.data_dir='{tmp_path / 'cifar'}'"]
    params = {}
    for name, extra in [("thread", ["backend=thread"]), ("mpi", ["backend=mpi"]),
                        ("plain", ["backend=thread", "dataset.augment=false"])]:
        proc = train(tmp_path / name, *data, *RUN, *extra)
        assert proc.returncode == 0, proc.stderr[-3000:]
        params[name] = torch.load(tmp_path / name / "checkpoint.pt", weights_only=False)["shared"]
    assert params["thread"]["step"] == params["mpi"]["step"] == 5
    assert all(torch.equal(a, b) for a, b in zip(params["thread"]["params"], params["mpi"]["params"]))
    assert not all(torch.equal(a, b) for a, b in zip(params["thread"]["params"], params["plain"]["params"]))
