"""(c) fig_breakdown_32: computation / compression / communication shares of one gTop-k iteration at
32 workers on 1 GbE, model vs paper (`plot_breakdown`); the model runs at the breakdown's batch size
(compute scaled linearly from the profile, `rescale_batch`). And the ratio table: gTop-k/dense and
gTop-k/Top-k efficiency ratios at P = 32, model vs paper (ratios_p32.csv).
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import style  # noqa: E402
from figlib import write_csv  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from scaling_model import density_label, model_scheme, paper_efficiency  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402
from ssgd.perf.iteration import iteration_time, rescale_batch, scaling_efficiency  # noqa: E402
from ssgd.perf.paper import paper_model  # noqa: E402

RATIO_COLUMNS = ["profile", "network", "model_gtopk_over_dense", "model_gtopk_over_dense_wfbp",
                 "model_gtopk_over_topk", "model_eff_dense", "model_eff_topk", "model_eff_gtopk",
                 "paper_gtopk_over_dense", "paper_gtopk_over_topk"]


PARTS = (("Computation", style.BLUE), ("Compression", style.ORANGE), ("Communication", style.VERMILLION))


def fig_breakdown(profs: list, net: AlphaBeta, out: Path) -> list[Path]:
    """fig_breakdown_32{,_col1,_col2}.{png,pdf} and .csv: each part's share of one gTop-k iteration at 32
    workers on `net`, the paper's (plain) and the model's (hatched) per profile; seconds per iteration above."""
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
    return style.save(lambda width: draw_breakdown(width, labels, parts), out, "fig_breakdown_32",
                      ["profile", "source", "samples_per_iteration", "computation_s", "compression_s",
                       "communication_s"], rows)


def draw_breakdown(width: float, labels: list[str], parts: list[tuple]) -> plt.Figure:
    """The stacked bars of fig_breakdown at `width` inches."""
    wide = width >= 5
    shares = np.array([np.array(p) / sum(p) * 100 for p in parts])
    fig, axes = style.figure(width, 1, 1, 2.6 if wide else 2.4, 0.6 if wide else 0.9)
    ax = axes[0][0]
    x = np.arange(len(labels))
    bottom = np.zeros(len(labels))
    for col, (name, color) in enumerate(PARTS):
        ax.bar(x, shares[:, col], 0.7, bottom=bottom, color=color, label=name,
               hatch=["" if "paper" in lab else "////" for lab in labels], edgecolor="white", lw=0.3)
        bottom += shares[:, col]
    for xi, p in zip(x, parts):
        ax.text(xi, 101, f"{sum(p):.3g}", ha="center", va="bottom", fontsize=6 if wide else 5)
    ax.set_xticks(x, labels, rotation=0 if wide else 90)
    ax.set_ylim(0, 112)
    ax.set_ylabel("share of one iteration (%)")
    ax.set_title("gTop-k, P = 32, 1 GbE (above the bars: s per iteration)")
    handles = [Patch(color=color, label=name) for name, color in PARTS]
    handles += [Patch(facecolor="white", edgecolor=style.GREY, label="paper"),
                Patch(facecolor="white", edgecolor=style.GREY, hatch="////", label="model")]
    style.legend_below(fig, handles, [h.get_label() for h in handles], ncol=5 if wide else 3)
    return fig


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



def write_ratios(rows: list[list], out: Path) -> Path:
    """ratios_p32.csv of `ratio_rows`."""
    path = out / "ratios_p32.csv"
    write_csv(path, RATIO_COLUMNS, rows)
    return path
