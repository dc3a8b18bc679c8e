"""docs/layout.md's recipes for a model, a dataset and a collective, run as written: each section's two code
blocks become a module of the package and a YAML of its config group, in a temporary config directory, and
nothing else is edited; the table's file counts are the sections' blocks."""
from __future__ import annotations

import importlib
import re
import sys
import types
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from conftest import CONF, FAST, ROOT, fit
from ssgd.comm.executors.thread import run_threads
from ssgd.payload import Dense
from ssgd.perf.alphabeta import AlphaBeta

DOC = ROOT / "docs" / "layout.md"
RUN = ["trainer.max_steps=6", "trainer.batch_size=16", "cluster.world_size=3", "trainer.epochs=1"]


def section(title: str) -> str:
    """The text of docs/layout.md's `### <title>` section."""
    match = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^##|\Z)", DOC.read_text(), re.S | re.M)
    assert match, f"{DOC.name}: no section '### {title}'"
    return match.group(1)


def blocks(title: str) -> dict[str, str]:
    """Each labelled code block of a section: path -> its text."""
    found = re.findall(r"^`([^`]+)`:\n\n```\w*\n(.*?)^```", section(title), re.S | re.M)
    return dict(found)


def table_count(kind: str) -> int:
    row = re.search(rf"^\| {re.escape(kind)} \| (\d+) \|", DOC.read_text(), re.M)
    assert row, f"{DOC.name}: no row for '{kind}'"
    return int(row.group(1))


@pytest.fixture
def recipes(tmp_path: Path):
    """Every recipe's Python file as a module of the package, its YAML in a config directory."""
    added = []
    for title in ("A model", "A dataset", "A collective"):
        for path, text in blocks(title).items():
            if path.endswith(".py"):
                name = path.removeprefix("src/").removesuffix(".py").replace("/", ".")
                module = types.ModuleType(name)
                module.__file__ = str(tmp_path / Path(path).name)
                exec(compile(text, module.__file__, "exec"), module.__dict__)
                sys.modules[name] = module
                parent, _, leaf = name.rpartition(".")
                setattr(importlib.import_module(parent), leaf, module)
                added.append((name, parent, leaf))
            else:
                target = tmp_path / "conf" / Path(path).relative_to("conf")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
    yield tmp_path / "conf"
    for name, parent, leaf in added:
        del sys.modules[name]
        delattr(importlib.import_module(parent), leaf)


def cfg_with(conf: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", [f"hydra.searchpath=[file://{conf}]", *FAST, *RUN, *overrides])


@pytest.mark.parametrize("kind, title", [("model", "A model"), ("dataset", "A dataset"), ("collective", "A collective")])
def test_the_table_counts_each_recipes_files(kind, title):
    files = blocks(title)
    assert len(files) == table_count(kind) == 2, files.keys()
    assert any(p.startswith("src/ssgd/") for p in files) and any(p.startswith("conf/") for p in files)


def test_a_new_model_and_dataset_train_by_name(recipes, tmp_path):
    summary, params = fit(cfg_with(recipes, "model=tiny_mlp", "dataset=two_blobs", "compressor=topk"), tmp_path / "run")
    assert summary["steps"] == 6 and summary["params"] == 2 * 32 + 32 + 32 * 2 + 2
    assert [tuple(p.shape) for p in params] == [(32, 2), (32,), (2, 32), (2,)]
    assert summary["val/acc"] > 0.7          # the blobs are 2 sigma apart: a few steps separate them


def test_a_new_collective_gives_the_bits_of_the_dense_allreduce(recipes, tmp_path):
    _, gathered = fit(cfg_with(recipes, "compressor=dense_gather"), tmp_path / "gather")
    _, dense = fit(cfg_with(recipes, "compressor=dense"), tmp_path / "dense")
    assert all(torch.equal(a, b) for a, b in zip(gathered, dense, strict=True))


def test_a_new_collective_counts_the_bytes_its_model_charges(recipes):
    from ssgd.comm.collectives.dense_gather import DenseAllgather

    P, d = 5, 1000
    payloads = [Dense(torch.randn(d, generator=torch.Generator().manual_seed(r))) for r in range(P)]
    net = AlphaBeta(alpha=1e-4, beta=1e-8)
    results, logs = run_threads(DenseAllgather(), payloads, net=net)
    expected = payloads[0].values.clone()
    for p in payloads[1:]:
        expected.add_(p.values)
    assert all(torch.equal(r.total.to_dense(), expected) for r in results)
    assert all(log.stats.bytes == 4 * d * (P - 1) for log in logs)       # a ring allgather of 4d-byte blocks
    assert logs[0].clock == pytest.approx(DenseAllgather().model_seconds(net, P, d, [d] * P))
