"""experiments/: every file composes, every laptop variant's first grid point trains 2 steps, and
every wandb sweep file is a valid grid of Hydra overrides of its experiment."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
EXP = ROOT / "experiments"
EXPERIMENTS = sorted(p.stem for p in EXP.glob("*.yaml"))
LAPTOP = [name for name in EXPERIMENTS if name.endswith("_laptop")]
SWEEPS = sorted(p.stem for p in (EXP / "wandb").glob("*.yaml"))


def compose_experiment(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(EXP), version_base="1.3"):
        return compose(name, [f"hydra.searchpath=[file://{ROOT / 'conf'}]", *overrides], return_hydra_config=True)


def test_every_paper_experiment_has_a_laptop_variant_and_a_sweep():
    papers = [name for name in EXPERIMENTS if not name.endswith("_laptop")]
    assert papers and all(f"{name}_laptop" in LAPTOP for name in papers)
    assert set(SWEEPS) == set(papers)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes(name):
    cfg = compose_experiment(name)
    assert cfg.hydra.mode.name == "MULTIRUN" and cfg.hydra.sweeper.params
    assert "density" in cfg.compressor and cfg.cluster.world_size >= 1


def first_point(name: str) -> list[str]:
    params = compose_experiment(name).hydra.sweeper.params
    return [f"{key}={str(value).split(',')[0]}" for key, value in params.items()]


@pytest.mark.slow
@pytest.mark.parametrize("name", LAPTOP)
def test_laptop_variant_first_point_trains_two_steps(name, tmp_path):
    argv = [sys.executable, str(ROOT / "src" / "train.py"), "-cd", str(EXP), "-cn", name, "hydra.mode=RUN",
            *first_point(name), "trainer.max_steps=2", "wandb.mode=disabled", "trainer.progress=false",
            f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "run" / "summary.json").is_file()


@pytest.mark.parametrize("name", SWEEPS)
def test_sweep_file_is_a_grid_of_valid_overrides(name):
    sweep = yaml.safe_load((EXP / "wandb" / f"{name}.yaml").read_text())
    assert sweep["program"] == "src/train.py" and "${args_no_hyphens}" in sweep["command"]
    assert sweep["command"][sweep["command"].index("-cn") + 1] == name
    grid = compose_experiment(name).hydra.sweeper.params
    assert set(sweep["parameters"]) == set(grid)
    for key, spec in sweep["parameters"].items():
        assert [str(v) for v in spec["values"]] == [v.strip() for v in str(grid[key]).split(",")]
        for value in spec["values"]:
            cfg = compose_experiment(name, f"{key}={value}")
            assert str(OmegaConf.select(cfg, key) if "." in key else cfg[key].name) == str(value)
