"""The target clock as a user runs it: the same config on the thread, MPI and torch backends, with this
host's compute slowed differently, gives the same `target/*` numbers to the last digit (docs/metrics.md)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
RUN = ["model=replay", "dataset=synthetic_cifar10", "compressor=gtopk", "cluster=4x1gbe", "trainer.max_steps=3",
       "wandb.mode=disabled", "trainer.progress=false"]


def summary(tmp_path: Path, name: str, *overrides: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={tmp_path / name}",
                           *RUN, *overrides], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "modelled time per iteration on 4x1gbe (resnet20 profile)" in proc.stdout
    return json.loads((tmp_path / name / "summary.json").read_text())


def test_every_backend_and_any_host_speed_give_the_same_target_time(tmp_path):
    runs = {"thread": summary(tmp_path, "thread", "model.time_scale=0"),
            "mpi": summary(tmp_path, "mpi", "backend=mpi", "model.time_scale=0.5"),
            "torch": summary(tmp_path, "torch", "backend=torch", "model.time_scale=0.2")}
    target = {name: {k: v for k, v in s.items() if k.startswith("target/") or k == "throughput/target"}
              for name, s in runs.items()}
    assert target["thread"]["target/iter_s"] > target["thread"]["target/comm_s"] > 0
    assert target["mpi"] == target["thread"] and target["torch"] == target["thread"]
    assert runs["mpi"]["time/compute_s"] > runs["thread"]["time/compute_s"]       # slowed here: ~17 ms per rank
