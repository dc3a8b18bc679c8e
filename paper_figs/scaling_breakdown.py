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

from figlib import save, write_csv  # noqa: E402
from scaling_model import density_label, model_scheme, paper_efficiency  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402
from ssgd.perf.iteration import iteration_time, rescale_batch, scaling_efficiency  # noqa: E402
from ssgd.perf.paper import paper_model  # noqa: E402

RATIO_COLUMNS = ["profile", "network", "model_gtopk_over_dense", "model_gtopk_over_dense_wfbp",
                 "model_gtopk_over_topk", "model_eff_dense", "model_eff_topk", "model_eff_gtopk",
                 "paper_gtopk_over_dense", "paper_gtopk_over_topk"]


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



def write_ratios(rows: list[list], out: Path) -> Path:
    """ratios_p32.csv of `ratio_rows`."""
    path = out / "ratios_p32.csv"
    write_csv(path, RATIO_COLUMNS, rows)
    return path
