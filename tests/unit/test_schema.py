"""The configuration schema (src/ssgd/config.py): one place for every key, type and default; unknown
keys, wrong types and bad values refused with one line naming the key, in-process (no subprocess).

`tests/integration/test_entry.py` checks once, end to end, that such a line reaches stderr with exit 2."""
from __future__ import annotations

import dataclasses

import pytest
import yaml
from omegaconf import OmegaConf

from conftest import CONF, group_options, make_cfg
from ssgd.run import build
from ssgd import config
from ssgd.errors import ConfigError
from ssgd.run.hydra_errors import COMPOSITION_ERRORS, one_line_error


def problem(*overrides: str) -> str:
    """The one line a user would see for these overrides (composition or checks), or '' if accepted."""
    try:
        cfg = make_cfg(*overrides)
        spec = build.spec(cfg)
        data = build.dataset(spec.cfg)
        build.model(spec.cfg, data, spec.config.seed)
    except ConfigError as err:
        return str(err)
    except COMPOSITION_ERRORS as err:
        return one_line_error(err)
    return ""


# override -> a piece of the one line the user must see
BAD = {
    "compressor=foo": "compressor=foo: no such option; allowed: dense, dense16, dgcsampling",
    "optimizer=sgdd": "optimizer=sgdd: no such option; allowed: adam, adamw, sgd",
    "+foo=1": "foo: unknown key; allowed: backend",
    "+trainer.foo=1": "trainer.foo: unknown key",
    "trainer.foo=1": "trainer.foo: unknown key; allowed: batch_size",
    "cluster.network.gamma=1": "cluster.network.gamma: unknown key; allowed: alpha, beta",
    "optimizer.lrr=1": "optimizer.lrr: unknown key (`python src/train.py --cfg job` prints every key",
    "+capture.bogus=1": "capture.bogus: unknown key",
    "+optimizer.lrr=0.5": "optimizer.lrr: unknown key for torch.optim.SGD; allowed: dampening",
    "+model.hiden=[10]": "model.hiden: unknown key for ssgd.models.FNN3",
    "+compressor.compress.k=5": "compressor.compress.k: unknown key",
    "trainer.batch_size=abc": "trainer.batch_size=abc: Value 'abc' of type 'str' could not be converted to Integer",
    "trainer.batch_size=0": "trainer.batch_size=0: must be an integer >= 1",
    "trainer.epochs=-1": "trainer.epochs=-1",
    "trainer.grad_clip=0": "trainer.grad_clip=0.0: must be a finite number > 0",
    "trainer.checkpoint_every=-2": "trainer.checkpoint_every=-2",
    "compressor.density=1.5": "compressor.density=1.5: must be a number in (0, 1]",
    "compressor.density=0": "compressor.density=0.0",
    "compressor.density_warmup=[0.5,2]": "compressor.density_warmup[1]=2.0",
    "cluster.world_size=0": "cluster.world_size=0: must be an integer >= 1",
    "cluster.world_size=-3": "cluster.world_size=-3",
    "cluster.network.alpha=-1": "cluster.network.alpha=-1.0: must be a finite number >= 0",
    "cluster.network.beta=-1e-9": "cluster.network.beta",
    "cluster.network.beta=inf": "cluster.network.beta=inf",
    "optimizer.lr=-1": "optimizer.lr=-1: must be a finite number > 0",
    "optimizer.lr=nan": "optimizer.lr=nan",
    "optimizer.momentum=-0.5": "optimizer: Invalid momentum value: -0.5",
    "schedule.warmup_start=-1": "schedule.warmup_start=-1",
    "schedule.warmup_epochs=-2": "schedule.warmup_epochs=-2",
    "schedule.gamma=0": "schedule.gamma=0",
    "schedule.gamma=1e300 schedule.milestones=[1,2]": "schedule.gamma=1e+300",
    "backend=xyz": "backend=xyz: Invalid value 'xyz', expected one of [thread, mpi, torch]",
    "wandb.mode=sometimes": "wandb.mode=sometimes: Invalid value 'sometimes', expected one of [disabled, offline, online]",
    "dist.emit=script": "dist.emit=script: Invalid value 'script', expected one of [command, sbatch]",
    "device=tpu": "device='tpu': must be cpu, cuda or cuda:N",
    "threads=0": "threads=0: must be an integer >= 1",
    "seed=-1": "seed=-1",
    "capture.every=0": "capture.every=0",
    "capture.u_steps=[0]": "capture.u_steps[]=0",
    "capture.u_steps=5": "capture.u_steps=5: Invalid value assigned",
    "model=lstm": "model=lstm needs a token dataset",
    "dataset=synthetic_ptb": "model=fnn3 needs an image dataset",
    "dataset=mnist": "data/mnist",
    "model.dropout=1.5": "model.dropout",
}


@pytest.mark.parametrize("overrides", sorted(BAD))
def test_bad_input_is_one_line_naming_the_key(overrides):
    line = problem(*overrides.split())
    assert BAD[overrides] in line, line
    assert "\n" not in line


def test_the_defaults_and_every_group_option_are_accepted():
    assert problem() == ""
    for group in ("compressor", "cluster", "optimizer", "schedule"):
        for option in group_options(group):
            assert problem(f"{group}={option}") == "", (group, option)


def test_every_schema_key_has_one_default_and_config_yaml_sets_none_of_them():
    """Defaults live in the schema only: config.yaml lists groups, never values of schema keys."""
    text = yaml.safe_load((CONF / "config.yaml").read_text())
    assert set(text) == {"defaults", "hydra"}
    cfg = make_cfg()
    for f in dataclasses.fields(config.TrainConfig):
        assert OmegaConf.select(cfg, f"trainer.{f.name}") == config.default_of(config.TrainConfig, f.name) \
            or f.name in {"log_every", "progress"}       # tests' FAST overrides


def test_typed_config_objects_are_the_schema_dataclasses():
    spec = build.spec(make_cfg("trainer.batch_size=7", "capture.stats=true"))
    assert isinstance(spec.config.trainer, config.TrainConfig) and spec.config.trainer.batch_size == 7
    assert isinstance(spec.config.capture, config.CaptureConfig) and spec.config.capture.enabled
    assert spec.config.backend is config.Backend.thread


def test_a_saved_worker_config_loads_back_typed_and_checked(tmp_path):
    cfg = make_cfg("backend=mpi", "compressor=topk")
    data = config.to_plain(cfg)
    assert data["backend"] == "mpi" and data["debug"]["fail_mode"] == "raise"
    loaded = config.load(data)
    assert loaded.backend is config.Backend.mpi and loaded.compressor.name == "topk"
    with pytest.raises(ConfigError, match=r"trainer\.bogus"):
        config.load({**data, "trainer": {**data["trainer"], "bogus": 1}})


def test_learning_rate_schedule_comes_from_its_target():
    spec = build.spec(make_cfg("schedule.warmup_epochs=2", "optimizer.lr=0.4", "cluster=8x1gbe"))
    assert spec.schedule(0.0) == pytest.approx(0.05) and spec.schedule(2.0) == pytest.approx(0.4)
    opt = spec.make_optimizer([__import__("torch").nn.Parameter(__import__("torch").zeros(2))])
    assert type(opt).__name__ == "SGD" and opt.param_groups[0]["momentum"] == 0.9
    adamw = build.spec(make_cfg("optimizer=adamw")).make_optimizer([__import__("torch").nn.Parameter(__import__("torch").zeros(2))])
    assert type(adamw).__name__ == "AdamW"


def test_docs_list_every_schema_key():
    """docs/configuration.md documents each key of the schema (a new key must be documented)."""
    text = (CONF.parent / "docs" / "configuration.md").read_text()

    def keys(cls, prefix=""):
        for f in dataclasses.fields(cls):
            sub = getattr(config, f.type, None) if isinstance(f.type, str) else None
            if sub is not None and dataclasses.is_dataclass(sub):
                yield from keys(sub, f"{prefix}{f.name}.")
            elif f.name not in ("model", "dataset", "optimizer", "schedule"):
                yield prefix + f.name

    missing = [k for k in keys(config.Config) if f"`{k}`" not in text]
    assert not missing, f"document these keys in docs/configuration.md: {missing}"


@pytest.mark.parametrize("overrides, line", [
    ("model.hidden=[200,0]", "model.hidden=[200, 0]: must be a non-empty list of positive ints"),
    ("model=resnet20 dataset=synthetic_cifar10 model.shortcut=C", "model.shortcut='C'"),
    ("model=lstm dataset=synthetic_ptb model.layers=0", "model.layers=0"),
])
def test_a_constructor_error_is_prefixed_with_its_node(overrides, line):
    assert problem(*overrides.split()) .startswith(line)
