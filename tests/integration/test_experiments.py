"""experiments/: every file composes, every laptop variant's first grid point trains 2 steps, and
every wandb sweep file is a valid sweep of Hydra overrides (of its experiment's grid, when it names one)
that calls the project's interpreter and optimizes the right metric."""
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import ssgd.config  # noqa: F401  (registers the schema `base_config` that conf/config.yaml composes)

ROOT = Path(__file__).resolve().parents[2]
EXP = ROOT / "experiments"
EXPERIMENTS = sorted(p.stem for p in EXP.glob("*.yaml"))
LAPTOP = [name for name in EXPERIMENTS if name.endswith("_laptop")]
SWEEPS = sorted(p.stem for p in (EXP / "wandb").glob("*.yaml"))
LAPTOP_SWEEPS = [name for name in SWEEPS if name.startswith("laptop_")]   # default config, embedded data
# top-level keys of a wandb sweep configuration (wandb/sweeps, src/sweeps/config/schema.json)
SWEEP_KEYS = {"program", "project", "entity", "name", "description", "method", "metric", "parameters", "command",
              "run_cap", "early_terminate"}


def compose_experiment(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(EXP), version_base="1.3"):
        return compose(name, [f"hydra.searchpath=[file://{ROOT / 'conf'}]", *overrides], return_hydra_config=True)


def test_every_paper_experiment_has_a_laptop_variant_and_a_sweep():
    papers = [name for name in EXPERIMENTS if not name.endswith("_laptop")]
    assert papers and all(f"{name}_laptop" in LAPTOP for name in papers)
    assert set(SWEEPS) - set(LAPTOP_SWEEPS) == set(papers) and LAPTOP_SWEEPS


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
    """What `python src/train.py -cd experiments -cn <name> hydra.mode=RUN <first point>` trains, built and
    run in this process (the command line itself: tests/integration/test_entry.py)."""
    from ssgd.run import build

    point = first_point(name)
    with initialize_config_dir(config_dir=str(EXP), version_base="1.3"):
        cfg = compose(name, [f"hydra.searchpath=[file://{ROOT / 'conf'}]", *point, "trainer.max_steps=2",
                             "wandb.mode=disabled", "trainer.progress=false"])
    trainer, writer, world = build.trainer(cfg, tmp_path / "run")
    try:
        summary = trainer.fit()
    finally:
        world.close()
        writer.close()
    assert summary["steps"] == 2 and (tmp_path / "run" / "summary.json").is_file()


def sweep_file(name: str) -> tuple[dict, list[str]]:
    """The sweep and the fixed Hydra arguments of its command (what precedes `${args_no_hyphens}`)."""
    sweep = yaml.safe_load((EXP / "wandb" / f"{name}.yaml").read_text())
    command = sweep["command"]
    return sweep, command[2:command.index("${args_no_hyphens}")]


def compose_sweep_point(fixed: list[str], *overrides: str):
    """Compose one run of a sweep as src/train.py would: `-cd experiments -cn <name>` or the default config."""
    if "-cn" in fixed:
        name = fixed[fixed.index("-cn") + 1]
        rest = [a for a in fixed if a not in ("-cd", "experiments", "-cn", name)]
        return compose_experiment(name, *rest, *overrides)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", [*fixed, *overrides], return_hydra_config=True)


@pytest.mark.parametrize("name", SWEEPS)
def test_sweep_file_calls_the_project_interpreter_and_optimizes_the_right_metric(name):
    sweep, fixed = sweep_file(name)
    assert set(sweep) <= SWEEP_KEYS, set(sweep) - SWEEP_KEYS
    assert sweep["program"] == "src/train.py" and sweep["project"] == "ssgd"       # = wandb.project's default
    command = sweep["command"]
    assert command[:2] == [".venv/bin/python", "${program}"] and command[-1] == "${args_no_hyphens}"
    assert "wandb.mode=online" in fixed                                             # an agent reports to its server
    cfg = compose_sweep_point(fixed)
    tokens = "ptb" in cfg.dataset._target_                                          # a language model
    assert sweep["metric"] == ({"name": "val/ppl", "goal": "minimize"} if tokens else
                               {"name": "val/acc", "goal": "maximize"})


@pytest.mark.slow              # composes every value of every sweep: about 15 s; make test runs it
@pytest.mark.parametrize("name", SWEEPS)
def test_sweep_file_sets_valid_overrides(name):
    """Every value (or both ends of a distribution) composes and lands where the key says; a sweep that
    names an experiment runs exactly that experiment's grid."""
    sweep, fixed = sweep_file(name)
    if "-cn" in fixed:
        assert fixed[fixed.index("-cn") + 1] == name and "hydra.mode=RUN" in fixed
        grid = compose_experiment(name).hydra.sweeper.params
        assert set(sweep["parameters"]) == set(grid)
        for key, spec in sweep["parameters"].items():
            assert [str(v) for v in spec["values"]] == [v.strip() for v in str(grid[key]).split(",")]
    else:
        assert name in LAPTOP_SWEEPS and "embedded" in compose_sweep_point(fixed).dataset._target_
    for key, spec in sweep["parameters"].items():
        for value in spec.get("values", [spec.get("min"), spec.get("max")]):
            cfg = compose_sweep_point(fixed, f"{key}={value}")
            got = OmegaConf.select(cfg, key) if "." in key or key == "seed" else cfg[key].name
            assert str(got) == str(value), (key, value, got)
