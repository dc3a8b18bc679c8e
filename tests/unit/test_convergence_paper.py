"""paper_figs/convergence_paper.py (`make fig-convergence-paper`): a missing CIFAR-10 folder is one line and
exit 2, the estimate is the hand-computed one, and the whole target runs end to end on synthetic CIFAR-10
for a few steps (timing, estimate, 4 runs, figure, CSV) so it cannot rot."""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, paper_script

cp = paper_script("convergence_paper")


@pytest.mark.parametrize("data", ["missing", ""])
def test_missing_data_exits_2_with_one_line_naming_the_key(tmp_path, capsys, data):
    path = str(tmp_path / "nowhere") if data else ""
    with pytest.raises(SystemExit) as exc:
        cp.main(["--data", path, "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: DATA") and "dataset.data_dir" in err[0]
    assert not data or path in err[0]
    assert not (tmp_path / "runs").exists()                     # refused before anything ran


def test_a_folder_without_all_six_batches_is_refused(tmp_path, capsys):
    (tmp_path / "cifar-10-batches-py").mkdir()
    for name in cp.CIFAR_FILES[:-1]:                              # no test_batch
        (tmp_path / "cifar-10-batches-py" / name).write_bytes(b"x")
    with pytest.raises(SystemExit) as exc:
        cp.check_data(str(tmp_path), "cifar10")
    assert exc.value.code == 2 and "test_batch" in capsys.readouterr().err
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(b"x")
    assert cp.check_data(str(tmp_path), "cifar10") == [f"dataset.data_dir={tmp_path.resolve()}"]
    assert cp.check_data(None, "synthetic_cifar10") == ["dataset=synthetic_cifar10"]   # no data needed


def test_estimate_is_step_time_x_epochs_x_steps_per_epoch_summed_over_schemes():
    # 0.5 s x 141 x 390 = 27,495 s = 458.25 min -> 7 h 38 min; two schemes add
    line, total = cp.estimate_line({"dense": 0.5}, 390.0, 141, "cpu")
    assert total == pytest.approx(27495.0) and line.startswith("estimated 7 h 38 min for 1 schemes x 141 epochs")
    line, total = cp.estimate_line({"dense": 0.5, "gtopk": 1.5}, 390.0, 141, "cuda")
    assert total == pytest.approx(4 * 27495.0) and "estimated 30 h 33 min" in line
    assert "step 1 s measured on cuda" in line and "gtopk 1.5 s" in line


def test_paper_values_are_not_invented():
    assert cp.PAPER_FINAL == {}
    assert cp.paper_label("gtopk") == "paper value: not in this repository"


@pytest.mark.slow
def test_the_target_runs_end_to_end_on_synthetic_cifar(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "paper_figs" / "convergence_paper.py"), "--dataset",
                           "synthetic_cifar10", "--max-steps", "2", "--time-steps", "3", "--runs", str(runs),
                           "--out", str(out), "--set", "dataset.n_val=64"], capture_output=True, text=True, cwd=ROOT, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    # the estimate, before any run: the printed per-scheme step times x 141 epochs x 16 steps per epoch
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("estimated ")]
    assert proc.stdout.index("estimated ") < proc.stdout.index("4 runs into")
    h, m = map(int, re.match(r"estimated (\d+) h (\d+) min for 4 schemes x 141 epochs", line).groups())
    steps = dict(re.findall(r"(dense|topk|gtopk|gaussiank) ([0-9.e-]+) s", line))
    assert sorted(steps) == sorted(cp.SCHEMES) and "16 steps per epoch" in line      # 2,048 / (4 x 32)
    expected_min = sum(float(t) for t in steps.values()) * 141 * 16 / 60
    assert abs(60 * h + m - expected_min) <= 0.01 * expected_min + 1               # 3 significant digits
    # 4 runs of 2 steps each, of the paper's experiment (ResNet-20, 4 workers, its schedule)
    for scheme in cp.SCHEMES:
        summary = json.loads((runs / "convergence_paper" / f"{scheme}_s1" / "summary.json").read_text())
        assert summary["steps"] == 2 and summary["compressor"] == scheme and summary["world_size"] == 4
        assert summary["model"].endswith("ResNet20") or "resnet20" in summary["model"].lower()
    for suffix in ("png", "pdf", "csv"):
        assert (out / f"fig_convergence_paper.{suffix}").stat().st_size > 0
    with (out / "convergence_paper_summary.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["scheme"] for r in rows] == list(cp.SCHEMES)
    assert all(r["paper_final_val_acc"] == "not in this repository" and r["steps"] == "2" for r in rows)
