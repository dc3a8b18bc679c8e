"""docs/adding-a-backend.md's worked example, run as written: a copy of src/ gets the page's World file and its two
changes (`git apply`), `python src/train.py backend=serial` trains there, and ends with the parameters that
backend=thread gives; a misspelt backend is refused in one line that lists the new one."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, doc_block, train

DOC = ROOT / "docs" / "adding-a-backend.md"
RUN = ["trainer.max_steps=4", "trainer.batch_size=16", "trainer.checkpoint_every_steps=4", "cluster.world_size=3"]


def block_after(label: str) -> str:
    return doc_block(DOC, label)


def diff_blocks() -> list[str]:
    """The page's ```diff blocks, in order."""
    return re.findall(r"^```diff\n(.*?)^```", DOC.read_text(), re.S | re.M)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of src/ with the recipe applied."""
    root = tmp_path_factory.mktemp("with-serial")
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (root / "src" / "ssgd" / "worlds" / "serial.py").write_text(block_after("src/ssgd/worlds/serial.py"))
    diffs = diff_blocks()
    assert len(diffs) == 2
    for diff in diffs:
        proc = subprocess.run(["git", "apply", "-"], input=diff, text=True, cwd=root, capture_output=True)
        assert proc.returncode == 0, proc.stderr
    return root


def train_py(tree: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "WANDB_MODE": "disabled"}
    return subprocess.run([sys.executable, str(tree / "src" / "train.py"), "trainer.progress=false", *overrides],
                          capture_output=True, text=True, timeout=180, cwd=tree, env=env)


@pytest.mark.slow
def test_the_recipe_trains_with_the_bits_of_the_thread_backend(tree, tmp_path):
    proc = train_py(tree, "backend=serial", *RUN, f"hydra.run.dir={tmp_path / 'serial'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, thread = train(tmp_path / "thread", *RUN)
    serial = torch.load(tmp_path / "serial" / "checkpoint.pt", weights_only=False)["shared"]
    assert serial["step"] == 4
    assert all(torch.equal(a, b) for a, b in zip(serial["params"], thread, strict=True))
    assert '"backend": "serial"' in (tmp_path / "serial" / "summary.json").read_text()


def test_a_misspelt_backend_is_refused_naming_the_new_one(tree, tmp_path):
    proc = train_py(tree, "backend=sereal", f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: backend=sereal: Invalid value 'sereal', expected one of "
                                   "[thread, mpi, torch, serial]"), proc.stderr
