"""Scaling figures of the gTop-k paper from the iteration-time model, next to the paper's numbers.

    python paper_figs/fig_scaling.py [--out DIR] [--profile PATH ...] [--no-shipped] [--no-calibrated]
                                     [--link ALPHA BETA | --link-from YAML]
                                     (default DIR: paper_figs/out; `make fig-scaling [OUT=DIR]`)

--profile PATH (repeatable) adds a measured profile (`python -m ssgd.tools.measure <overrides> out=PATH`)
to every figure and to the ratio table beside the shipped ones (--no-shipped: instead of them); the
paper's markers appear only for profiles named like the paper's models.

Paper: Shi et al., ICDCS 2019 (arXiv:1901.04359); its numbers (`ssgd.perf.paper`) are those of the
authors' plotting script hclhkbu/gtopkssgd scripts/icdcs2019/communication.py. The schemes are read
from conf/compressor/<name>.yaml (`ssgd.tools.schemes`) at each YAML's density (0.001).

(a) fig_scaling_efficiency: eff(P) = v_P / v_1 (`realdata_speedup`) for dense (no overlap, as the
    trainer; and layer-wise WFBP), Top-k, gTop-k and Gaussian-k, P = 4 ... 1024 (P > 32 extrapolated),
    for each shipped profile (ssgd.perf.profiles) on 1 GbE and 10 GbE (conf/cluster/32x1gbe.yaml,
    32x10gbe.yaml); the paper's efficiencies as markers; with the calibrated mode (default) also the
    calibrated curves (dash-dot, 1 GbE row); and, when --measured names a CSV of `make bench-testbed-replay`
    (default: paper_figs/measured/testbed_replay_1gbit.csv, its tracked copy), the efficiencies measured on
    the testbed's 1 Gbit links in replay mode (filled markers, 1 GbE row, P <= the testbed's hosts):
    the paper's GPU compute and selection times, the real trainer's communication over real links.
(b) fig_comm_vs_P: communication time, m = 25 * 2**20, rho = 0.001, P = 4 ... 128: our alpha-beta
    models (ssgd.perf.cost) and the paper's closed forms, both published gTop-k forms (the
    hclhkbu/gtopkssgd README before and after 2019-07-09; `plot_allreduce_comparison`).
(c) fig_breakdown_32: computation / compression / communication shares of one gTop-k iteration at
    32 workers on 1 GbE, model vs paper (`plot_breakdown`); the model runs at the breakdown's batch
    size (compute scaled linearly from the profile, `rescale_batch`).
(d) calibrated mode (on unless --no-calibrated): for each paper model, effective constants (compute,
    top-k selection time, network alpha and beta; `scaling_fit.fit_nonnegative`) fitted to the
    paper's dense, Top-k and gTop-k times at P = 4 and 8 together, then P = 16 and 32 predicted:
    scaling_calibrated_points.csv (every point), scaling_calibrated_errors.csv (held-out errors per
    model and scheme, with the fit-free growth test that says why a miss cannot be fixed by any
    constants) and scaling_calibrated_constants.csv (the constants against the cluster's and the
    paper's breakdown). The errors CSV and table also hold what the fit has to beat, each from one
    curve's own P = 4, 8 times (`baseline_predictions`): the naive "mean" (t4 + t8) / 2 and "log-line"
    (the line in log2 P), and "pinned": alpha and beta fixed to the measured testbed link
    (TESTBED_LINK; --link ALPHA BETA or --link-from a conf/cluster-style YAML for another) with one
    constant c >= 0 per scheme fitted; then one line counting the pairs each gets within 25 %.
Each figure: PNG + PDF + the CSV that was plotted. Also prints (and writes ratios_p32.csv) the
gTop-k/dense and gTop-k/Top-k efficiency ratios at P = 32, model vs paper, and the calibrated tables.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import scaling_fit as fit  # noqa: E402
from figlib import save, write_csv  # noqa: E402
from ssgd.perf import cost, profiles  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402
from ssgd.perf.iteration import (Profile, SchemeCost, iteration_seconds, iteration_time, rescale_batch,  # noqa: E402
                                 scaling_efficiency)
from ssgd.perf.paper import P_SCALING, PAPER_MODELS, SCALING_SCHEMES, PaperModel, paper_model  # noqa: E402
from ssgd.tools import schemes as conf_schemes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = (("1GbE", "32x1gbe"), ("10GbE", "32x10gbe"))
MEASURED = ROOT / "paper_figs" / "measured" / "testbed_replay_1gbit.csv"   # tracked copy of the replay bench's CSV
P_MODEL = tuple(2**i for i in range(2, 11))          # 4 ... 1024
P_COMM = (4, 8, 16, 32, 64, 128)
M_COMM, RHO = 25 * 2**20, 0.001
SCHEMES = (("dense", "Dense (no overlap)", "C0", "-"), ("dense_wfbp", "Dense, layer-wise WFBP", "C0", ":"),
           ("topk", "Top-k", "C1", "-"), ("gtopk", "gTop-k", "C2", "-"), ("gaussiank", "Gaussian-k", "C3", "--"))
PAPER_LABEL = MappingProxyType({"dense": "Dense (Horovod)", "topk": "Top-k", "gtopk": "gTop-k"})
COLOR = MappingProxyType({"dense": "C0", "topk": "C1", "gtopk": "C2"})
FIT_P, HELD_OUT, GOAL = (4, 8), (16, 32), 0.25       # calibrated mode: fitted and predicted P, error goal
GROWTH_P = (*FIT_P, HELD_OUT[-1])                    # the fit-free growth test: (t32 - t8) / (t8 - t4)
# The measured testbed link (docs/testbed.md): mpi4py ping-pong between hosts 1 and 2 of the 1 Gbit/s
# testbed (`make alphabeta-testbed`, fitted by regime, `ssgd.perf.alphabeta.fit_alpha_beta_regimes`), 2026-12-05,
# ranks no longer pinned to one core (8.59e-5 s before). The "pinned" predictor fixes alpha and beta to these
# (or to --link / --link-from).
TESTBED_ALPHA_S, TESTBED_BETA_S_PER_BYTE = 2.54e-5, 8.44e-9
TESTBED_LINK = AlphaBeta(TESTBED_ALPHA_S, TESTBED_BETA_S_PER_BYTE)
PREDICTORS = (("mean", "mean"), ("logline", "log-line"), ("pinned", "pinned"))   # CSV prefix, printed name


@lru_cache(maxsize=None)
def model_scheme(label: str, d: int) -> SchemeCost:
    """The model's scheme of a SCHEMES label for a d-parameter model: conf/compressor/<label>.yaml at
    its density; "dense_wfbp" is dense.yaml with the layer-wise overlapped allreduce."""
    if label == conf_schemes.LAYERWISE:
        return conf_schemes.scheme("dense", d, layerwise_overlap=True)
    return conf_schemes.scheme(label, d)


def load_network(cluster: str) -> AlphaBeta:
    """alpha/beta (seconds, seconds per byte) of conf/cluster/<cluster>.yaml."""
    cfg = OmegaConf.load(ROOT / "conf" / "cluster" / f"{cluster}.yaml")
    return AlphaBeta(float(cfg.network.alpha), float(cfg.network.beta))


def paper_efficiency(name: str) -> dict[str, list[float]]:
    """eff(P) = v_P / v_1 of the paper's lists at P = 4, 8, 16, 32 (`realdata_speedup`)."""
    pm = paper_model(name)
    return {scheme: list(pm.efficiency(scheme)) for scheme in SCALING_SCHEMES}


# --- (a) scaling efficiency ------------------------------------------------------------------------
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


def fig_efficiency(profs: list, nets: list[tuple[str, AlphaBeta]], out: Path,
                   calibrations: dict[str, "Calibration"] | None = None,
                   measured: dict[tuple[str, str], list[tuple[int, float]]] | None = None) -> list[Path]:
    calibrations, measured = calibrations or {}, measured or {}
    rows: list[list] = []
    fig, axes = plt.subplots(len(nets), len(profs), figsize=(3.3 * len(profs), 3.0 * len(nets)),
                             sharex=True, sharey=True, squeeze=False)
    for i, (net_name, net) in enumerate(nets):
        for j, prof in enumerate(profs):
            ax = axes[i][j]
            for scheme, label, color, style in SCHEMES:
                eff = [scaling_efficiency(prof, model_scheme(scheme, prof.d), net, P) for P in P_MODEL]
                ax.plot(P_MODEL, np.array(eff) * 100, style, color=color, label=f"model: {label}", lw=1.4)
                rows += [[prof.name, net_name, "model", scheme, P, e, prof.batch_size / prof.single_worker_seconds() * e]
                         for P, e in zip(P_MODEL, eff)]
            pm = paper_model(prof.name)
            if net_name == "1GbE" and pm is not None:
                for scheme, marker in (("dense", "o"), ("topk", "s"), ("gtopk", "^")):
                    eff = pm.efficiency(scheme)
                    ax.plot(P_SCALING, np.array(eff) * 100, marker, color=COLOR[scheme], mfc="none", ms=6,
                            label=f"paper: {PAPER_LABEL[scheme]}")
                    rows += [[prof.name, net_name, "paper", scheme, P, e, pm.v1 * e] for P, e in zip(P_SCALING, eff)]
            cal = calibrations.get(prof.name)
            if net_name == "1GbE" and cal is not None:
                for scheme in SCALING_SCHEMES:
                    eff = [cal.efficiency(scheme, P) for P in P_SCALING]
                    ax.plot(P_SCALING, np.array(eff) * 100, "-.", color=COLOR[scheme], lw=1.0, marker="x", ms=4,
                            label=f"calibrated (fit P = 4, 8): {PAPER_LABEL[scheme]}")
                    rows += [[prof.name, net_name, "calibrated", scheme, P, e, pm.v1 * e]
                             for P, e in zip(P_SCALING, eff)]
            for scheme in SCALING_SCHEMES if net_name == "1GbE" else ():
                points = measured.get((prof.name, scheme), [])
                if points:
                    ps, eff = zip(*points)
                    ax.plot(ps, np.array(eff) * 100, "*", color=COLOR[scheme], ms=9, ls="none",
                            label=f"testbed, replay: {PAPER_LABEL[scheme]}")
                    rows += [[prof.name, net_name, "testbed", scheme, P, e, prof.batch_size / prof.single_worker_seconds() * e]
                             for P, e in points]
            ax.axvspan(32, P_MODEL[-1], color="0.92", zorder=0)
            ax.set_xscale("log", base=2)
            ax.set_xticks([4, 16, 64, 256, 1024])
            ax.set_xticklabels(["4", "16", "64", "256", "1024"])
            ax.set_yscale("log")
            ax.set_ylim(0.3, 130)
            ax.set_yticks([0.5, 1, 2, 5, 10, 20, 50, 100])
            ax.set_yticklabels(["0.5", "1", "2", "5", "10", "20", "50", "100"])
            ax.grid(True, which="major", alpha=0.3)
            title = pm.title if pm is not None else prof.name
            ax.set_title(f"{title}, bs {prof.batch_size}\n{net_name}", fontsize=9)
            if i == len(nets) - 1:
                ax.set_xlabel("workers P (grey: extrapolated)")
            if j == 0:
                ax.set_ylabel("scaling efficiency (%)")
    legend: dict[str, object] = {}
    for ax in axes.flat:                                 # every label once, whichever panel has it
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=4, fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.09 if calibrations else -0.06))
    fig.suptitle(f"Scaling efficiency v_P / v_1, rho = {density_label()} (markers: gTop-k paper, 1 GbE, P <= 32"
                 + ("; dash-dot: alpha-beta model calibrated to the paper's P = 4, 8" if calibrations else "")
                 + ("; stars: measured on the testbed's 1 Gbit links, compute replayed)" if measured else ")"),
                 fontsize=10)
    fig.tight_layout()
    return save(fig, out, "fig_scaling_efficiency",
                ["profile", "network", "source", "scheme", "P", "efficiency", "per_worker_samples_per_s"], rows)


def density_label() -> str:
    """The sparse schemes' densities of conf/compressor (one value, e.g. "0.001", when they agree)."""
    values = sorted({float(conf_schemes.load_config(s).density) for s, *_ in SCHEMES
                     if s != conf_schemes.LAYERWISE and float(conf_schemes.load_config(s).density) < 1})
    return "/".join(f"{v:g}" for v in values)


# --- (b) communication time vs P -----------------------------------------------------------------
def paper_gtopk_old(net: AlphaBeta, P: np.ndarray, k: int) -> np.ndarray:
    """2 alpha log2 P + 4 k log2 P beta_element (hclhkbu/gtopkssgd README before 2019-07-09)."""
    return 2 * net.alpha * np.log2(P) + 4 * k * np.log2(P) * cost.ELEMENT_BYTES * net.beta


def paper_gtopk_new(net: AlphaBeta, P: np.ndarray, k: int) -> np.ndarray:
    """alpha log2 P + 2 k log2 P beta_element (hclhkbu/gtopkssgd README since 2019-07-09)."""
    return net.alpha * np.log2(P) + 2 * k * np.log2(P) * cost.ELEMENT_BYTES * net.beta


def comm_curves(net: AlphaBeta) -> dict[str, np.ndarray]:
    """Seconds per curve of figure (b), over P_COMM."""
    P = np.array(P_COMM, dtype=float)
    k = max(int(M_COMM * RHO), 1)
    return {
        "model: dense ring allreduce": np.array([cost.dense_seconds(net, p, M_COMM) for p in P_COMM]),
        "model: Top-k ring allgather": np.array([cost.sparse_allgather_seconds(net, [k] * p) for p in P_COMM]),
        "model: gTop-k tree reduce + bcast": np.array([cost.gtopk_seconds(net, p, k) for p in P_COMM]),
        "paper: dense 2(P-1)a + 2(P-1)/P m b": np.array([cost.paper_dense_seconds(net, p, M_COMM) for p in P_COMM]),
        "paper: Top-k a logP + 2(P-1)k b": np.array([cost.paper_topk_seconds(net, p, k) for p in P_COMM]),
        "paper: gTop-k 2a logP + 4k logP b (old)": paper_gtopk_old(net, P, k),
        "paper: gTop-k a logP + 2k logP b (new)": paper_gtopk_new(net, P, k),
    }


def fig_comm(nets: list[tuple[str, AlphaBeta]], out: Path) -> list[Path]:
    styles = {"dense": "C0", "Top-k": "C1", "gTop-k": "C2"}
    rows: list[list] = []
    fig, axes = plt.subplots(1, len(nets), figsize=(5.2 * len(nets), 4.0), squeeze=False)
    for ax, (net_name, net) in zip(axes[0], nets):
        for label, sec in comm_curves(net).items():
            color = styles[label.split(" ")[1]]
            model = label.startswith("model")
            old = "(old)" in label
            ax.plot(P_COMM, sec * 1e3, "-" if model else ("--" if old or "gTop-k" not in label else ":"),
                    color=color, marker="o" if model else ("x" if old or "gTop-k" not in label else "+"),
                    mfc="none", ms=7 if model else 6, lw=1.6 if model else 1.1, label=label)
            rows += [[net_name, label, p, s * 1e3] for p, s in zip(P_COMM, sec)]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(P_COMM)
        ax.set_xticklabels([str(p) for p in P_COMM])
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel("workers P")
        ax.set_ylabel("communication time (ms)")
        ax.set_title(f"{net_name} (alpha = {net.alpha * 1e6:.4g} us, beta = {net.beta * 1e9:.4g} ns/B), "
                     f"m = 25*2^20, rho = {RHO}", fontsize=9)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return save(fig, out, "fig_comm_vs_P", ["network", "curve", "P", "milliseconds"], rows)


# --- (c) time breakdown at 32 workers --------------------------------------------------------------
def fig_breakdown(profs: list, net: AlphaBeta, out: Path) -> list[Path]:
    rows: list[list] = []
    labels, parts = [], []
    for prof in profs:
        pm = paper_model(prof.name)
        if pm is not None and pm.breakdown_s is not None:
            labels.append(f"{prof.name}\npaper")
            parts.append(pm.breakdown_s)
            rows.append([prof.name, "paper", pm.breakdown_samples, *pm.breakdown_s])
            bs = pm.breakdown_samples
        else:
            bs = prof.batch_size
        t = iteration_time(rescale_batch(prof, bs), model_scheme("gtopk", prof.d), net, 32)
        labels.append(f"{prof.name}\nmodel")
        parts.append((t.compute_s, t.compress_s, t.comm_s))
        rows.append([prof.name, "model", bs, t.compute_s, t.compress_s, t.comm_s])
    shares = np.array([np.array(p) / sum(p) * 100 for p in parts])
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(labels), 4.2))
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for col, (name, color) in enumerate((("Computation", "C0"), ("Compression", "C1"), ("Communication", "C3"))):
        ax.bar(x, shares[:, col], 0.7, bottom=bottom, color=color, label=name,
               hatch=["" if "paper" in lab else "//" for lab in labels], edgecolor="white")
        bottom += shares[:, col]
    for xi, p in zip(x, parts):
        ax.text(xi, 101, f"{sum(p):.3g}s", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylim(0, 112)
    ax.set_ylabel("share of one iteration (%)")
    ax.set_title("gTop-k, 32 workers, 1 GbE: paper (plain) vs model (hatched); labels: s/iteration", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return save(fig, out, "fig_breakdown_32",
                ["profile", "source", "samples_per_iteration", "computation_s", "compression_s", "communication_s"],
                rows)


# --- ratio table -----------------------------------------------------------------------------------
def ratio_rows(profs: list, nets: list[tuple[str, AlphaBeta]]) -> list[list]:
    """[profile, network, gTop-k/dense, gTop-k/dense_wfbp, gTop-k/Top-k (model), paper gTop-k/dense, paper gTop-k/Top-k]."""
    rows = []
    for prof in profs:
        paper = paper_efficiency(prof.name) if paper_model(prof.name) is not None else None
        pd = paper["gtopk"][-1] / paper["dense"][-1] if paper else math.nan
        pt = paper["gtopk"][-1] / paper["topk"][-1] if paper else math.nan
        for net_name, net in nets:
            e = {s: scaling_efficiency(prof, model_scheme(s, prof.d), net, 32) for s in ("dense", "dense_wfbp", "topk", "gtopk")}
            rows.append([prof.name, net_name, e["gtopk"] / e["dense"], e["gtopk"] / e["dense_wfbp"],
                         e["gtopk"] / e["topk"], e["dense"], e["topk"], e["gtopk"], pd, pt])
    return rows


def print_ratios(rows: list[list]) -> None:
    print(f"Efficiency ratios at P = 32 (model: rho = {density_label()}; paper: `realdata_speedup`, 1 GbE)")
    w = max([9, *(len(row[0]) for row in rows)])
    print(f"{'model':<{w}} {'net':<6} {'gTop/dense':>10} {'gTop/WFBP':>9} {'gTop/Top-k':>10} "
          f"{'eff d/t/g (%)':>18} | {'paper gTop/dense':>16} {'paper gTop/Top-k':>16}")
    for name, net, rd, rw, rt, ed, et, eg, pd, pt in rows:
        print(f"{name:<{w}} {net:<6} {rd:>10.2f} {rw:>9.2f} {rt:>10.2f} "
              f"{f'{ed * 100:.1f}/{et * 100:.1f}/{eg * 100:.1f}':>18} | {pd:>16.2f} {pt:>16.2f}")


# --- (d) calibrated mode -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Calibration:
    """The iteration model with effective constants fitted to one paper model's P = 4, 8 times.

    constants: `scaling_fit` names -> value (compute_s, selection_s[exact_topk], alpha_s,
    beta_s_per_byte); schemes: the model's scheme of each of the paper's curves (SCALING_SCHEMES).
    """

    paper: PaperModel
    d: int
    schemes: MappingProxyType
    constants: MappingProxyType

    def profile(self) -> Profile:
        """A one-layer profile holding the fitted compute (t_f = t_b / 2) and selection times."""
        compute = self.constants.get(fit.COMPUTE, 0.0)
        return Profile(name=f"{self.paper.name}-calibrated", batch_size=self.paper.batch_size, layers=("all",),
                       params=(self.d,), forward_s=(compute / 3,), backward_s=(compute * 2 / 3,),
                       select_s=self.constants.get(fit.selection_key("exact_topk"), 0.0),
                       threshold_select_s=self.constants.get(fit.selection_key("linear"), 0.0),
                       derivation="fitted by paper_figs/fig_scaling.py to the gTop-k paper's P = "
                                  f"{' and '.join(map(str, FIT_P))} times")

    def network(self) -> AlphaBeta:
        return AlphaBeta(self.constants.get(fit.ALPHA, 0.0), self.constants.get(fit.BETA, 0.0))

    def seconds(self, scheme: str, P: int) -> float:
        """Calibrated seconds per iteration: the iteration model on the fitted profile and network."""
        return iteration_seconds(self.profile(), self.schemes[scheme], self.network(), P)

    def efficiency(self, scheme: str, P: int) -> float:
        """v_P / v_1 with the paper's v_1, as the paper's markers."""
        return self.paper.batch_size / self.seconds(scheme, P) / self.paper.v1

    def comm_seconds(self, scheme: str, P: int) -> float:
        """The scheme's communication with the fitted alpha and beta."""
        return iteration_time(self.profile(), self.schemes[scheme], self.network(), P).comm_s


def calibrate(pm: PaperModel, d: int) -> Calibration:
    """Fit compute, top-k selection, alpha and beta (all >= 0) to the paper's dense, Top-k and gTop-k
    seconds per iteration at P = FIT_P, the schemes as conf/compressor builds them for d parameters."""
    schemes = {s: model_scheme(s, d) for s in SCALING_SCHEMES}
    rows, times = [], []
    for s in SCALING_SCHEMES:
        for P, t in zip(P_SCALING, pm.seconds(s)):
            if P in FIT_P:
                rows.append(fit.features(schemes[s], P, d))
                times.append(t)
    return Calibration(pm, d, MappingProxyType(schemes), MappingProxyType(fit.fit_nonnegative(rows, times)))


def best_single_scheme_error(scheme: SchemeCost, pm: PaperModel, name: str, d: int) -> float:
    """Largest |relative error| of the best fit of c + alpha L + beta B (>= 0) to all four paper points
    of one scheme: how close any constants of this collective can come."""
    rows = [{k: v for k, v in fit.features(scheme, P, d).items() if not k.startswith("selection")}
            for P in P_SCALING]
    times = pm.seconds(name)
    constants = fit.fit_nonnegative(rows, times)
    return max(abs(fit.predict(r, constants) / t - 1) for r, t in zip(rows, times))


def baseline_predictions(pm: PaperModel, name: str, scheme: SchemeCost, d: int,
                         link: AlphaBeta = TESTBED_LINK) -> tuple[dict[str, dict[int, float]], float]:
    """What a calibrated model has to beat, for one paper curve (`name`), from its P = FIT_P times only.

    Returns ({predictor: {P: seconds} at P_SCALING}, c) for the predictors of PREDICTORS:
      * "mean": t(P) = mean(t4, t8), the same at every P;
      * "logline": the straight line through (log2 4, t4) and (log2 8, t8), at log2 P;
      * "pinned": t(P) = c + alpha L_s(P) + beta B_s(P) with alpha and beta pinned to `link` (the
        measured testbed link by default) and only c >= 0 (compute + selection + any P-independent
        overhead of this scheme) fitted to t4 and t8 in relative least squares
        (`scaling_fit.fit_pinned_constant`); L_s, B_s as in `scaling_fit.latency_and_bytes`.
    """
    paper = dict(zip(P_SCALING, pm.seconds(name)))
    fitted = [paper[P] for P in FIT_P]
    comm = {P: link.alpha * L + link.beta * B
            for P in P_SCALING for L, B in [fit.latency_and_bytes(scheme, P, d)]}
    c = fit.fit_pinned_constant([comm[P] for P in FIT_P], fitted)
    mean = fit.mean_of(fitted)
    return {"mean": {P: mean for P in P_SCALING},
            "logline": {P: fit.log2_line(FIT_P[0], fitted[0], FIT_P[1], fitted[1], P) for P in P_SCALING},
            "pinned": {P: c + comm[P] for P in P_SCALING}}, c


def baseline_columns(pm: PaperModel, name: str, scheme: SchemeCost, d: int, link: AlphaBeta = TESTBED_LINK) -> dict:
    """The CSV columns of `baseline_predictions`: each predictor's held-out errors and whether both are
    within GOAL (the rule of held_out_within_goal), the pinned link, its fitted c and its fit errors."""
    pred, c = baseline_predictions(pm, name, scheme, d, link)
    paper = dict(zip(P_SCALING, pm.seconds(name)))
    row: dict = {}
    for key, _ in PREDICTORS:
        err = {P: pred[key][P] / paper[P] - 1 for P in HELD_OUT}
        row.update({f"{key}_error_P{P}": err[P] for P in HELD_OUT})
        row[f"{key}_within_goal"] = all(abs(e) <= GOAL for e in err.values())
    row.update({f"pinned_error_P{P}": pred["pinned"][P] / paper[P] - 1 for P in FIT_P})
    row.update({"pinned_constant_s": c, "pinned_alpha_s": link.alpha, "pinned_beta_s_per_byte": link.beta})
    return row


def calibrated_rows(cal: Calibration, link: AlphaBeta = TESTBED_LINK) -> list[dict]:
    """One row per scheme: errors at every P, the growth test and, for a miss, the measured reason;
    then the naive and pinned-link predictors' columns (`baseline_columns`, alpha and beta = `link`)."""
    pm, out = cal.paper, []
    for s in SCALING_SCHEMES:
        paper = dict(zip(P_SCALING, pm.seconds(s)))
        err = {P: cal.seconds(s, P) / paper[P] - 1 for P in P_SCALING}
        t1, t2, t3 = (paper[P] for P in GROWTH_P)
        growth = fit.growth_ratio(t1, t2, t3)
        lo, hi = fit.growth_range(cal.schemes[s], GROWTH_P, cal.d)
        # any model through the paper's P = 4 and 8 points has t32 in t8 + [lo, hi] (t8 - t4)
        reach = [t2 + g * (t2 - t1) for g in (lo, hi)]
        bound = 0.0 if reach[0] <= t3 <= reach[1] else min((r / t3 - 1 for r in reach), key=abs)
        best = best_single_scheme_error(cal.schemes[s], pm, s, cal.d)
        ok = all(abs(err[P]) <= GOAL for P in HELD_OUT)
        if ok:
            reason = ""
        elif math.isnan(growth):
            reason = f"the paper's time does not grow from P = 4 to 8 ({t1:.4g} -> {t2:.4g} s)"
        elif not lo <= growth <= hi:
            allowed = f"{lo:.3g}" if hi == lo else f"{lo:.3g} to {hi:.3g}"
            reason = f"paper's (t32 - t8) / (t8 - t4) = {growth:.3g}, this collective's alpha-beta model allows {allowed}: "
            if abs(bound) > GOAL:
                reason += (f"any model through the paper's P = 4, 8 points is off by {bound:+.0%} or more at P = 32 "
                           f"(fitted to all four points, not a prediction: {best:.0%})")
            else:
                reason += (f"the best a model through the paper's P = 4, 8 points can do at P = 32 is {bound:+.0%}; "
                           f"the joint fit (constants shared with dense and gTop-k) gives {err[32]:+.0%}")
        elif best > GOAL:
            reason = f"no constants fit all four paper points within {GOAL:.0%} (best: {best:.0%})"
        else:
            reason = (f"the constants shared with the other schemes: this scheme alone fits all four points "
                      f"within {best:.0%}")
        out.append({"model": pm.name, "scheme": s, **{f"error_P{P}": err[P] for P in P_SCALING},
                    "held_out_within_goal": ok, "paper_growth_4_8_32": growth, "model_growth_min": lo,
                    "model_growth_max": hi, "P32_error_bound_through_P4_P8": bound,
                    "best_fit_all_P_max_error": best, "reason": reason,
                    **baseline_columns(pm, s, cal.schemes[s], cal.d, link)})
    return out


def constants_row(cal: Calibration, cluster: AlphaBeta) -> dict:
    """The fitted constants next to the cluster's alpha-beta and the paper's own numbers."""
    pm, c = cal.paper, cal.constants
    comm = cal.comm_seconds("gtopk", 32)
    breakdown = pm.breakdown_s[2] if pm.breakdown_s else math.nan
    return {"model": pm.name, "d": cal.d, "compute_s": c.get(fit.COMPUTE, 0.0), "paper_bs_over_v1_s": pm.batch_size / pm.v1,
            "selection_s": c.get(fit.selection_key("exact_topk"), 0.0),
            "paper_breakdown_compression_s": pm.breakdown_s[1] if pm.breakdown_s else math.nan,
            "alpha_s": c.get(fit.ALPHA, 0.0), "beta_s_per_byte": c.get(fit.BETA, 0.0),
            "cluster_alpha_s": cluster.alpha, "cluster_beta_s_per_byte": cluster.beta,
            "gtopk_comm_P32_fitted_s": comm, "paper_breakdown_comm_P32_s": breakdown,
            "breakdown_over_fitted_comm": breakdown / comm if comm > 0 else math.nan,
            "gtopk_P32_paper_s": pm.seconds("gtopk")[-1], "gtopk_P32_calibrated_s": cal.seconds("gtopk", 32)}


def write_calibrated(cals: list[Calibration], cluster: AlphaBeta, out: Path,
                     link: AlphaBeta = TESTBED_LINK) -> list[Path]:
    """The three calibrated-mode CSVs (module docstring (d)); prints their tables."""
    points = [[cal.paper.name, s, P, "fit" if P in FIT_P else "held-out", t, cal.seconds(s, P), cal.seconds(s, P) / t - 1]
              for cal in cals for s in SCALING_SCHEMES for P, t in zip(P_SCALING, cal.paper.seconds(s))]
    errors = [row for cal in cals for row in calibrated_rows(cal, link)]
    consts = [constants_row(cal, cluster) for cal in cals]
    paths = [out / "scaling_calibrated_points.csv", out / "scaling_calibrated_errors.csv",
             out / "scaling_calibrated_constants.csv"]
    write_csv(paths[0], ["model", "scheme", "P", "role", "paper_s", "calibrated_s", "error"], points)
    write_csv(paths[1], list(errors[0]), [list(r.values()) for r in errors])
    write_csv(paths[2], list(consts[0]), [list(r.values()) for r in consts])
    print_calibrated(errors, consts)
    return paths


def print_calibrated(errors: list[dict], consts: list[dict]) -> None:
    print(f"\nCalibrated mode: constants fitted to the paper's P = {FIT_P[0]}, {FIT_P[1]} (dense, Top-k, gTop-k "
          f"together), P = {HELD_OUT[0]}, {HELD_OUT[1]} held out; goal |error| <= {GOAL:.0%}")
    print("| model | scheme | fit P=4 | fit P=8 | held-out P=16 | held-out P=32 | within goal | reason for a miss |")
    print("|---|---|---|---|---|---|---|---|")
    for r in errors:
        print(f"| {r['model']} | {r['scheme']} | {r['error_P4']:+.1%} | {r['error_P8']:+.1%} | {r['error_P16']:+.1%} | "
              f"{r['error_P32']:+.1%} | {'yes' if r['held_out_within_goal'] else 'no'} | {r['reason']} |")
    print_baselines(errors)
    print("\n| model | compute s (fit / paper bs/v1) | selection s (fit / paper breakdown) | alpha ms | beta ns/B "
          "| gTop-k comm P=32: fitted ms / paper breakdown ms (ratio) |")
    print("|---|---|---|---|---|---|")
    for c in consts:
        ratio = "-" if math.isnan(c["breakdown_over_fitted_comm"]) else f"{c['breakdown_over_fitted_comm']:.0f}x"
        print(f"| {c['model']} | {c['compute_s']:.4g} / {c['paper_bs_over_v1_s']:.4g} | {c['selection_s']:.4g} / "
              f"{c['paper_breakdown_compression_s']:.4g} | {c['alpha_s'] * 1e3:.3g} | {c['beta_s_per_byte'] * 1e9:.3g} | "
              f"{c['gtopk_comm_P32_fitted_s'] * 1e3:.3g} / {c['paper_breakdown_comm_P32_s'] * 1e3:.4g} ({ratio}) |")


def baseline_counts(errors: list[dict]) -> str:
    """The summary line: how many (model, scheme) pairs each predictor gets within GOAL at both
    held-out P (calibrated: held_out_within_goal; the others: `baseline_columns`)."""
    counts = [f"calibrated {sum(bool(r['held_out_within_goal']) for r in errors)} of {len(errors)}"]
    counts += [f"{label} {sum(bool(r[f'{key}_within_goal']) for r in errors)}" for key, label in PREDICTORS]
    return f"held-out (model, scheme) pairs within {GOAL * 100:.0f} %: " + ", ".join(counts)


def print_baselines(errors: list[dict]) -> None:
    """The naive and pinned-link predictors' held-out errors beside the calibrated fit's, and the counts."""
    r0 = errors[0]
    print(f"\nWhat the calibrated fit has to beat (from the paper's P = {FIT_P[0]}, {FIT_P[1]} times of each curve "
          f"alone): mean = mean(t{FIT_P[0]}, t{FIT_P[1]}); log-line = the line in log2 P through them; pinned = "
          f"c + alpha L(P) + beta B(P), alpha = {r0['pinned_alpha_s'] * 1e6:.4g} us, "
          f"beta = {r0['pinned_beta_s_per_byte'] * 1e9:.4g} ns/B pinned, c >= 0 fitted")
    cols = " | ".join(f"{label} P={P}" for _, label in (("calibrated", "calibrated"), *PREDICTORS) for P in HELD_OUT)
    print(f"| model | scheme | {cols} | pinned c s | pinned fit P={FIT_P[0]}, {FIT_P[1]} |")
    print("|---|---|" + "---|" * (2 * (len(PREDICTORS) + 1) + 2))
    for r in errors:
        cells = [f"{r[f'error_P{P}']:+.1%}" for P in HELD_OUT]
        cells += [f"{r[f'{key}_error_P{P}']:+.1%}" for key, _ in PREDICTORS for P in HELD_OUT]
        fit_err = ", ".join(f"{r[f'pinned_error_P{P}']:+.1%}" for P in FIT_P)
        print(f"| {r['model']} | {r['scheme']} | {' | '.join(cells)} | {r['pinned_constant_s']:.4g} | {fit_err} |")
    print(baseline_counts(errors))


def load_link(link: list[float] | None, link_from: str | None) -> AlphaBeta:
    """The pinned predictor's alpha and beta: --link ALPHA BETA, or network.alpha/beta of --link-from
    PATH (a conf/cluster-style YAML, as `make alphabeta-testbed` writes), else TESTBED_LINK.
    ValueError with a one-line reason naming the option when a value is missing, not a number or < 0."""
    if link is not None:
        where, values = "--link ALPHA BETA", link
    elif link_from is not None:
        where = f"--link-from {link_from}"
        if not Path(link_from).is_file():
            raise ValueError(f"{where}: no such file")
        try:
            cfg = OmegaConf.load(link_from)
            values = [cfg.network.alpha, cfg.network.beta]
        except Exception as err:        # noqa: BLE001 -- any YAML or key error becomes the one-line reason
            raise ValueError(f"{where}: needs network.alpha and network.beta "
                             f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from err
    else:
        return TESTBED_LINK
    try:
        alpha, beta = (float(v) for v in values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: alpha and beta must be numbers, got {values!r}") from err
    if not all(math.isfinite(v) and v >= 0 for v in (alpha, beta)):
        raise ValueError(f"{where}: alpha and beta must be finite and >= 0 (seconds per message, seconds per "
                         f"byte), got {alpha!r}, {beta!r}")
    return AlphaBeta(alpha, beta)


def shipped_profiles() -> list[Profile]:
    """The shipped profiles, in the paper's model order."""
    order = [pm.name for pm in PAPER_MODELS]
    names = sorted(profiles.names(), key=lambda n: (order.index(n) if n in order else len(order), n))
    return [profiles.load(n) for n in names]


def load_profile_files(paths: list[str], taken: list[Profile]) -> list[Profile]:
    """The profiles in `paths` (JSON written by `python -m ssgd.tools.measure ... out=PATH` or
    `Profile.save`); ValueError with a one-line reason naming the file when one is missing, is not
    a profile, or reuses the name of a profile already plotted (`taken`, then earlier files)."""
    out: list[Profile] = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"--profile {path}: no such file")
        try:
            prof = Profile.load(path)
        except (OSError, ValueError) as err:
            raise ValueError(f"--profile {path}: not a profile: {err}") from err
        if any(p.name == prof.name for p in (*taken, *out)):
            raise ValueError(f"--profile {path}: profile name {prof.name!r} is already plotted; "
                             f"change the file's \"name\"")
        out.append(prof)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "paper_figs" / "out"), help="output folder")
    ap.add_argument("--profile", action="append", default=[], metavar="PATH",
                    help="a measured profile JSON (python -m ssgd.tools.measure ... out=PATH) to plot beside "
                         "the shipped ones; repeatable")
    ap.add_argument("--no-shipped", action="store_true", help="plot only the --profile files")
    ap.add_argument("--calibrated", action=argparse.BooleanOptionalAction, default=True,
                    help="fit effective constants to the paper's P = 4, 8 times, predict P = 16, 32, overlay them "
                         "and write scaling_calibrated_*.csv (default: on)")
    link = ap.add_mutually_exclusive_group()
    link.add_argument("--link", nargs=2, type=float, metavar=("ALPHA", "BETA"), default=None,
                      help="the pinned predictor's alpha (s) and beta (s/byte) (default: the measured testbed "
                           f"link, {TESTBED_ALPHA_S:g} s and {TESTBED_BETA_S_PER_BYTE:g} s/byte)")
    link.add_argument("--link-from", metavar="PATH", default=None,
                      help="take the pinned predictor's alpha and beta from network.alpha/beta of this YAML "
                           "(e.g. outputs/testbed/alphabeta.yaml of make alphabeta-testbed)")
    ap.add_argument("--measured", type=Path, default=MEASURED, metavar="CSV",
                    help="efficiencies measured on the testbed in replay mode (make bench-testbed-replay) to draw "
                         f"beside the model (default: {MEASURED.relative_to(ROOT)}, when present)")
    args = ap.parse_args(argv)
    if args.no_shipped and not args.profile:
        ap.error("--no-shipped needs at least one --profile PATH")
    t0 = time.perf_counter()
    shipped = [] if args.no_shipped else shipped_profiles()
    try:
        pinned = load_link(args.link, args.link_from)
        profs = shipped + load_profile_files(args.profile, shipped)
        measured = load_measured(args.measured)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nets = [(label, load_network(cluster)) for label, cluster in NETWORKS]
    cals = [calibrate(paper_model(p.name), p.d) for p in profs if args.calibrated and paper_model(p.name)]
    written = fig_efficiency(profs, nets, out, {c.paper.name: c for c in cals}, measured) + fig_comm(nets, out) \
        + fig_breakdown(profs, nets[0][1], out)
    rows = ratio_rows(profs, nets)
    with (out / "ratios_p32.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["profile", "network", "model_gtopk_over_dense", "model_gtopk_over_dense_wfbp",
                    "model_gtopk_over_topk", "model_eff_dense", "model_eff_topk", "model_eff_gtopk",
                    "paper_gtopk_over_dense", "paper_gtopk_over_topk"])
        w.writerows(rows)
    written.append(out / "ratios_p32.csv")
    print_ratios(rows)
    if cals:
        written += write_calibrated(cals, nets[0][1], out, pinned)
    print(f"wrote {len(written)} files to {out} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
