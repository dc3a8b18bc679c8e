"""Sweeps as a user runs them: the exact command a wandb agent starts (and what that run logs), an Optuna
study through Hydra's sweeper, and the run's lines in `<run dir>/train.log` (MPI rank 0 included)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/, for `wandb_offline`
from wandb_offline import offline_run  # noqa: E402

from ssgd.config import to_plain  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def agent_command(sweep: dict, params: dict) -> tuple[list[str], dict]:
    """(argv, args) of the run `wandb agent` starts for `params`, expanded by wandb's own functions and the
    substitution loop of wandb/wandb_agent.py (Agent._command_run, non-function agents)."""
    from wandb.sdk.launch.sweeps import utils as sweep_utils

    command = {"program": sweep["program"], "args": {k: {"value": v} for k, v in params.items()}}
    macros = sweep_utils.create_sweep_command_args(command)
    macros.update(interpreter=["python"], program=[command["program"]], env=["/usr/bin/env"])
    argv: list[str] = []
    for item in sweep_utils.create_sweep_command(sweep.get("command")):
        item = str(item)
        if item.startswith("${") and item.endswith("}"):
            argv += macros.get(item[2:-1]) or []
        else:
            argv.append(item)
    return argv, command["args"]


def test_wandb_agent_command_logs_the_whole_composed_compressor(tmp_path):
    """The agent's command line, run offline with the sweep's parameter file that the agent writes (wandb then
    merges those values into the run config and locks them, as under a real agent)."""
    from wandb.sdk.lib import config_util

    sweep = yaml.safe_load((ROOT / "experiments" / "wandb" / "laptop_density_x_compressor.yaml").read_text())
    params = {"compressor": "topk", "compressor.density": 0.01, "seed": 2}
    argv, args = agent_command(sweep, params)
    assert argv[:2] == [".venv/bin/python", "src/train.py"] and argv[-3:] == [f"{k}={v}" for k, v in params.items()]
    if not (ROOT / argv[0]).exists():
        pytest.skip(f"{argv[0]} missing: the sweep commands call the project's .venv (see docs/sweeps.md)")
    param_file = tmp_path / "sweep-params.yaml"
    config_util.save_config_file_from_dict(str(param_file), args)        # what the agent writes
    run_dir = tmp_path / "run"
    argv = [a.replace("wandb.mode=online", "wandb.mode=offline") for a in argv]  # the only change: no server
    argv += ["trainer.max_steps=2", "trainer.progress=false", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "WANDB_SILENT": "true", "WANDB_SWEEP_PARAM_PATH": str(param_file)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        expected = to_plain(compose("config", ["trainer.epochs=10", *[f"{k}={v}" for k, v in params.items()]]))
    run = offline_run(run_dir)
    config = run["config"]
    assert config["compressor"] == "topk" and config["compressor.density"] == 0.01 and config["seed"] == 2   # sweep's
    assert config["cfg"]["compressor"] == expected["compressor"]           # the whole composed compressor
    assert config["cfg"]["seed"] == 2 and config["cfg"]["trainer"]["epochs"] == 10
    assert config["model"] == "fnn3" and config["dataset"] == "mnist_embedded" and config["cluster"] == "local"
    assert run["name"] == run["group"] + "-s2" and run["group"].startswith("topk-fnn3-mnist_embedded-local-")
    assert "density=0.01" in run["group"] and "thread" in run["tags"]
    assert run["metrics"]["val/acc"] == {"max"} and run["metrics"]["val/loss"] == {"min"}
    assert run["metrics"]["throughput/here"] == {"last"}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run["summary"]["val/acc"] == {"max": summary["val/acc"]}      # one evaluation: max = final
    assert run["summary"]["final/val/acc"] == summary["val/acc"]
    assert "final val accuracy" in (run_dir / "train.log").read_text()


def test_optuna_study_maximizes_the_returned_val_acc(tmp_path):
    """hydra/sweeper=optuna_lr_density, 3 trials x 2 steps: every trial searched both keys inside their
    bounds, and optimization_results.yaml names the trial with the highest final val/acc."""
    sweep_dir = tmp_path / "study"
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), "-m", "hydra/sweeper=optuna_lr_density",
                           "hydra.sweeper.n_trials=3", "trainer.max_steps=2", "wandb.mode=disabled",
                           "trainer.progress=false", f"hydra.sweep.dir={sweep_dir}"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "alembic" not in proc.stdout + proc.stderr        # no `setup plugin` INFO lines (hydra_logging: ssgd)
    trials = sorted(p for p in sweep_dir.iterdir() if p.is_dir())
    assert len(trials) == 3
    found = []
    for trial in trials:
        cfg = OmegaConf.load(trial / ".hydra" / "config.yaml")
        assert 0.01 <= cfg.optimizer.lr <= 0.5 and 0.0005 <= cfg.compressor.density <= 0.05
        assert cfg.trainer.epochs == 5 and cfg.trainer.max_steps == 2       # the config's fixed budget, CLI wins
        acc = json.loads((trial / "summary.json").read_text())["val/acc"]
        found.append((acc, cfg.optimizer.lr, cfg.compressor.density))
    assert len({(lr, d) for _, lr, d in found}) == 3                       # three different points
    result = OmegaConf.load(sweep_dir / "optimization_results.yaml")
    best = max(found)
    assert result.name == "optuna" and result.best_value == pytest.approx(best[0])
    assert (result.best_params["optimizer.lr"], result.best_params["compressor.density"]) == pytest.approx(best[1:])


def test_mpi_rank_0_logs_status_lines_and_the_report_into_train_log(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "train.py"), f"hydra.run.dir={run_dir}", "backend=mpi",
                           "cluster.world_size=2", "trainer.max_steps=4", "trainer.status_every_s=0.000001",
                           "wandb.mode=disabled"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "final val accuracy" in log and "step 4/4 (100.0%)" in log and "epoch 0.06/0.06 = step 4/4 (1 epoch = 62 steps of 2 x 32 samples): val/loss=" in log
    assert "step 4/4 (100.0%)" in proc.stdout and "[rank 1]" not in proc.stdout   # rank 0 only
    assert proc.stdout.count("step 4/4 (100.0%)") == 1
