"""The registry of the paper figures: paper_figs/figures.yaml, one entry per figure (its header says
what an entry holds). make_figs.py reads the steps and their outputs from it, readme.py the README's
rows and findings, runs.py the training runs; adding a figure is its script and one entry
(paper_figs/README.md, "Adding a figure").
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from figlib import ROOT, fail

FIGURES_FILE = ROOT / "paper_figs" / "figures.yaml"
RUN_KEYS = ("runs", "reads", "panels", "sweep")        # an entry with any of these reads training runs


@dataclass(frozen=True)
class Row:
    """One row of the README's table: an output's name, its command, its data and the paper figure."""

    name: str
    command: str
    data: str
    paper: str

    @property
    def is_image(self) -> bool:
        """A figure (stem of PNG + PDF + CSV), not a file named with its extension."""
        return "." not in self.name


@dataclass(frozen=True)
class Entry:
    """One figure of the registry."""

    name: str
    spec: dict

    @property
    def script(self) -> Path:
        return ROOT / self.spec["script"]

    @property
    def in_figs(self) -> bool:
        """A step of `make figs` (and of `make fig-<name>`)."""
        return bool(self.spec.get("figs", True))

    @property
    def quick(self) -> bool:
        return bool(self.spec.get("quick", False))

    @property
    def expected_s(self) -> float:
        return float(self.spec.get("expected_s", 0))

    @property
    def reads_runs(self) -> bool:
        return any(key in self.spec for key in RUN_KEYS)

    @property
    def results_dir(self) -> bool:
        return bool(self.spec.get("results_dir", False))

    @property
    def step(self) -> str:
        """The step's name in make_figs.py: the script's stem."""
        return self.script.stem

    def outputs(self) -> list[str]:
        """The files the step writes into --out: a stem stands for its PNG, PDF and CSV (figlib.save)."""
        return [f for o in self.spec.get("outputs", []) for f in
                ([o] if "." in o else [f"{o}.png", f"{o}.pdf", f"{o}.csv"])]

    def rows(self) -> list[Row]:
        return [Row(r["name"], r["command"], r["data"], r["paper"]) for r in self.spec.get("readme", [])]

    @property
    def has_findings(self) -> bool:
        return "findings" in self.spec

    @property
    def heading(self) -> str:
        return (self.spec.get("findings") or {}).get("heading", self.step)

    def images(self) -> list[str]:
        """The figures shown above the findings: the entry's `findings.images`, else its rows' figures."""
        found = self.spec.get("findings") or {}
        return list(found["images"]) if "images" in found else [r.name for r in self.rows() if r.is_image]

    def findings(self) -> Callable[[Path], list[str]]:
        """The script's `findings(out)`: the README lines it writes from the CSVs in `out`."""
        return importlib.import_module(self.step).findings


def load(path: Path = FIGURES_FILE) -> dict:
    """figures.yaml, checked: the profiles, and every entry with a script, outputs and README rows."""
    try:
        spec = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        fail(f"{path}: cannot read the figure registry ({err})")
    for key in ("profiles", "figures", "startup_s"):
        if not isinstance(spec, dict) or key not in spec:
            fail(f"{path}: missing key '{key}'")
    for name, entry in spec["figures"].items():
        for key in ("script", "outputs", "readme"):
            if key not in entry:
                fail(f"{path}: figures.{name} lacks '{key}'")
        for row in entry["readme"]:
            missing = [k for k in ("name", "command", "data", "paper") if k not in row]
            if missing:
                fail(f"{path}: figures.{name}.readme: a row lacks {', '.join(missing)}")
    for key in ("panels", "sweep"):
        owners = [name for name, entry in spec["figures"].items() if key in entry]
        if len(owners) > 1:
            fail(f"{path}: '{key}' in more than one entry ({', '.join(owners)})")
    return spec


def entries(spec: dict) -> list[Entry]:
    """Every entry, in the registry's order (the README's and `make figs`'s)."""
    return [Entry(name, entry) for name, entry in spec["figures"].items()]


def entry(spec: dict, name: str) -> Entry:
    """The entry `name`; a one-line error naming the entries when there is none."""
    if name not in spec["figures"]:
        fail(f"--figure {name}: unknown figure; allowed: {', '.join(spec['figures'])}")
    return Entry(name, spec["figures"][name])
