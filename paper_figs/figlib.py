"""What every figure script shares: reading run directories and saving PNG + PDF + the plotted CSV.

A run directory is what `src/train.py` writes (README "Outputs"): `.hydra/config.yaml`,
`summary.json`, `metrics.jsonl` and, with capture on, `capture/stats.jsonl` and `capture/u_step*.pt`.
Figures read these files, never text logs.
"""
from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "paper_figs" / "out"
RUNS = ROOT / "paper_figs" / "runs"      # where `make figs` trains (git-ignored)


def save(fig: plt.Figure, out: Path, stem: str, header: list[str], rows: list[list]) -> list[Path]:
    """Write out/stem.{png,pdf,csv}; the CSV holds exactly the plotted numbers."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.pdf", out / f"{stem}.csv"]
    fig.savefig(paths[0], dpi=130, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight", metadata={"CreationDate": None})   # same bytes on rerun
    plt.close(fig)
    write_csv(paths[2], header, rows)
    return paths


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def read_rows(out: Path, stem: str) -> list[dict] | None:
    """The rows of out/stem.csv (a figure's CSV, for its README findings); None when it is not there."""
    path = Path(out) / f"{stem}.csv"
    if not path.exists():
        return None
    with path.open() as f:
        return list(csv.DictReader(f))


def mean_range(row: dict, key: str, fmt: str = ".3f") -> str:
    """"mean [min, max]" of the columns key_mean, key_min, key_max of a summary row; "-" when empty."""
    if not row[f"{key}_mean"]:
        return "-"
    mean, lo, hi = (float(row[f"{key}_{x}"]) for x in ("mean", "min", "max"))
    return f"{mean:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Run:
    """One finished run directory."""

    path: Path
    config: DictConfig
    summary: dict
    metrics: list[dict] = field(default_factory=list)

    @property
    def scheme(self) -> str:
        return str(self.summary.get("compressor", self.config.compressor.name))

    @property
    def model(self) -> str:
        """Short model name: the class of `model._target_` (MLP, SmallCNN, LSTMLM, ...)."""
        return str(self.config.model._target_).rsplit(".", 1)[-1]

    @property
    def density(self) -> float:
        return float(self.config.compressor.density)

    def capture_stats(self) -> list[dict]:
        path = self.path / "capture" / "stats.jsonl"
        return read_jsonl(path) if path.exists() else []

    def snapshots(self) -> list[Path]:
        return sorted((self.path / "capture").glob("u_step*.pt"))


def find_runs(root: Path) -> list[Run]:
    """Every finished run (has summary.json and .hydra/config.yaml) under `root`, sorted by path."""
    runs = []
    for summary in sorted(Path(root).rglob("summary.json")):
        run_dir = summary.parent
        cfg_file = run_dir / ".hydra" / "config.yaml"
        if not cfg_file.exists():
            continue
        metrics = run_dir / "metrics.jsonl"
        runs.append(Run(run_dir, OmegaConf.load(cfg_file), json.loads(summary.read_text()),
                        read_jsonl(metrics) if metrics.exists() else []))
    return runs


def fail(message: str) -> None:
    """One line on stderr, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def require(runs: list[Run], root: Path, what: str) -> list[Run]:
    if not runs:
        fail(f"no finished run with {what} under {root}; `make figs-runs` trains them (README: Analysis figures)")
    return runs
