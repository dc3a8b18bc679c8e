"""hydra/launcher=submitit_local: a 2-point sweep, each run in its own submitit process, as on SLURM.

The same launcher plugin and task pickling as hydra/launcher=submitit_slurm (tested against a real cluster in
tests/slurm/), without a cluster.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def run_sweep(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_SILENT": "true",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "-m", "hydra/launcher=submitit_local",
                           "hydra.launcher.timeout_min=5", *overrides,
                           "trainer.max_steps=3", "wandb.mode=disabled", "trainer.progress=false"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)


def test_submitit_local_sweep_writes_both_runs(tmp_path):
    """The default hydra.sweep.dir (no override): both job processes write into the one sweep folder."""
    proc = run_sweep(tmp_path, "compressor=topk,gtopk")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweeps = sorted((tmp_path / "multirun").glob("*/*"))
    assert len(sweeps) == 1, sweeps        # one sweep folder, not one per job process
    sweep = sweeps[0]
    runs = {json.loads(p.read_text())["compressor"]: p.parent for p in sweep.glob("*/summary.json")}
    assert sorted(runs) == ["gtopk", "topk"], sorted(sweep.iterdir())
    for compressor, run_dir in runs.items():
        summary = json.loads((run_dir / "summary.json").read_text())
        assert (summary["steps"], summary["world_size"]) == (3, 4), summary
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert rows and rows[-1]["step"] == 3
    # the sweep's table (one row per point, the swept key as a column) and overlay, named in the last line
    rows = (sweep / "sweep_summary.csv").read_text().splitlines()
    assert rows[0].startswith("point,compressor,") and sorted(r.split(",")[1] for r in rows[1:]) == ["gtopk", "topk"]
    assert (sweep / "sweep_overlay.png").read_bytes()[:4] == b"\x89PNG"
    assert f"sweep report: {sweep / 'sweep_summary.csv'}" in proc.stdout.splitlines()[-1]
    assert all((d / "report.png").read_bytes()[:4] == b"\x89PNG" for d in runs.values())
    # each run ran in its own submitit job (not in the sweeping process): one result and log per job
    results = sorted((sweep / ".submitit").glob("*/*_result.pkl"))
    assert len(results) == 2, sorted((sweep / ".submitit").rglob("*"))
    assert sum("final val accuracy" in p.read_text() for p in (sweep / ".submitit").glob("*/*_log.out")) == 2
    assert "validated against ConfigStore schema" not in proc.stderr       # Hydra's harmless launcher warning


def test_a_failed_submitit_point_fails_the_sweep(tmp_path):
    """A bad point in a job process of its own: the other point runs, and the sweeping process (which never
    sees the job's result callbacks) still prints the failed-points table and exits with the point's status."""
    proc = run_sweep(tmp_path, "compressor=topk", "compressor.density=0.01,1.5")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "sweep: 1 of 2 points failed" in proc.stderr and "compressor.density=1.5" in proc.stderr, proc.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "multirun").glob("*/*")
    assert len(list(sweep_dir.glob("*/summary.json"))) == 1 and len(list(sweep_dir.glob("*/error.txt"))) == 1
