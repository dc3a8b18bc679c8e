"""What a run tells wandb (ssgd.utils.wandb_run): name, group, tags, the logged config, the summaries."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from conftest import make_cfg
from ssgd.config import to_plain
from ssgd.utils import wandb_run

CHOICES = {"model": "fnn3", "dataset": "mnist_embedded", "compressor": "topk", "cluster": "local",
           "optimizer": "sgd", "schedule": "multistep", "recipe": None}


def plain(*overrides: str) -> dict:
    return to_plain(make_cfg(*overrides))


def test_name_and_group_come_from_the_composed_choices_and_the_group_has_no_seed():
    cfg = plain("compressor=topk", "seed=3")
    name, group = wandb_run.labels(cfg, CHOICES, ["compressor=topk", "seed=3"])
    assert name == "topk-fnn3-mnist_embedded-local-s3" and group == "topk-fnn3-mnist_embedded-local"
    other_seed, same_group = wandb_run.labels(plain("compressor=topk", "seed=4"), CHOICES, ["compressor=topk", "seed=4"])
    assert same_group == group and other_seed != name


def test_settings_that_change_the_result_separate_the_groups_bookkeeping_does_not():
    cfg = plain("compressor=topk", "compressor.density=0.01", "optimizer.lr=0.05")
    overrides = ["compressor=topk", "compressor.density=0.01", "optimizer.lr=0.05", "wandb.mode=offline",
                 "trainer.progress=false", "hydra.run.dir=/x", "threads=2", "backend=mpi", "seed=1"]
    _, group = wandb_run.labels(cfg, CHOICES, overrides)
    assert group == "topk-fnn3-mnist_embedded-local-density=0.01-lr=0.05"
    _, base = wandb_run.labels(cfg, CHOICES, ["compressor=topk"])
    assert base != group


def test_same_last_key_segment_keeps_the_full_key_and_long_groups_stay_within_wandbs_limit():
    cfg = plain()
    _, group = wandb_run.labels(cfg, CHOICES, ["optimizer.lr=0.1", "+model.lr=0.2"])
    assert "optimizer.lr=0.1" in group and "model.lr=0.2" in group
    _, long = wandb_run.labels(cfg, CHOICES, [f"model.k{i}={'x' * 20}" for i in range(10)])
    assert len(long) <= wandb_run.MAX_GROUP
    _, long2 = wandb_run.labels(cfg, CHOICES, [f"model.k{i}={'y' * 20}" for i in range(10)])
    assert long2 != long


def test_labels_fall_back_to_the_targets_without_hydra_choices():
    name, _ = wandb_run.labels(plain(), {}, [])
    assert name == "gtopk-fnn3-mnist_embedded-local-s1"


def test_init_kwargs_log_the_whole_config_nested_plus_the_choices_and_the_overrides():
    cfg = plain("compressor=topk", "backend=mpi", "wandb.tags=[paper]")
    kw = wandb_run.init_kwargs(cfg, CHOICES, ["compressor=topk"])
    assert kw["config"]["cfg"] == cfg and kw["config"]["overrides"] == ["compressor=topk"]
    assert {k: kw["config"][k] for k in CHOICES} == CHOICES
    assert kw["tags"] == ["mpi", "cpu", "paper"] and kw["job_type"] == "train"
    named = wandb_run.init_kwargs(plain("wandb.name=mine", "wandb.group=g"), CHOICES, [])
    assert (named["name"], named["group"]) == ("mine", "g")


def test_a_sweep_setting_a_group_choice_cannot_replace_the_composed_node():
    """wandb's agent merges {"compressor": "topk", "compressor.density": 0.01} into the run config and locks
    those keys (wandb_run.py: Run.__init__, Config.merge_locked): a top-level key equal to the choice and
    the composed node under `cfg` survive that merge unchanged."""
    cfg = plain("compressor=topk", "compressor.density=0.01")
    logged = wandb_run.init_kwargs(cfg, CHOICES, ["compressor=topk", "compressor.density=0.01"])["config"]
    merged = {**logged, **{"compressor": "topk", "compressor.density": 0.01}}     # what merge_locked does here
    assert merged["cfg"]["compressor"] == cfg["compressor"]
    assert merged["cfg"]["compressor"]["compress"]["_target_"] == "ssgd.compress.topk.TopK"
    assert merged["cfg"]["compressor"]["density"] == 0.01 and merged["compressor"] == logged["compressor"]


def test_hydra_context_reads_the_saved_hydra_config(tmp_path):
    assert wandb_run.hydra_context(tmp_path) == ({}, [])
    (tmp_path / ".hydra").mkdir()
    OmegaConf.save(OmegaConf.create({"hydra": {"runtime": {"choices": {"compressor": "topk", "hydra/launcher": "basic"}},
                                               "overrides": {"task": ["compressor=topk", "seed=2"]}}}),
                   tmp_path / ".hydra" / "hydra.yaml")
    assert wandb_run.hydra_context(tmp_path) == ({"compressor": "topk"}, ["compressor=topk", "seed=2"])


def test_final_values_do_not_overwrite_the_defined_summaries():
    out = wandb_run.final_summary({"val/acc": 0.9, "val/ppl": 80.0, "steps": 3, "throughput/target": 1.0})
    assert out == {"final/val/acc": 0.9, "final/val/ppl": 80.0, "steps": 3, "final/throughput/target": 1.0}



@pytest.mark.slow      # real wandb: its service is a subprocess
def test_an_offline_run_leaves_a_readable_config_and_summary(tmp_path, monkeypatch):
    """Real wandb, offline: after close, files/config.yaml and files/wandb-summary.json hold what was logged."""
    import json as _json

    import yaml

    from ssgd.utils.metrics import MetricWriter

    monkeypatch.setenv("WANDB_SILENT", "true")
    writer = MetricWriter(tmp_path, wandb_mode="offline", config={"lr": 0.1, "cfg": {"seed": 3}})
    writer.log({"step": 1, "val/acc": 0.5})
    writer.log({"step": 2, "val/acc": 0.25})
    writer.summary({"val/acc": 0.25, "steps": 2})
    writer.close()
    (files,) = list((tmp_path / "wandb").glob("offline-run-*/files"))
    config = yaml.safe_load((files / "config.yaml").read_text())
    assert config["lr"] == {"value": 0.1} and config["cfg"] == {"value": {"seed": 3}}
    summary = _json.loads((files / "wandb-summary.json").read_text())
    assert summary["val/acc"] == {"max": 0.5} and summary["final/val/acc"] == 0.25 and summary["steps"] == 2
