"""experiments/wandb-installed/: one twin per checkout sweep file of experiments/wandb/, for an installed
package. A twin parses, runs the `ssgd-train` entry point, and is its checkout file's search otherwise:
the same parameters, method, metric and fixed overrides (docs/install.md, "wandb sweeps from an installed
package")."""
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

CHECKOUT = ROOT / "experiments" / "wandb"
INSTALLED = ROOT / "experiments" / "wandb-installed"
NAMES = sorted(p.name for p in CHECKOUT.glob("*.yaml"))


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_every_checkout_sweep_has_an_installed_twin():
    assert NAMES and sorted(p.name for p in INSTALLED.glob("*.yaml")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_twin_runs_ssgd_train_with_the_same_search(name):
    checkout, twin = load(CHECKOUT / name), load(INSTALLED / name)
    assert checkout["command"][:2] == [".venv/bin/python", "${program}"]
    assert twin["command"][0] == "ssgd-train"
    assert twin["command"][1:] == checkout["command"][2:]
    assert not any("src/train.py" in str(v) or ".venv" in str(v) for v in twin.values())
    assert "program" not in twin                  # the command names the entry point itself
    assert {k: v for k, v in checkout.items() if k not in ("command", "program")} == \
        {k: v for k, v in twin.items() if k != "command"}
