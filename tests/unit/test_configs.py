"""Every config file of every group composes and trains 2 steps; every compressor x cluster works."""
import json

import pytest

from conftest import CONF, group_options, make_cfg, train

# a dataset each model can consume (model/dataset mismatches are tested in test_errors.py)
MODEL_DATA = {"fnn3": "mnist_embedded", "cnn": "synthetic_mnist", "resnet20": "synthetic_cifar10",
              "lstm": "synthetic_ptb"}
DATA_MODEL = {"mnist_embedded": "fnn3", "synthetic_mnist": "cnn", "synthetic_cifar10": "resnet20",
              "synthetic_ptb": "lstm"}


def test_every_group_is_covered():
    assert set(group_options("model")) == set(MODEL_DATA)
    assert set(group_options("dataset")) - {"mnist"} == set(DATA_MODEL)   # mnist: local files, test_errors.py
    for group in ("model", "dataset", "compressor", "cluster"):
        for name in group_options(group):
            make_cfg(f"{group}={name}")   # composes


@pytest.mark.parametrize("model", sorted(MODEL_DATA))
def test_each_model_trains_two_steps(model, tmp_path):
    summary, _ = train(tmp_path, f"model={model}", f"dataset={MODEL_DATA[model]}", "cluster.world_size=2",
                       "trainer.max_steps=2", "trainer.batch_size=4")
    assert summary["steps"] == 2 and 0.0 <= summary["val/acc"] <= 1.0


@pytest.mark.parametrize("dataset", sorted(DATA_MODEL))
def test_each_dataset_trains_two_steps(dataset, tmp_path):
    summary, _ = train(tmp_path, f"dataset={dataset}", f"model={DATA_MODEL[dataset]}", "cluster.world_size=2",
                       "trainer.max_steps=2", "trainer.batch_size=4")
    assert summary["steps"] == 2


@pytest.mark.parametrize("cluster", group_options("cluster"))
@pytest.mark.parametrize("compressor", group_options("compressor"))
def test_every_compressor_on_every_cluster(compressor, cluster, tmp_path):
    summary, _ = train(tmp_path, f"compressor={compressor}", f"cluster={cluster}", "trainer.max_steps=2",
                       "trainer.batch_size=8")
    cfg = make_cfg(f"cluster={cluster}")
    assert summary["world_size"] == cfg.cluster.world_size
    assert summary["time/comm_model_s"] > 0 or cfg.cluster.world_size == 1
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_rows = [row for row in lines if "train/loss" in row]
    assert [row["step"] for row in train_rows] == [1, 2]
    for key in ("train/loss", "time/compute_s", "time/compress_s", "time/comm_s", "time/comm_model_s",
                "comm/bytes_sent", "density/achieved", "residual/norm"):
        assert key in train_rows[0], key


def test_cluster_files_cite_their_constants():
    for path in sorted((CONF / "cluster").glob("*.yaml")):
        text = path.read_text()
        assert "alpha" in text and "beta" in text and "#" in text.split("network:")[1], path.name
