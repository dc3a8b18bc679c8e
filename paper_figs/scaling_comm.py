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

import style  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
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


SCHEME_OF = {"dense": "dense", "Top-k": "topk", "gTop-k": "gtopk"}
# how each kind of curve is drawn: the model in the scheme's own look; the paper's closed forms dotted with x,
# the gTop-k form published since 2019-07-09 dash-dot with +
FORMS = {"model": ("our alpha-beta model", None, None), "paper": ("paper's closed form", ":", "x"),
         "new": ("paper's gTop-k form since 2019-07", "-.", "+")}


def curve_look(label: str) -> style.Look:
    """The look of a curve of `comm_curves` by its label: colour by scheme, line and marker by form."""
    base = style.look(SCHEME_OF[label.split(" ")[1]])
    form = "model" if label.startswith("model") else ("new" if "(new)" in label else "paper")
    _, ls, marker = FORMS[form]
    return base if form == "model" else style.Look(base.color, ls, marker)


def fig_comm(nets: list[tuple[str, AlphaBeta]], out: Path) -> list[Path]:
    """fig_comm_vs_P{,_col1,_col2}.{png,pdf} and .csv: one panel per network (side by side; single column:
    one above the other), colour = scheme, line and marker = model or the paper's form."""
    rows = [[net_name, label, p, s * 1e3] for net_name, net in nets for label, sec in comm_curves(net).items()
            for p, s in zip(P_COMM, sec)]

    def draw(width: float) -> plt.Figure:
        wide = width >= 5
        fig, axes = style.figure(width, 1 if wide else len(nets), len(nets) if wide else 1, 2.6 if wide else 2.2,
                                 0.8 if wide else 1.3, sharey=True)
        for ax, (net_name, net) in zip(axes.flat, nets):
            for label, sec in comm_curves(net).items():
                ax.plot(P_COMM, sec * 1e3, **curve_look(label).kw(ms=4), label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(P_COMM, [str(p) for p in P_COMM])
            ax.minorticks_off()
            ax.grid(True, which="major", alpha=0.3, lw=0.5)
            ax.set_xlabel("workers P")
            ax.set_ylabel("communication time (ms)")
            ax.set_title(f"{net_name}: alpha {net.alpha * 1e6:.3g} us, beta {net.beta * 1e9:.3g} ns/B")
        schemes = [Line2D([], [], **style.look(s).kw(marker="None")) for s in SCHEME_OF.values()]
        style.legend_below(fig, schemes, list(SCHEME_OF), "lower left" if wide else "lower center", ncol=3,
                           title=f"scheme (m = 25*2^20, rho = {RHO})")
        forms = [Line2D([], [], **style.Look(style.GREY, ls or "-", marker or "o").kw()) for _, ls, marker in
                 FORMS.values()]
        style.legend_below(fig, forms, [text for text, *_ in FORMS.values()], "lower right" if wide else "upper center",
                           ncol=1 if wide else 2, title="curve")
        return fig

    return style.save(draw, out, "fig_comm_vs_P", ["network", "curve", "P", "milliseconds"], rows)
