"""Every config file of every group composes and trains 2 steps; every compressor x cluster works."""
import json

import pytest

from conftest import CONF, group_options, make_cfg, train

# a dataset each model can consume, with overrides that keep 2 steps + evaluation fast
# (model/dataset mismatches are tested in test_errors.py)
SMALL_VAL = ["dataset.n_train=64", "dataset.n_val=8"]
MODEL_DATA = {"fnn3": ("mnist_embedded", []), "cnn": ("synthetic_mnist", []),
              "resnet20": ("synthetic_cifar10", []), "resnet56": ("synthetic_cifar10", SMALL_VAL),
              "vgg16": ("synthetic_cifar10", SMALL_VAL), "alexnet_r": ("synthetic_cifar10", SMALL_VAL),
              "lstm": ("synthetic_ptb", []), "lstm_ptb": ("synthetic_ptb", SMALL_VAL),
              "alexnet": ("synthetic_imagenet64", SMALL_VAL), "resnet50": ("synthetic_imagenet64", SMALL_VAL),
              "replay": ("synthetic_cifar10", [])}
DATA_MODEL = {"mnist_embedded": "fnn3", "synthetic_mnist": "cnn", "synthetic_cifar10": "resnet20",
              "synthetic_ptb": "lstm", "synthetic_imagenet64": "resnet20"}
LOCAL_FILES = {"mnist", "cifar10", "ptb", "imagenet"}   # real data from local files: test_paper_data.py


def test_every_group_is_covered():
    assert set(group_options("model")) == set(MODEL_DATA)
    assert set(group_options("dataset")) - LOCAL_FILES == set(DATA_MODEL)
    for group in ("model", "dataset", "compressor", "cluster", "optimizer", "schedule"):
        for name in group_options(group):
            make_cfg(f"{group}={name}")   # composes


HEAVY = {"alexnet", "lstm_ptb", "resnet50"}     # 5-20 s each: the paper-size models train under `slow`


def _two_steps(model: str, tmp_path) -> dict:
    dataset, extra = MODEL_DATA[model]
    summary, _ = train(tmp_path, f"model={model}", f"dataset={dataset}", "cluster.world_size=2",
                       "trainer.max_steps=2", "trainer.batch_size=4", *extra)
    assert summary["steps"] == 2 and 0.0 <= summary["val/acc"] <= 1.0
    return summary


@pytest.mark.parametrize("model", sorted(set(MODEL_DATA) - HEAVY))
def test_each_model_trains_two_steps(model, tmp_path):
    _two_steps(model, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(HEAVY))
def test_each_paper_size_model_trains_two_steps(model, tmp_path):
    _two_steps(model, tmp_path)


# a dataset whose model's test above is this very run (same model, dataset and overrides) is trained there
TRAINED_BY_A_MODEL_TEST = {d for m, (d, extra) in MODEL_DATA.items() if DATA_MODEL.get(d) == m and not extra
                           and m not in HEAVY}


def test_every_dataset_trains_here_or_in_its_models_test():
    assert set(DATA_MODEL) - TRAINED_BY_A_MODEL_TEST == {"synthetic_imagenet64"}
    assert TRAINED_BY_A_MODEL_TEST <= set(DATA_MODEL)


@pytest.mark.parametrize("dataset", sorted(set(DATA_MODEL) - TRAINED_BY_A_MODEL_TEST))
def test_each_dataset_trains_two_steps(dataset, tmp_path):
    summary, _ = train(tmp_path, f"dataset={dataset}", f"model={DATA_MODEL[dataset]}", "cluster.world_size=2",
                       "trainer.max_steps=2", "trainer.batch_size=4")
    assert summary["steps"] == 2


@pytest.mark.parametrize("compressor", group_options("compressor"))
def test_every_compressor_trains_and_logs(compressor, tmp_path):
    summary, _ = train(tmp_path, f"compressor={compressor}", "cluster=8x1gbe", "trainer.max_steps=2",
                       "trainer.batch_size=8")
    assert summary["world_size"] == 8 and summary["compressor"] == compressor
    assert summary["target/comm_s"] > 0
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_rows = [row for row in lines if "train/loss" in row]
    assert [row["step"] for row in train_rows] == [1, 2]
    for key in ("train/loss", "time/compute_s", "time/compress_s", "time/comm_s", "target/comm_s",
                "comm/bytes_sent", "density/achieved", "residual/norm"):
        assert key in train_rows[0], key


@pytest.mark.parametrize("cluster", group_options("cluster"))
def test_every_cluster_sets_the_world_and_the_network(cluster):
    """A cluster file changes only P and alpha/beta (trainings on each compressor run above)."""
    from ssgd.run import build

    cfg = make_cfg(f"cluster={cluster}")
    spec = build.spec(cfg)
    assert spec.world_size == cfg.cluster.world_size >= 1
    assert (spec.network.alpha, spec.network.beta) == (cfg.cluster.network.alpha, cfg.cluster.network.beta)
    P, d = spec.world_size, 199_210
    seconds = spec.scheme.collective.model_seconds(spec.network, P, d, [199] * P)
    assert seconds > 0 or P == 1


@pytest.mark.parametrize("optimizer", group_options("optimizer"))
def test_every_optimizer_trains_two_steps(optimizer, tmp_path):
    summary, params = train(tmp_path, f"optimizer={optimizer}", "trainer.max_steps=2", "trainer.batch_size=8")
    assert summary["steps"] == 2 and all(bool(p.isfinite().all()) for p in params)


def test_cluster_files_cite_their_constants():
    for path in sorted((CONF / "cluster").glob("*.yaml")):
        text = path.read_text()
        assert "alpha" in text and "beta" in text and "#" in text.split("network:")[1], path.name


# (lr, batch per worker, epochs, milestones) of each paper pair: the released exp_configs of
# hclhkbu/gtopkssgd and hclhkbu/GaussianK-SGD
PAPER_SETTING = {("cifar10", "resnet20"): (0.1, 32, 141, [81, 122, 155]),
                 ("cifar10", "vgg16"): (0.1, 32, 141, [81, 122, 155]),
                 ("cifar10", "resnet56"): (0.1, 128, 141, [81, 122, 155]),
                 ("imagenet", "alexnet"): (0.01, 256, 95, [30, 60, 80]),
                 ("imagenet", "resnet50"): (0.01, 64, 95, [30, 60, 80]),
                 ("ptb", "lstm_ptb"): (1.0, 20, 50, [63, 63, 80]),
                 ("mnist", "fnn3"): (0.01, 128, 30, []), ("mnist", "cnn"): (0.01, 128, 80, [])}


def test_every_recipe_names_a_dataset_model_pair():
    pairs = {tuple(name.split("_", 1)) for name in group_options("recipe")}
    assert pairs == set(PAPER_SETTING)
    assert all(d in group_options("dataset") and m in group_options("model") for d, m in pairs)


@pytest.mark.parametrize("dataset, model", sorted(PAPER_SETTING))
def test_choosing_a_paper_pair_gets_the_paper_setting(dataset, model):
    cfg = make_cfg(f"model={model}", f"dataset={dataset}")
    lr, batch, epochs, milestones = PAPER_SETTING[(dataset, model)]
    assert (cfg.optimizer.lr, cfg.trainer.batch_size, cfg.trainer.epochs, list(cfg.schedule.milestones)) == \
        (lr, batch, epochs, milestones)
    assert make_cfg(f"model={model}", f"dataset={dataset}", "trainer.epochs=3").trainer.epochs == 3   # overrides win


def test_laptop_data_keeps_the_global_defaults():
    base = make_cfg()
    for overrides in (["model=resnet20", "dataset=synthetic_cifar10"], []):
        cfg = make_cfg(*overrides)
        assert (cfg.trainer.epochs, cfg.optimizer.lr, cfg.trainer.batch_size) == \
            (base.trainer.epochs, base.optimizer.lr, base.trainer.batch_size) == (30, 0.1, 32)
        assert cfg.optimizer.weight_decay == base.optimizer.weight_decay == 1e-3
