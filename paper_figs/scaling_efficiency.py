"""(a) fig_scaling_efficiency: eff(P) = v_P / v_1 (`realdata_speedup`) for dense (no overlap, as the
trainer; and layer-wise WFBP), Top-k, gTop-k and Gaussian-k, P = 4 ... 1024 (P > 32 extrapolated), for
each profile on 1 GbE and 10 GbE (conf/cluster/32x1gbe.yaml, 32x10gbe.yaml); the paper's efficiencies as
markers; the calibrated curves (dash-dot, 1 GbE row; scaling_calibrated.py) when given; and the
efficiencies measured on the testbed's 1 Gbit links in replay mode (filled markers, 1 GbE row, P <= the
testbed's hosts; `make bench-testbed-replay`): the paper's GPU compute and selection times, the real
trainer's communication over real links; and the SimGrid replay (thin lines with diamonds, both rows, from
paper_figs/measured/simgrid_scaling.csv when present; `make simgrid-scaling`): whole iterations of the same
profiles simulated on the cluster's platform, the lab's own collective programs, the slowest rank's step.
"""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import style  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from scaling_model import P_MODEL, PAPER_LABEL, ROOT, SCHEMES, density_label, model_scheme  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402
from ssgd.perf.iteration import scaling_efficiency  # noqa: E402
from ssgd.perf.paper import P_SCALING, SCALING_SCHEMES, paper_model  # noqa: E402

MEASURED = ROOT / "paper_figs" / "measured" / "testbed_replay_1gbit.csv"   # tracked copy of the replay bench's CSV
SIMGRID = ROOT / "paper_figs" / "measured" / "simgrid_scaling.csv"          # make simgrid-scaling (tracked)
COLUMNS = ["profile", "network", "source", "scheme", "P", "efficiency", "per_worker_samples_per_s"]


def load_measured(path: Path | None) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """{(profile, scheme): [(P, eff_testbed), ...]} of a `bench/testbed_replay.py` CSV (its ok rows); empty
    when `path` is None or missing. ValueError naming the file when it lacks the columns."""
    if path is None or not path.is_file():
        return {}
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"profile", "scheme", "P", "status", "eff_testbed"}
    if rows and not need <= set(rows[0]):
        raise ValueError(f"--measured {path}: needs the columns {', '.join(sorted(need))} "
                         "(a CSV of make bench-testbed-replay)")
    got: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in rows:
        if r["status"] == "ok":
            got.setdefault((r["profile"], r["scheme"]), []).append((int(r["P"]), float(r["eff_testbed"])))
    return {key: sorted(points) for key, points in got.items()}



def load_simgrid(path: Path | None) -> dict[tuple[str, str, str], list[tuple[int, float]]]:
    """{(network, profile, scheme): [(P, eff_simgrid), ...]} of a `make simgrid-scaling` CSV
    (`ssgd.tools.simgrid_replay`); empty when `path` is None or missing. ValueError naming the file when it
    lacks the columns."""
    if path is None or not path.is_file():
        return {}
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"network", "profile", "scheme", "P", "efficiency"}
    if rows and not need <= set(rows[0]):
        raise ValueError(f"{path}: needs the columns {', '.join(sorted(need))} (a CSV of make simgrid-scaling)")
    got: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for r in rows:
        got.setdefault((r["network"], r["profile"], r["scheme"]), []).append((int(r["P"]), float(r["efficiency"])))
    return {key: sorted(points) for key, points in got.items()}


def fig_efficiency(profs: list, nets: list[tuple[str, AlphaBeta]], out: Path,
                   calibrations: dict | None = None,
                   measured: dict[tuple[str, str], list[tuple[int, float]]] | None = None,
                   simgrid: dict[tuple[str, str, str], list[tuple[int, float]]] | None = None) -> list[Path]:
    """fig_scaling_efficiency{,_col1,_col2}.{png,pdf} and .csv: one panel per (network, profile) (double
    column: a row per network; single column: a row per profile); `calibrations` maps a profile name to
    its `scaling_calibrated.Calibration`, `measured` is `load_measured`'s, `simgrid` is `load_simgrid`'s (None:
    the tracked SIMGRID CSV, when present)."""
    calibrations, measured = calibrations or {}, measured or {}
    simgrid = load_simgrid(SIMGRID) if simgrid is None else simgrid
    rows: list[list] = []

    def draw(width: float) -> plt.Figure:
        rows.clear()
        wide = width >= 5
        nr, nc = (len(nets), len(profs)) if wide else (len(profs), len(nets))
        fig, axes = style.figure(width, nr, nc, 1.45 if wide else 1.3, 0.75 if wide else 1.3, sharex=True, sharey=True)
        for i, (net_name, net) in enumerate(nets):
            for j, prof in enumerate(profs):
                ax, pm = (axes[i][j] if wide else axes[j][i]), paper_model(prof.name)
                rows.extend(panel(ax, prof, pm, net_name, net, calibrations.get(prof.name), measured))
                rows.extend(simgrid_series(ax, prof, net_name, simgrid))
                style_panel(ax, prof, pm, net_name)
        for ax in axes[-1]:
            ax.set_xlabel("workers P")
        for ax in axes[:, 0]:
            ax.set_ylabel("efficiency (%)")
        legends(fig, bool(calibrations), bool(measured), bool(simgrid))
        return fig

    return style.save(draw, out, "fig_scaling_efficiency", COLUMNS, rows)


def panel(ax, prof, pm, net_name: str, net: AlphaBeta, cal, measured: dict) -> list[list]:
    """Every curve and marker of one (network, profile) panel; their CSV rows (paper, calibrated and
    testbed numbers on the 1 GbE panels only: the paper's cluster)."""
    rows = model_curves(ax, prof, net_name, net)
    if net_name == "1GbE":
        rows += paper_markers(ax, prof, pm, net_name)
        rows += calibrated_curves(ax, prof, pm, net_name, cal)
        rows += measured_markers(ax, prof, net_name, measured)
    return rows


def model_curves(ax, prof, net_name: str, net: AlphaBeta) -> list[list]:
    """The model's efficiency of every scheme of SCHEMES over P_MODEL; their CSV rows."""
    rows = []
    for scheme, label, *_ in SCHEMES:
        eff = [scaling_efficiency(prof, model_scheme(scheme, prof.d), net, P) for P in P_MODEL]
        ax.plot(P_MODEL, np.array(eff) * 100, **style.sourced(scheme, "model")[0].kw(), label=f"model: {label}")
        rows += [[prof.name, net_name, "model", scheme, P, e, prof.batch_size / prof.single_worker_seconds() * e]
                 for P, e in zip(P_MODEL, eff)]
    return rows


def paper_markers(ax, prof, pm, net_name: str) -> list[list]:
    """The paper's efficiencies (open markers) of a profile named like a paper model."""
    rows: list[list] = []
    if pm is None:
        return rows
    for scheme in SCALING_SCHEMES:
        eff = pm.efficiency(scheme)
        ax.plot(P_SCALING, np.array(eff) * 100, **style.sourced(scheme, "paper")[0].kw(),
                label=f"paper: {PAPER_LABEL[scheme]}")
        rows += [[prof.name, net_name, "paper", scheme, P, e, pm.v1 * e] for P, e in zip(P_SCALING, eff)]
    return rows


def calibrated_curves(ax, prof, pm, net_name: str, cal) -> list[list]:
    """The calibrated model's efficiencies (dash-dot) at the paper's P, when the profile has a calibration."""
    rows: list[list] = []
    if cal is None:
        return rows
    for scheme in SCALING_SCHEMES:
        eff = [cal.efficiency(scheme, P) for P in P_SCALING]
        ax.plot(P_SCALING, np.array(eff) * 100, **style.sourced(scheme, "calibrated")[0].kw(ms=3, lw=0.9),
                label=f"calibrated (fit P = 4, 8): {PAPER_LABEL[scheme]}")
        rows += [[prof.name, net_name, "calibrated", scheme, P, e, pm.v1 * e] for P, e in zip(P_SCALING, eff)]
    return rows


def measured_markers(ax, prof, net_name: str, measured: dict) -> list[list]:
    """The testbed's replayed efficiencies (stars) of the profile, where the CSV has them."""
    rows: list[list] = []
    for i, scheme in enumerate(SCALING_SCHEMES):
        points = measured.get((prof.name, scheme), [])
        if points:
            ps, eff = zip(*points)
            lk, factor = style.sourced(scheme, "testbed", i, len(SCALING_SCHEMES))
            ax.plot(np.array(ps) * factor, np.array(eff) * 100, **lk.kw(mec="white", mew=0.4), zorder=3,
                    label=f"testbed, replay: {PAPER_LABEL[scheme]}")
            rows += [[prof.name, net_name, "testbed", scheme, P, e, prof.batch_size / prof.single_worker_seconds() * e]
                     for P, e in points]
    return rows


def simgrid_series(ax, prof, net_name: str, simgrid: dict) -> list[list]:
    """The SimGrid replay's efficiencies (thin lines, diamonds) of the profile on this network, where the CSV
    has them: whole iterations simulated on the cluster's platform (`make simgrid-scaling`)."""
    rows: list[list] = []
    for scheme in SCALING_SCHEMES:
        points = simgrid.get((net_name, prof.name, scheme), [])
        if points:
            ps, eff = zip(*points)
            ax.plot(ps, np.array(eff) * 100, **style.sourced(scheme, "simgrid")[0].kw(ms=2.5, lw=0.8),
                    label=f"SimGrid, simulated: {PAPER_LABEL[scheme]}")
            rows += [[prof.name, net_name, "simgrid", scheme, P, e, prof.batch_size / prof.single_worker_seconds() * e]
                     for P, e in points]
    return rows


def style_panel(ax, prof, pm, net_name: str) -> None:
    """Log axes, the extrapolated range (P > 32) in grey, a short title."""
    ax.axvspan(32, P_MODEL[-1], color="0.93", zorder=0, lw=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks([4, 32, 256], ["4", "32", "256"])
    ax.set_yscale("log")
    ax.set_ylim(0.3, 130)
    ax.set_yticks([1, 10, 100], ["1", "10", "100"])
    ax.minorticks_off()
    ax.grid(True, which="major", alpha=0.3, lw=0.5)
    name = (pm.title if pm is not None else prof.name).split(" (")[0]
    ax.set_title(f"{name}, {net_name}")


def legends(fig, calibrated: bool, measured: bool, simulated: bool = False) -> None:
    """Two legends under the panels: the schemes (colour and line), the sources (marker and line)."""
    wide = fig.get_figwidth() >= 5
    schemes = [Line2D([], [], **style.look(s).kw(marker="None")) for s, *_ in SCHEMES]
    style.legend_below(fig, schemes, [label for _, label, *_ in SCHEMES], "lower left" if wide else "lower center",
                       ncol=2, title=f"scheme (rho = {density_label()})")
    sources = ["model"] + ["paper"] + (["calibrated"] if calibrated else []) + (["testbed"] if measured else []) \
        + (["simgrid"] if simulated else [])
    handles = [Line2D([], [], **style.Look(style.GREY, style.SOURCES[s].ls or "-",
                                           "o" if style.SOURCES[s].marker == "scheme" else style.SOURCES[s].marker,
                                           style.SOURCES[s].filled).kw()) for s in sources]
    labels = [style.SOURCES[s].label for s in sources]
    style.legend_below(fig, handles, labels, "lower right" if wide else "upper center", ncol=2,
                       title="source (grey band: P > 32, extrapolated)")
