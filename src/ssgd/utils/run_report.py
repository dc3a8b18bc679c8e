"""The per-run figure (`report.png`): one panel per quantity that changes during the run, units on the axes.

- Units come from the metric registry (`ssgd.utils.metric_names.METRICS`): each y-axis reads
  "<quantity> [<unit>]", the x-axis "training step [steps]" with the steps of one epoch beside it.
- A series whose value never changes (a constant learning rate, the density of a dense run, a modelled
  communication time that is the same every step) gets no line; a panel left without lines gets no axes.
  The constant values are listed in one line under the title instead, so nothing is hidden.
- Density is drawn on a log y-axis; when the scheduled density changes (a warm-up, usually epoch 0, a few
  percent of the steps) an inset repeats the first steps so the warm-up is more than a sliver.
- Bytes: `comm/bytes_sent` is what one worker sent (the busiest rank: the max over ranks), and
  `comm/bytes_all_ranks` the sum over all P ranks; the legend says which is which.
- A panel whose positive values span more than `LOG_SPAN` (step seconds measured here next to microseconds
  of modelled communication) is drawn on a log y-axis too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402

from ssgd.utils.metric_names import METRICS  # noqa: E402
from ssgd.utils.result_files import series  # noqa: E402

# Okabe & Ito colours, each series of a panel also in its own line style (as paper_figs/style.py): blue, orange,
# bluish green; solid, dashed, dotted. Two series that coincide (achieved = scheduled density) both stay visible.
LOOKS = (("#0072B2", "-"), ("#E69F00", "--"), ("#009E73", ":"))
LOG_SPAN = 100.0          # max / min of a panel's positive values above which its y-axis is logarithmic
NCOLS = 3


@dataclass(frozen=True)
class Panel:
    """One panel: its title (the quantity), its keys (one unit: the registry's) and their legend labels."""

    title: str
    keys: tuple[str, ...]
    labels: tuple[str, ...]
    log: bool = False     # always a log y-axis (else only when the values span more than LOG_SPAN)


PANELS = (
    Panel("cross-entropy loss", ("train/loss", "val/loss"), ("training (step means)", "validation")),
    Panel("accuracy", ("train/acc", "val/acc"), ("training (step means)", "validation")),
    Panel("density k/d", ("density/scheduled", "density/achieved"), ("scheduled", "achieved"), log=True),
    Panel("bytes sent per step", ("comm/bytes_sent", "comm/bytes_all_ranks"),
          ("per worker (max over ranks)", "all ranks (sum)")),
    Panel("time per step", ("time/step_s", "target/iter_s", "target/comm_s"),
          ("step, measured here", "iteration, modelled on the target", "communication, modelled on the target")),
    Panel("learning rate", ("lr",), ("lr",)),
)


def unit_of(panel: Panel) -> str:
    """The one unit of a panel's keys, from the registry ("1" reads "dimensionless"); ValueError if they differ."""
    units = {METRICS[k].unit for k in panel.keys}
    if len(units) != 1:
        raise ValueError(f"panel {panel.title!r} mixes units {sorted(units)}")
    unit = units.pop()
    return "dimensionless" if unit == "1" else unit


def is_constant(values: list[float]) -> bool:
    """Whether every value equals the first (to 1e-9 relative): a series with nothing to show over time."""
    return all(math.isclose(v, values[0], rel_tol=1e-9, abs_tol=0.0) for v in values)


def split(rows: list[dict]) -> tuple[list[tuple[Panel, list[int]]], dict[str, float]]:
    """The panels to draw, each with the indices of its keys that change, and the constant keys' values."""
    drawn, constant = [], {}
    for panel in PANELS:
        changing = []
        for i, key in enumerate(panel.keys):
            _, y = series(rows, key)
            if y and is_constant(y):
                constant[key] = y[0]
            elif y:
                changing.append(i)
        if changing:
            drawn.append((panel, changing))
    return drawn, constant


def _draw(ax: Axes, rows: list[dict], panel: Panel, picked: list[int]) -> list[float]:
    """Plot the panel's changing series on `ax`; return their values."""
    values = []
    for i in picked:
        x, y = series(rows, panel.keys[i])
        color, ls = LOOKS[i]
        ax.plot(x, y, color=color, ls=ls, marker="." if len(x) < 30 else None, label=panel.labels[i])
        values += y
    return values


def _warmup_inset(ax: Axes, rows: list[dict], panel: Panel, picked: list[int]) -> bool:
    """An inset of the first steps when the scheduled density changes (up to twice the first step at the final
    density); whether it drew one."""
    x, y = series(rows, "density/scheduled")
    if not x or is_constant(y):
        return False
    end = next(s for s, v in zip(x, y) if math.isclose(v, y[-1], rel_tol=1e-9))
    inset = ax.inset_axes((0.5, 0.42, 0.46, 0.42))
    for i in picked:
        sx, sy = series(rows, panel.keys[i])
        near = [(s, v) for s, v in zip(sx, sy) if s <= 2 * end]
        color, ls = LOOKS[i]
        inset.plot([s for s, _ in near], [v for _, v in near], color=color, ls=ls, marker=".")
    inset.set_yscale("log")
    inset.set_title(f"warm-up: steps <= {2 * end}", fontsize=7)
    inset.tick_params(labelsize=6)
    return True


def draw_run(summary: dict, rows: list[dict]) -> plt.Figure:
    """The run's figure: a panel per changing quantity (see the module docstring)."""
    drawn, constant = split(rows)
    nrows = max(1, math.ceil(len(drawn) / NCOLS))
    fig, axes = plt.subplots(nrows, NCOLS, figsize=(13, 3.6 * nrows + 0.6), squeeze=False)
    per_epoch = _steps_per_epoch(rows)
    for ax, (panel, picked) in zip(axes.flat, drawn):
        values = _draw(ax, rows, panel, picked)
        positive = [v for v in values if v > 0]
        if panel.log or (positive and max(positive) / min(positive) > LOG_SPAN):
            ax.set_yscale("log")
        inset = panel.keys[0] == "density/scheduled" and _warmup_inset(ax, rows, panel, picked)
        ax.set_title(panel.title)
        ax.set_ylabel(f"{panel.title} [{unit_of(panel)}]" + (", log scale" if ax.get_yscale() == "log" else ""))
        ax.set_xlabel(f"training step [{METRICS['step'].unit}]" + per_epoch)
        ax.legend(fontsize=8, loc="lower left" if inset else "best")
    for ax in list(axes.flat)[len(drawn):]:
        ax.remove()
    fig.suptitle(_title(summary) + "\n" + _constants_line(constant), fontsize=10)
    fig.tight_layout()
    return fig


def _steps_per_epoch(rows: list[dict]) -> str:
    """" (1 epoch = N steps)" from the last training record's step and fractional epoch, else ""."""
    last = next((r for r in reversed(rows) if "train/loss" in r and r.get("epoch")), None)
    if last is None or not isinstance(last.get("step"), (int, float)):
        return ""
    return f" (1 epoch = {round(last['step'] / last['epoch'])} steps)"


def _title(summary: dict) -> str:
    return (f"{summary.get('compressor')} S-SGD, P={summary.get('world_size')}, {summary.get('steps')} steps "
            f"({summary.get('epochs')} epochs), {summary.get('model')} on {summary.get('dataset')}, "
            f"cluster {summary.get('cluster')}")


def _constants_line(constant: dict[str, float]) -> str:
    """One line naming the series left out because they never changed, with their value and unit."""
    if not constant:
        return "every recorded series changes during the run"
    shown = ", ".join(f"{k} = {v:.4g}" + ("" if METRICS[k].unit == "1" else f" {METRICS[k].unit}")
                      for k, v in constant.items())
    return f"constant over the run (no panel): {shown}"
