"""`make profile` then `cluster.compute_profile=FILE` as a user runs them (docs/scaling-model.md#a-target-time-for-your-model):
the measured file gives FNN-3 a target time, the same file gives the same target/* to the digit in two
runs, and a bad file stops the run in one line naming the key, with exit status 2, before training."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssgd.perf.iteration import Profile

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
RUN = ["cluster=4x1gbe", "trainer.batch_size=16", "trainer.max_steps=2", "wandb.mode=disabled",
       "trainer.progress=false"]
FNN3_D = 199_210


def train(tmp_path: Path, name: str, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={tmp_path / name}",
                           *RUN, *overrides], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "WANDB_SILENT": "true"})


def make_profile(out: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", "-o", ".venv/.setup-done", "profile",
                           f"PY={sys.executable}", f"OUT={out}", f"ARGS={' '.join(overrides)}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_make_profile_gives_fnn3_a_target_time_reproducible_to_the_digit(tmp_path):
    out = tmp_path / "fnn3-here.json"
    made = make_profile(out, "trainer.batch_size=16", "reps=3")
    assert made.returncode == 0, made.stderr[-3000:]
    profile = Profile.load(out)
    assert profile.d == FNN3_D and profile.batch_size == 16 and profile.t_f > 0 and profile.t_b > 0
    runs = [train(tmp_path, name, f"cluster.compute_profile={out}") for name in ("a", "b")]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"profile from cluster.compute_profile={out.resolve()}): " in proc.stdout
    a, b = (json.loads((tmp_path / name / "summary.json").read_text()) for name in ("a", "b"))
    target = [{k: v for k, v in s.items() if k.startswith("target/") or k == "throughput/target"} for s in (a, b)]
    assert target[0] == target[1] and target[0]["target/iter_s"] > target[0]["target/comm_s"] > 0
    assert target[0]["target/profile"] == profile.name


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("[]", "not a compute profile"),
    ("other d", "describes a model of 199,211 parameters, this run's model has 199,210"),
])
def test_a_bad_profile_file_is_one_line_exit_2_before_training(tmp_path, content, message):
    path = tmp_path / "p.json"
    if content == "other d":
        content = json.dumps({"name": "x", "batch_size": 32, "layers": ["a"], "params": [FNN3_D + 1],
                              "forward_s": [1e-3], "backward_s": [1e-3]})
    if content is not None:
        path.write_text(content)
    proc = train(tmp_path, "run", f"cluster.compute_profile={path}")
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert "cluster.compute_profile=" in lines[0] and message in lines[0], lines[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
