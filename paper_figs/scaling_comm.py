"""(b) fig_comm_vs_P: communication time, m = 25 * 2**20, rho = 0.001, P = 4 ... 128: our alpha-beta
models (ssgd.perf.cost) and the paper's closed forms, both published gTop-k forms (the
hclhkbu/gtopkssgd README before and after 2019-07-09; `plot_allreduce_comparison`).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from figlib import save  # noqa: E402
from ssgd.perf import cost  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402

P_COMM = (4, 8, 16, 32, 64, 128)
M_COMM, RHO = 25 * 2**20, 0.001


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
