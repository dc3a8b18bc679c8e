"""What to look at after a run or a sweep: one figure per run, and a table plus an overlay figure per sweep.

    python -m ssgd.report RUN_OR_SWEEP_DIR

A run directory (it holds summary.json) gets `report.png` (ssgd.utils.run_report): training / validation loss,
accuracy, achieved against scheduled density on a log axis with the warm-up inset (the Top-k / gTop-k /
Gaussian-k selection of Shi et al., ICDCS 2019, sec. III and arXiv:1911.08772), bytes per step of one worker
(the busiest) and of all ranks, the time per step measured here beside the modelled time per iteration on the
target cluster (Shi et al., ICDCS 2019, sec. IV), and the learning rate; units on the axes from the registry
(docs/metrics.md); a series that never changes gets no panel, only its value in the title. A run folder
of an earlier version (its keys renamed since, `ssgd.utils.metric_names.RENAMED`) is read as it is, with one
line saying so. A sweep directory (its job folders hold
summary.json; or a folder of separate runs, such as outputs/<date>) gets `sweep_summary.csv` and `sweep_summary.md`
(one row per point: its job number or a separate run's folder name, the overridden keys whose values differ
between points, each read from the point's composed `.hydra/config.yaml`, then its summary) and
`sweep_overlay.png` (every point's validation
accuracy and training loss). Every run ends with this figure and every sweep with its table (app.py,
run/sweep.py); both name what they wrote in their last log line. Reads only the files a run writes.
"""
from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import logging

import matplotlib

matplotlib.use("Agg")
logging.getLogger("matplotlib").setLevel(logging.WARNING)   # no "generated new fontManager" on a first run's stdout
import matplotlib.pyplot as plt  # noqa: E402

from ssgd.errors import EXIT_BAD_INPUT, ConfigError  # noqa: E402
from ssgd.utils.atomic import replacing, write_text_atomic  # noqa: E402
from ssgd.utils.metric_names import RENAMED  # noqa: E402

RUN_FIGURE = "report.png"
SWEEP_CSV, SWEEP_MD, SWEEP_FIGURE = "sweep_summary.csv", "sweep_summary.md", "sweep_overlay.png"
SUMMARY_KEYS = ("compressor", "world_size", "steps", "val/acc", "val/loss", "density/configured", "density/achieved",
                "comm/bytes_sent", "time/step_s", "target/iter_s", "wall_s")     # keys: ssgd.utils.metric_names


def read_json(path: Path) -> dict:
    """The JSON object in `path`; ConfigError naming the file when it is unreadable or holds something else."""
    try:
        obj = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"{path}: not a summary written by a run ({type(err).__name__}: {err})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{path}: not a summary written by a run (a JSON {type(obj).__name__}, not an object)")
    return obj


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of run_dir/metrics.jsonl ([] if there is none); ConfigError naming the file and line of the
    first row that is not a JSON object (a last line cut mid-record is skipped: a run stopped while writing)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()                        # cut mid-record: the run is writing it, or stopped while it did
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}: line {number} is not a JSON record of a run ({line[:40]!r})")
        rows.append(row)
    return rows


def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Save `fig` as PNG at `path` atomically and space-checked (ssgd.utils.atomic.replacing), then close it."""
    try:
        with replacing(path, "the figure", 0) as tmp:
            fig.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(fig)
    return path


def series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the rows that hold `key`."""
    picked = [(r["step"], r[key]) for r in rows if key in r and "step" in r]
    return [s for s, _ in picked], [v for _, v in picked]


def older_version(run_dir: Path, summary: dict, rows: list[dict]) -> str | None:
    """One line when the run's files hold keys of an earlier version (`RENAMED`), else None."""
    old = sorted({k for k in (*summary, *(k for r in rows for k in r)) if k in RENAMED})
    if not old:
        return None
    return (f"note: {run_dir} was written by an older version (keys {', '.join(old)}; renamed since, see "
            "docs/metrics.md): its panels show only the keys this version knows")


def run_figure(run_dir: Path) -> Path:
    """Write run_dir/report.png (ssgd.utils.run_report: a panel per quantity that changes, units on the axes)
    and return its path."""
    from ssgd.utils.run_report import draw_run

    summary = read_json(run_dir / "summary.json")
    rows = read_metrics(run_dir)
    note = older_version(run_dir, summary, rows)
    if note:
        print(note, file=sys.stderr)
    return save_figure(draw_run(summary, rows), run_dir / RUN_FIGURE)


def swept(job_dir: Path) -> dict[str, str]:
    """The overrides of one sweep point (job_dir/.hydra/overrides.yaml, `- key=value` lines) as key -> value."""
    path = job_dir / ".hydra" / "overrides.yaml"
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        item = line.strip().removeprefix("- ").strip().strip("'\"")
        if "=" in item:
            key, value = item.split("=", 1)
            out[key] = value
    return out


def sweep_points(sweep_dir: Path) -> list[Path]:
    """The job folders of a sweep that finished (hold summary.json), in job order."""
    def order(p: Path) -> tuple[int, str]:
        head = p.name.split("-", 1)[0]
        return (int(head) if head.isdigit() else 1 << 30, p.name)
    return sorted((p.parent for p in sweep_dir.glob("*/summary.json")), key=order)


def composed(job_dir: Path) -> dict | None:
    """A run's composed config (job_dir/.hydra/config.yaml) as plain data; None when it has none or it is not
    readable YAML (the overrides alone label it then)."""
    import yaml

    path = job_dir / ".hydra" / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def config_value(config: dict | None, over: dict[str, str], key: str) -> str:
    """`key`'s value in a run: from its composed config when it has one (a config group gives its `name`, so a
    default shows as well as an override), else from its overrides ("" when absent)."""
    if config is None:
        return over.get(key, "")
    node: object = config
    for part in key.lstrip("+~").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node = node.get("name", "")
    return "" if node is None else str(node)


def point_label(job_dir: Path) -> str:
    """A sweep job's number ("3" of "3-compressor=topk"), or a separate run's folder name (Hydra's HH-MM-SS)."""
    name = job_dir.name
    if re.fullmatch(r"\d{2}-\d{2}-\d{2}.*", name) or not name.split("-", 1)[0].isdigit():
        return name
    return name.split("-", 1)[0]


def sweep_table(sweep_dir: Path) -> list[Path]:
    """Write the sweep's CSV, markdown table and overlay figure; return their paths ([] if no point finished).
    Rows: each point's label (`point_label`), the keys any point overrode whose values differ between points
    (each value read from that point's composed config), then its summary."""
    points = sweep_points(sweep_dir)
    if not points:
        return []
    overrides = [swept(p) for p in points]
    configs = [composed(p) for p in points]
    keys = dict.fromkeys(k for o in overrides for k in o)
    values = [{k: config_value(c, o, k) for k in keys} for c, o in zip(configs, overrides)]
    varied = [k for k in keys if len({v[k] for v in values}) > 1]
    shown = [k for k in SUMMARY_KEYS if k not in varied]
    header = ["point", *varied, *shown]
    table = []
    for point, value in zip(points, values):
        summary = read_json(point / "summary.json")
        table.append([point_label(point), *(value[k] for k in varied), *(summary.get(k, "") for k in shown)])
    csv_path, md_path = sweep_dir / SWEEP_CSV, sweep_dir / SWEEP_MD
    text = io.StringIO(newline="")
    csv.writer(text).writerows([header, *table])
    write_text_atomic(csv_path, text.getvalue(), "the sweep's table")

    def cell(v: object) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table]
    write_text_atomic(md_path, "\n".join(md) + "\n", "the sweep's table")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for point, value in zip(points, values):
        rows = read_metrics(point)
        label = " ".join(f"{k}={value[k]}" for k in varied) or point_label(point)
        for ax, key in zip(axes, ("val/acc", "train/loss")):
            x, y = series(rows, key)
            if x:
                ax.plot(x, y, marker="." if len(x) < 30 else None, label=label)
    for ax, key in zip(axes, ("validation accuracy", "training loss")):
        ax.set_title(key)
        ax.set_xlabel("step")
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(f"sweep {sweep_dir.name}: {len(points)} points")
    fig.tight_layout()
    return [csv_path, md_path, save_figure(fig, sweep_dir / SWEEP_FIGURE)]


def main(argv: list[str] | None = None) -> int:
    """`python -m ssgd.report DIR`: the run's figure, or the sweep's table and overlay; exit 2 with one line on
    a bad DIR, a file in it that is not what a run writes (named), or a full disk."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ssgd.report RUN_OR_SWEEP_DIR", file=sys.stderr)
        return EXIT_BAD_INPUT
    target = Path(args[0])
    try:
        if (target / "summary.json").exists():
            print(f"report: {run_figure(target)}")
            return 0
        written = sweep_table(target) if target.is_dir() else []
    except ConfigError as err:             # a damaged file (named), or a full disk
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not written:
        print(f"error: {target}: neither a run directory (summary.json) nor a sweep directory (job folders with "
              "summary.json)", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("report: " + " ".join(str(p) for p in written))
    return 0
