"""Shared fixtures: compose the real conf/ with Hydra's compose API and run small trainings in-process."""
from __future__ import annotations

import copy
import functools
import os
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
os.environ.setdefault("WANDB_SILENT", "true")
# every rank a test starts loads the fault injection of `debug.fail_rank` (ssgd.run.worker.HOOK_ENV)
os.environ.setdefault("SSGD_RANK_HOOK", str(ROOT / "tests" / "rank_faults.py"))

# Small, fast defaults for in-process runs; tests add their own overrides after these.
# The one SimGrid platform of every in-process test (SimGrid builds one per process; ssgd.comm.executors.simgrid_engine):
# 12 hosts, 1 Gbit/s NICs of 25 us, full bisection, CM02 (no TCP correction factors) without cross traffic, so that
# a message alone on its links takes exactly 2 x 25 us + n / 125e6 s. Tests that need another network run it in a
# subprocess.
SIMGRID_TEST_PLATFORM = dict(hosts=12, bandwidth=1e9 / 8, latency=25e-6, tcp=("CM02", 1.0, 1.0, 4194304.0, False))


def simgrid_test_platform():
    """`SIMGRID_TEST_PLATFORM` as a `ssgd.perf.platform.Platform`."""
    from ssgd.perf.platform import Platform, TcpModel
    spec = SIMGRID_TEST_PLATFORM
    return Platform(hosts=spec["hosts"], bandwidth=spec["bandwidth"], latency=spec["latency"], tcp=TcpModel(*spec["tcp"]))

FAST = ["wandb.mode=disabled", "trainer.progress=false", "trainer.log_every=1"]


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def paper_script(name: str):
    """Import paper_figs/<name>.py as a module (the figure scripts import their siblings, e.g. figlib)."""
    import importlib
    import sys

    if str(ROOT / "paper_figs") not in sys.path:
        sys.path.insert(0, str(ROOT / "paper_figs"))
    return importlib.import_module(name)


def make_cfg(*overrides: str) -> DictConfig:
    """The config `python src/train.py <FAST> <overrides>` composes: a fresh copy each call (composing
    the same overrides again gives the same tree, so it is composed once per process)."""
    return copy.deepcopy(_composed(tuple(overrides)))


@functools.lru_cache(maxsize=None)
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[*FAST, *overrides])


def train(tmp_path: Path, *overrides: str) -> tuple[dict, list[torch.Tensor]]:
    """Build and run one training in this process; returns (summary, final parameters)."""
    return fit(make_cfg(*overrides), tmp_path)


def fit(cfg: DictConfig, run_dir: Path) -> tuple[dict, list[torch.Tensor]]:
    """Build and run the training of a composed config in this process; returns (summary, final parameters)."""
    from ssgd.run import build

    trainer, writer, world = build.trainer(cfg, run_dir)
    try:
        summary = trainer.fit()
    finally:
        world.close()
        writer.close()
    return summary, [p.detach().clone() for p in trainer.params]


def doc_block(doc: Path, label: str) -> str:
    """The fenced code block that follows the line "`label`:" in the page `doc` (a recipe's file)."""
    import re

    match = re.search(rf"^`{re.escape(label)}`:\n\n```\w*\n(.*?)^```", doc.read_text(), re.S | re.M)
    assert match, f"{doc.name}: no code block after `{label}`:"
    return match.group(1)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path
