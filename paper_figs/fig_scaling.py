"""Scaling figures of the gTop-k paper from the iteration-time model, next to the paper's numbers.

    python paper_figs/fig_scaling.py [--out DIR] [--profile PATH ...] [--no-shipped]   (default DIR: paper_figs/out)

--profile PATH (repeatable) adds a measured profile (`python -m ssgd.perf.measure <overrides> out=PATH`)
to every figure and to the ratio table beside the shipped ones (--no-shipped: instead of them); the
paper's markers appear only for profiles named like the paper's models.

(a) fig_scaling_efficiency: eff(P) = v_P / v_1 (papers.md 4, 7) for dense (no overlap, as the trainer;
    and layer-wise WFBP), Top-k, gTop-k and Gaussian-k, P = 4 ... 1024 (P > 32 extrapolated), for each
    shipped profile (ssgd.perf.profiles) on 1 GbE and 10 GbE (conf/cluster/32x1gbe.yaml, 32x10gbe.yaml);
    the paper's efficiencies (papers.md 7, v_P / v_1 of the authors' hard-coded lists) as markers.
(b) fig_comm_vs_P: communication time, m = 25 * 2**20, rho = 0.001, P = 4 ... 128: our alpha-beta
    models (ssgd.perf.cost) and the paper's closed forms, both published gTop-k forms (papers.md 3.1).
(c) fig_breakdown_32: computation / compression / communication shares of one gTop-k iteration at
    32 workers on 1 GbE, model vs paper (papers.md 7); the model runs at the breakdown's batch size
    (compute scaled linearly from the profile, `rescale_batch`).
Each figure: PNG + PDF + the CSV that was plotted. Also prints (and writes ratios_p32.csv) the
gTop-k/dense and gTop-k/Top-k efficiency ratios at P = 32, model vs paper.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path
from types import MappingProxyType

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from figlib import save  # noqa: E402
from ssgd.perf import cost, profiles  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402
from ssgd.perf.iteration import Profile, iteration_time, rescale_batch, scaling_efficiency  # noqa: E402
from ssgd.perf.make_profiles import PAPER_MODELS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = (("1GbE", "32x1gbe"), ("10GbE", "32x10gbe"))
P_PAPER = (4, 8, 16, 32)
P_MODEL = tuple(2**i for i in range(2, 11))          # 4 ... 1024
P_COMM = (4, 8, 16, 32, 64, 128)
M_COMM, RHO = 25 * 2**20, 0.001
SCHEMES = (("dense", "Dense (no overlap)", "C0", "-"), ("dense_wfbp", "Dense, layer-wise WFBP", "C0", ":"),
           ("topk", "Top-k", "C1", "-"), ("gtopk", "gTop-k", "C2", "-"), ("gaussiank", "Gaussian-k", "C3", "--"))

# papers.md 7: per-worker throughput lists of the authors' scaling figure (P = 1 entry shared).
PAPER_V = MappingProxyType({
    "vgg16": (1317.333, (104.2, 92.56, 39.48, 12.6), (110.576, 109.9, 97.865, 63.002), (131.06, 130.551, 126.434, 123.2)),
    "resnet20": (920.632, (821.7, 705.2, 520.4, 287.9), (908.837, 752.985, 737.594, 696.029), (916.26, 868.73, 808.5, 789.3)),
    "alexnet": (173.469, (14.01, 12.118, 4.936, 1.234), (14.238, 13.865, 13.352, 9.236), (16.536, 16.446, 16.359, 15.777)),
    "resnet50": (52.873, (39.002, 36.989, 23.176, 10.721), (37.729, 35.703, 34.495, 30.583), (39.795, 39.713, 39.06, 39.119)),
    "lstm_ptb": (392.0, (12.657, 8.7, 4.1, 2.1), (19.9, 18.6, 14.8, 5.4), (17.8, 17.6, 15.1, 10.8)),
})
PAPER_LABEL = MappingProxyType({"dense": "Dense (Horovod)", "topk": "Top-k", "gtopk": "gTop-k"})
PAPER_MODEL = MappingProxyType({pm.name: pm for pm in PAPER_MODELS})


def load_network(cluster: str) -> AlphaBeta:
    """alpha/beta (seconds, seconds per byte) of conf/cluster/<cluster>.yaml."""
    cfg = OmegaConf.load(ROOT / "conf" / "cluster" / f"{cluster}.yaml")
    return AlphaBeta(float(cfg.network.alpha), float(cfg.network.beta))


def paper_efficiency(name: str) -> dict[str, list[float]]:
    """eff(P) = v_P / v_1 of the paper's lists at P = 4, 8, 16, 32 (papers.md 7)."""
    v1, dense, topk, gtopk = PAPER_V[name]
    return {"dense": [v / v1 for v in dense], "topk": [v / v1 for v in topk], "gtopk": [v / v1 for v in gtopk]}


# --- (a) scaling efficiency ------------------------------------------------------------------------
def fig_efficiency(profs: list, nets: list[tuple[str, AlphaBeta]], out: Path) -> list[Path]:
    rows: list[list] = []
    fig, axes = plt.subplots(len(nets), len(profs), figsize=(3.3 * len(profs), 3.0 * len(nets)),
                             sharex=True, sharey=True, squeeze=False)
    for i, (net_name, net) in enumerate(nets):
        for j, prof in enumerate(profs):
            ax = axes[i][j]
            for scheme, label, color, style in SCHEMES:
                eff = [scaling_efficiency(prof, scheme, net, P, RHO) for P in P_MODEL]
                ax.plot(P_MODEL, np.array(eff) * 100, style, color=color, label=f"model: {label}", lw=1.4)
                rows += [[prof.name, net_name, "model", scheme, P, e, prof.batch_size / prof.single_worker_seconds() * e]
                         for P, e in zip(P_MODEL, eff)]
            if net_name == "1GbE" and prof.name in PAPER_V:
                for scheme, marker, color in (("dense", "o", "C0"), ("topk", "s", "C1"), ("gtopk", "^", "C2")):
                    eff = paper_efficiency(prof.name)[scheme]
                    ax.plot(P_PAPER, np.array(eff) * 100, marker, color=color, mfc="none", ms=6,
                            label=f"paper: {PAPER_LABEL[scheme]}")
                    rows += [[prof.name, net_name, "paper", scheme, P, e, PAPER_V[prof.name][0] * e]
                             for P, e in zip(P_PAPER, eff)]
            ax.axvspan(32, P_MODEL[-1], color="0.92", zorder=0)
            ax.set_xscale("log", base=2)
            ax.set_xticks([4, 16, 64, 256, 1024])
            ax.set_xticklabels(["4", "16", "64", "256", "1024"])
            ax.set_yscale("log")
            ax.set_ylim(0.3, 130)
            ax.set_yticks([0.5, 1, 2, 5, 10, 20, 50, 100])
            ax.set_yticklabels(["0.5", "1", "2", "5", "10", "20", "50", "100"])
            ax.grid(True, which="major", alpha=0.3)
            title = PAPER_MODEL[prof.name].title if prof.name in PAPER_MODEL else prof.name
            ax.set_title(f"{title}, bs {prof.batch_size}\n{net_name}", fontsize=9)
            if i == len(nets) - 1:
                ax.set_xlabel("workers P (grey: extrapolated)")
            if j == 0:
                ax.set_ylabel("scaling efficiency (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.06))
    fig.suptitle(f"Scaling efficiency v_P / v_1, rho = {RHO} (markers: gTop-k paper, 1 GbE, P <= 32)", fontsize=10)
    fig.tight_layout()
    return save(fig, out, "fig_scaling_efficiency",
                ["profile", "network", "source", "scheme", "P", "efficiency", "per_worker_samples_per_s"], rows)


# --- (b) communication time vs P -----------------------------------------------------------------
def paper_gtopk_old(net: AlphaBeta, P: np.ndarray, k: int) -> np.ndarray:
    """2 alpha log2 P + 4 k log2 P beta_element (gTop-k README before 2019-07-09; papers.md 3.1)."""
    return 2 * net.alpha * np.log2(P) + 4 * k * np.log2(P) * cost.ELEMENT_BYTES * net.beta


def paper_gtopk_new(net: AlphaBeta, P: np.ndarray, k: int) -> np.ndarray:
    """alpha log2 P + 2 k log2 P beta_element (gTop-k README now; papers.md 3.1)."""
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
        pm = PAPER_MODEL.get(prof.name)
        if pm is not None and pm.breakdown_s is not None:
            labels.append(f"{prof.name}\npaper")
            parts.append(pm.breakdown_s)
            rows.append([prof.name, "paper", pm.breakdown_samples, *pm.breakdown_s])
            bs = pm.breakdown_samples
        else:
            bs = prof.batch_size
        t = iteration_time(rescale_batch(prof, bs), "gtopk", net, 32, RHO)
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
        paper = paper_efficiency(prof.name) if prof.name in PAPER_V else None
        pd = paper["gtopk"][-1] / paper["dense"][-1] if paper else math.nan
        pt = paper["gtopk"][-1] / paper["topk"][-1] if paper else math.nan
        for net_name, net in nets:
            e = {s: scaling_efficiency(prof, s, net, 32, RHO) for s in ("dense", "dense_wfbp", "topk", "gtopk")}
            rows.append([prof.name, net_name, e["gtopk"] / e["dense"], e["gtopk"] / e["dense_wfbp"],
                         e["gtopk"] / e["topk"], e["dense"], e["topk"], e["gtopk"], pd, pt])
    return rows


def print_ratios(rows: list[list]) -> None:
    print("Efficiency ratios at P = 32 (model: rho = 0.001; paper: papers.md 7, 1 GbE)")
    w = max([9, *(len(row[0]) for row in rows)])
    print(f"{'model':<{w}} {'net':<6} {'gTop/dense':>10} {'gTop/WFBP':>9} {'gTop/Top-k':>10} "
          f"{'eff d/t/g (%)':>18} | {'paper gTop/dense':>16} {'paper gTop/Top-k':>16}")
    for name, net, rd, rw, rt, ed, et, eg, pd, pt in rows:
        print(f"{name:<{w}} {net:<6} {rd:>10.2f} {rw:>9.2f} {rt:>10.2f} "
              f"{f'{ed * 100:.1f}/{et * 100:.1f}/{eg * 100:.1f}':>18} | {pd:>16.2f} {pt:>16.2f}")


def shipped_profiles() -> list[Profile]:
    """The shipped profiles, in the paper's model order."""
    order = [pm.name for pm in PAPER_MODELS]
    names = sorted(profiles.names(), key=lambda n: (order.index(n) if n in order else len(order), n))
    return [profiles.load(n) for n in names]


def load_profile_files(paths: list[str], taken: list[Profile]) -> list[Profile]:
    """The profiles in `paths` (JSON written by `python -m ssgd.perf.measure ... out=PATH` or
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
                    help="a measured profile JSON (python -m ssgd.perf.measure ... out=PATH) to plot beside "
                         "the shipped ones; repeatable")
    ap.add_argument("--no-shipped", action="store_true", help="plot only the --profile files")
    args = ap.parse_args(argv)
    if args.no_shipped and not args.profile:
        ap.error("--no-shipped needs at least one --profile PATH")
    t0 = time.perf_counter()
    shipped = [] if args.no_shipped else shipped_profiles()
    try:
        profs = shipped + load_profile_files(args.profile, shipped)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nets = [(label, load_network(cluster)) for label, cluster in NETWORKS]
    written = fig_efficiency(profs, nets, out) + fig_comm(nets, out) + fig_breakdown(profs, nets[0][1], out)
    rows = ratio_rows(profs, nets)
    with (out / "ratios_p32.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["profile", "network", "model_gtopk_over_dense", "model_gtopk_over_dense_wfbp",
                    "model_gtopk_over_topk", "model_eff_dense", "model_eff_topk", "model_eff_gtopk",
                    "paper_gtopk_over_dense", "paper_gtopk_over_topk"])
        w.writerows(rows)
    written.append(out / "ratios_p32.csv")
    print_ratios(rows)
    print(f"wrote {len(written)} files to {out} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
