"""`python src/train.py` as a user runs it: outputs, printed report, and one-line errors for bad input."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def run(tmp_path: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={tmp_path / 'run'}",
                           "trainer.progress=false", *overrides],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)


def test_run_writes_metrics_summary_config_and_offline_wandb(tmp_path):
    proc = run(tmp_path, "trainer.epochs=1", "compressor=gtopk", "cluster=32x1gbe", "trainer.batch_size=16")
    assert proc.returncode == 0, proc.stderr
    # FNN-3 has no compute profile of the target's GPU: its communication is modelled, its iteration is not
    assert "final val accuracy" in proc.stdout and "modelled communication per iteration on 32x1gbe" in proc.stdout
    assert "no modelled time per iteration on 32x1gbe" in proc.stdout
    out = tmp_path / "run"
    assert (out / ".hydra" / "config.yaml").is_file()
    summary = json.loads((out / "summary.json").read_text())
    for key in ("val/acc", "val/loss", "steps", "wall_s", "target/comm_s", "throughput/here", "world_size"):
        assert key in summary, key
    assert "target/iter_s" not in summary and "throughput/target" not in summary
    assert summary["world_size"] == 32 and summary["compressor"] == "gtopk"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("val/acc" in row for row in rows) and any("train/loss" in row for row in rows)
    assert list((out / "wandb").glob("offline-run-*")), "wandb offline run directory missing"
    log = (out / "train.log").read_text()              # every line of the run goes through logging
    assert "final val accuracy" in log and "epoch 1/1 = step 7/7 (1 epoch = 7 steps of 32 x 16 samples): val/loss=" in log and f"outputs: {out}" in log
    # the run ends with a line naming its figure (docs/running.md#looking-at-results)
    assert proc.stdout.strip().splitlines()[-1].startswith(f"  report: {out / 'report.png'}"), proc.stdout[-500:]
    assert (out / "report.png").read_bytes()[:4] == b"\x89PNG"


# One case per kind of failure, end to end (every bad value is checked in-process: tests/unit/test_schema.py):
# a missing group option, a key the schema lacks, a wrong type, a bad value, and missing local data.
BAD = {
    "compressor=foo": "compressor=foo: no such option",
    "+foo=1": "foo: unknown key",
    "backend=xyz": "backend=xyz",
    "trainer.batch_size=0": "trainer.batch_size",
    "dataset=mnist": "data/mnist",                       # missing local files: names the path
}


@pytest.mark.parametrize("override", sorted(BAD))
def test_bad_input_is_one_line_and_nonzero(override, tmp_path):
    proc = run(tmp_path, override, "wandb.mode=disabled" if "wandb" not in override else "trainer.max_steps=1",
               timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert BAD[override] in lines[0]
    assert "Traceback" not in proc.stderr
    log = tmp_path / "run" / "train.log"
    assert not log.exists() or lines[0] in log.read_text()     # the run's log says why it stopped, too


def test_bad_input_keeps_earlier_outputs(tmp_path):
    """A failing run pointed at an existing run directory does not erase what is there."""
    assert run(tmp_path, "trainer.max_steps=3", "wandb.mode=disabled").returncode == 0
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert run(tmp_path, "trainer.batch_size=100000", "wandb.mode=disabled").returncode == 2
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before
    assert (tmp_path / "run" / "summary.json").is_file()


def test_hydra_sweep_syntax_runs_every_point(tmp_path):
    """glob() and choice() are Hydra's own sweep syntax: nothing of ours may reject them."""
    env = {**os.environ, "WANDB_SILENT": "true"}
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "-m", "compressor=glob(g*)",
                           "optimizer=choice(sgd,adamw)", "trainer.max_steps=1", "wandb.mode=disabled",
                           "trainer.progress=false", f"hydra.sweep.dir={tmp_path / 'multi'}"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "multi").glob("*/summary.json")]
    assert sorted(s["compressor"] for s in summaries) == ["gaussiank", "gaussiank", "gtopk", "gtopk"]
