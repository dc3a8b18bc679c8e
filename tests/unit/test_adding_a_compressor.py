"""docs/adding-a-compressor.md's worked example, run as written: its Python file becomes the module
`ssgd.compress.hardthreshold`, its YAML a compressor option in a temporary config directory, and the
scheme trains, conserves u = sent + residual, refuses bad settings, and is modelled by ssgd.perf."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import ssgd.compress
from conftest import CONF, FAST, doc_block
from ssgd.run import build
from ssgd.errors import ConfigError

DOC = CONF.parent / "docs" / "adding-a-compressor.md"
MODULE = "ssgd.compress.hardthreshold"


def block_after(label: str) -> str:
    return doc_block(DOC, label)


@pytest.fixture
def example(tmp_path: Path):
    """The doc's two files in place: the module imported, the YAML in a config directory."""
    module = types.ModuleType(MODULE)
    module.__file__ = str(tmp_path / "hardthreshold.py")
    exec(compile(block_after("src/ssgd/compress/hardthreshold.py"), module.__file__, "exec"), module.__dict__)
    sys.modules[MODULE] = module
    ssgd.compress.hardthreshold = module
    (tmp_path / "conf" / "compressor").mkdir(parents=True)
    (tmp_path / "conf" / "compressor" / "hardthreshold.yaml").write_text(block_after("conf/compressor/hardthreshold.yaml"))
    yield tmp_path / "conf"
    del sys.modules[MODULE]
    del ssgd.compress.hardthreshold


def cfg_with(conf: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", [f"hydra.searchpath=[file://{conf}]", *FAST, "compressor=hardthreshold", *overrides])


def test_the_example_trains_and_sends_a_variable_count(example, tmp_path):
    trainer, writer, world = build.trainer(cfg_with(example, "trainer.max_steps=6", "trainer.batch_size=16"),
                                           tmp_path / "run")
    try:
        summary = trainer.fit()
    finally:
        world.close()
        writer.close()
    assert summary["compressor"] == "hardthreshold" and summary["steps"] == 6
    assert 0 < summary["density/achieved"] < 1


def test_the_example_conserves_the_gradient(example):
    spec = build.spec(cfg_with(example))
    d, gen = 5000, torch.Generator().manual_seed(0)
    memory, compressor = spec.scheme.make_memory(d), spec.scheme.make_compressor(0)
    for _ in range(3):
        g = torch.randn(d, generator=gen) * 0.01
        u = memory.compensate(g)
        before = u.double().clone()
        payload = compressor.compress(u, 0.001)
        sent = payload.to_dense().double()
        memory.update(payload)
        assert torch.equal(before, sent + memory.e.double())          # u == sent + residual, exactly


def test_the_example_refuses_bad_settings_in_one_line(example):
    with pytest.raises(ConfigError, match=r"^compressor\.compress\.treshold: unknown key .*allowed: generator, threshold$"):
        build.spec(cfg_with(example, "+compressor.compress.treshold=1"))
    with pytest.raises(ConfigError, match=r"^compressor\.compress\.threshold=-1: must be > 0$"):
        build.spec(cfg_with(example, "compressor.compress.threshold=-1"))


def test_the_example_is_modelled_by_the_iteration_model(example):
    from ssgd.tools.scheme_costs import selection_cost

    yaml = OmegaConf.load(example / "compressor" / "hardthreshold.yaml")
    assert selection_cost(yaml, "hardthreshold") == "linear"
