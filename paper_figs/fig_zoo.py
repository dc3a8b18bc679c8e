"""The sparse-allreduce race on SIMULATED clusters (SimGrid): who wins at each (P, d, bandwidth), and the volume.

    python paper_figs/fig_zoo.py [--csv paper_figs/measured/zoo.csv ...] [--out paper_figs/out]

Reads the CSVs bench/zoo.py writes (`make bench-zoo`'s committed copy paper_figs/measured/zoo.csv, and the further
runs of docs/zoo.md beside it, paper_figs/measured/zoo_*.csv; their rows together) and writes:
  * fig_zoo_time{,_col1,_col2}.{png,pdf} and .csv: one panel per (network, d): the slowest rank's simulated
    seconds of one call vs P, one line per scheme in its look of style.SERIES (filled markers: the `heavy`
    gradients, open: `normal`; dense has no distribution);
  * fig_zoo_bytes{,_col1,_col2}.{png,pdf} and .csv: one panel per d: bytes sent by the busiest rank vs P (the first network's rows:
    the bytes do not depend on the network; `volume` rows, counted on the threads executor without times, add the P
    no simulation reached), with Ok-Topk's bound 6 k (P - 1) / P words and the lower bound 2 k (P - 1) / P words
    (4-byte words; our entries are 8 bytes, 2 words);
  * zoo_winners.csv: per (network, dist, d, P), the fastest scheme and its seconds;
  * zoo_crossover.csv: per (network, dist, d), the P at which gTop-k and each Ok-Topk call change places.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

import style  # noqa: E402
from figlib import OUT, ROOT, write_csv  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

CSV = ROOT / "paper_figs" / "measured" / "zoo.csv"
EXTRA = "zoo_*.csv"        # further runs beside it (docs/zoo.md: larger P, d = 61M), read when present
VOLUME = "volume"          # bench/zoo.py --networks volume: bytes and messages counted, no simulated time
NUMERIC = ("d", "k", "P", "t_max_s", "t_min_s", "bytes_max", "bytes_mean", "messages_max", "messages_mean",
           "entries_mean", "bound_bytes", "lower_bound_bytes", "wall_s")
ORDER = ("dense", "topk", "topkdsa", "gtopk", "oktopk", "oktopk_reuse")
LABELS = {"dense": "dense", "topk": "TopkA (topk)", "topkdsa": "TopkDSA (SparCML)", "gtopk": "gTop-k",
          "oktopk": "Ok-Topk exact", "oktopk_reuse": "Ok-Topk reuse"}


def load(path: Path) -> list[dict]:
    """The zoo CSV's rows, numbers as floats; ValueError naming the file when a column is missing."""
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("network", "dist", "scheme", *NUMERIC) if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)} (write it with `make bench-zoo`)")
        return [{**r, **{c: float(r[c]) for c in NUMERIC}} for r in reader]


def schemes_of(rows: list[dict]) -> list[str]:
    names = {r["scheme"] for r in rows}
    return [s for s in ORDER if s in names] + sorted(names - set(ORDER))


def winners(rows: list[dict]) -> list[list]:
    """[network, dist, d, P, winner, seconds, runner_up, seconds] per (network, dist, d, P); dense (no
    distribution) races in every distribution."""
    dense = {(r["network"], r["d"], r["P"]): r for r in rows if r["dist"] == "-"}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["dist"] != "-":
            groups[(r["network"], r["dist"], r["d"], r["P"])].append(r)
    out = []
    for (net, dist, d, P), rs in sorted(groups.items()):
        rs = sorted(rs + ([dense[(net, d, P)]] if (net, d, P) in dense else []), key=lambda r: r["t_max_s"])
        second = rs[1] if len(rs) > 1 else {"scheme": "", "t_max_s": float("nan")}
        out.append([net, dist, int(d), int(P), rs[0]["scheme"], rs[0]["t_max_s"], second["scheme"], second["t_max_s"]])
    return out


def crossovers(rows: list[dict], challenger: str = "oktopk_reuse", incumbent: str = "gtopk") -> list[list]:
    """[network, dist, d, challenger, faster_at, crossover_P]: the P values where the challenger's call is faster
    than the incumbent's, and each P at which the faster of the two changes ("" when it never does)."""
    t: dict[tuple, dict[str, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        if r["scheme"] in (challenger, incumbent):
            t[(r["network"], r["dist"], r["d"])][r["scheme"]][r["P"]] = r["t_max_s"]
    out = []
    for (net, dist, d), by in sorted(t.items()):
        Ps = sorted(set(by[challenger]) & set(by[incumbent]))
        wins = [P for P in Ps if by[challenger][P] < by[incumbent][P]]
        flips = [P for a, P in zip(Ps, Ps[1:]) if (a in wins) != (P in wins)]
        out.append([net, dist, int(d), challenger, " ".join(str(int(P)) for P in wins),
                    " ".join(str(int(P)) for P in flips)])
    return out


def p_axis(ax, Ps: list[float]) -> None:
    """A log2 P axis ticked at every fourth power of two of the measured P (labels apart at 3.3 in)."""
    from matplotlib.ticker import NullLocator

    ticks = [P for P in sorted(set(Ps)) if round(math.log2(P)) % 2 == 1] or sorted(set(Ps))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(int(P)) for P in ticks])
    ax.xaxis.set_minor_locator(NullLocator())


def _series(ax, pts: list, scheme: str, dist: str) -> None:
    """One scheme's points: its look (style.SERIES), filled markers for `heavy` u, open ones for `normal`."""
    lk = style.look(scheme)
    ax.plot(*zip(*pts), **style.Look(lk.color, lk.ls, lk.marker, dist != "normal").kw(ms=3, lw=1.0))


def _legends(fig, schemes: list[str], bounds: bool = False) -> None:
    """The schemes' legend and the sources' one, outside the axes: side by side below (double column), or the
    schemes above and the sources below (single column)."""
    wide = fig.get_figwidth() >= 5
    handles = [Line2D([], [], **style.look(s).kw(ms=3)) for s in schemes]
    style.legend_below(fig, handles, [LABELS.get(s, s) for s in schemes], "lower left" if wide else "upper center",
                       ncol=3 if wide else 2, title="scheme")
    extra = [(Line2D([], [], **style.Look(style.GREY, "none", "o", True).kw()), "heavy-tailed u (filled)"),
             (Line2D([], [], **style.Look(style.GREY, "none", "o", False).kw()), "normal u (open)")]
    if bounds:
        extra += [(Line2D([], [], color="k", ls="--", lw=1), "Ok-Topk bound 6k(P-1)/P words"),
                  (Line2D([], [], color="k", ls=":", lw=1), "lower bound 2k(P-1)/P words")]
    style.legend_below(fig, [h for h, _ in extra], [t for _, t in extra], "lower right" if wide else "lower center",
                       ncol=1 if wide else 2, title="SIMULATED")


def draw_time(rows: list[dict], out: Path) -> list[Path]:
    """fig_zoo_time (module docstring)."""
    nets = sorted({r["network"] for r in rows}, key=lambda n: float(n.rstrip("GbE")))
    ds = sorted({r["d"] for r in rows})
    table: list[list] = []

    def draw(width: float):
        table.clear()
        wide = width >= 5
        nr, nc = (len(nets), len(ds)) if wide else (len(ds), len(nets))
        fig, axes = style.figure(width, nr, nc, 1.6 if wide else 1.35, 1.0 if wide else 1.5)
        for i, net in enumerate(nets):
            for j, d in enumerate(ds):
                ax = axes[i][j] if wide else axes[j][i]
                for s in schemes_of(rows):
                    for dist in ("-", "heavy", "normal"):
                        pts = sorted((r["P"], r["t_max_s"]) for r in rows
                                     if (r["network"], r["d"], r["scheme"], r["dist"]) == (net, d, s, dist))
                        if pts:
                            _series(ax, pts, s, dist)
                            table.extend([net, dist, int(d), s, int(P), t] for P, t in pts)
                ax.set(yscale="log", title=f"{net}, d = {d / 1e6:g}M")
                p_axis(ax, sorted({r["P"] for r in rows}))
                ax.grid(alpha=0.3, lw=0.5)
        for ax in axes[-1]:
            ax.set_xlabel("workers P")
        for ax in axes[:, 0]:
            ax.set_ylabel("one call (s)")
        _legends(fig, schemes_of(rows))
        return fig

    return style.save(draw, out, "fig_zoo_time", ["network", "dist", "d", "scheme", "P", "t_max_s"], table)


def bytes_rows(rows: list[dict]) -> list[dict]:
    """The sparse schemes' rows of the first simulated network, and the `volume` rows of every (d, scheme, dist, P)
    it lacks: the bytes of one call do not depend on the network (tests/unit/test_simgrid_executor.py)."""
    sims = sorted({r["network"] for r in rows} - {VOLUME})
    first = [r for r in rows if sims and r["network"] == sims[0] and r["dist"] != "-"]
    have = {(r["d"], r["scheme"], r["dist"], r["P"]) for r in first}
    return first + [r for r in rows if r["network"] == VOLUME and r["dist"] != "-"
                    and (r["d"], r["scheme"], r["dist"], r["P"]) not in have]


def draw_bytes(rows: list[dict], out: Path) -> list[Path]:
    """fig_zoo_bytes (module docstring)."""
    sparse = bytes_rows(rows)
    ds = sorted({r["d"] for r in sparse})
    table: list[list] = []

    def draw(width: float):
        table.clear()
        wide = width >= 5
        nr, nc = (1, len(ds)) if wide else (len(ds), 1)
        fig, axes = style.figure(width, nr, nc, 1.8 if wide else 1.4, 1.1 if wide else 1.7)
        for j, d in enumerate(ds):
            ax = axes[0][j] if wide else axes[j][0]
            for s in schemes_of(sparse):
                for dist in ("heavy", "normal"):
                    pts = sorted((r["P"], r["bytes_max"]) for r in sparse if (r["d"], r["scheme"], r["dist"]) == (d, s, dist))
                    if pts:
                        _series(ax, pts, s, dist)
                        table.extend([dist, int(d), s, int(P), b] for P, b in pts)
            bounds = sorted({(r["P"], r["bound_bytes"], r["lower_bound_bytes"]) for r in sparse if r["d"] == d})
            Ps = [b[0] for b in bounds]
            ax.plot(Ps, [b[1] for b in bounds], color="k", ls="--", lw=1)
            ax.plot(Ps, [b[2] for b in bounds], color="k", ls=":", lw=1)
            table.extend(["bound", int(d), "paper_bound", int(P), b] for P, b, _ in bounds)
            table.extend(["bound", int(d), "lower_bound", int(P), lb] for P, _, lb in bounds)
            p_axis(ax, Ps)
            k = int(min(r["k"] for r in sparse if r["d"] == d))
            ax.set(yscale="log", title=f"d = {d / 1e6:g}M, k = {k:,}", ylabel="bytes, busiest rank")
            ax.grid(alpha=0.3, lw=0.5)
        axes[-1][-1].set_xlabel("workers P")
        if wide:
            for ax in axes[0]:
                ax.set_xlabel("workers P")
        _legends(fig, schemes_of(sparse), bounds=True)
        return fig

    return style.save(draw, out, "fig_zoo_bytes", ["dist", "d", "scheme", "P", "bytes_max"], table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, nargs="+", default=[CSV, *sorted(CSV.parent.glob(EXTRA))],
                    help="zoo CSVs (make bench-zoo), their rows together")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    missing = [p for p in args.csv if not p.exists()]
    if missing:
        print(f"error: --csv {missing[0]}: no such file (run `make bench-zoo` first)", file=sys.stderr)
        return 2
    try:
        rows = [r for p in args.csv for r in load(p)]
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: --csv {' '.join(map(str, args.csv))}: no rows", file=sys.stderr)
        return 2
    timed = [r for r in rows if r["network"] != VOLUME]
    if not timed:
        print(f"error: --csv {' '.join(map(str, args.csv))}: only '{VOLUME}' rows, no simulated times",
              file=sys.stderr)
        return 2
    paths = draw_time(timed, args.out) + draw_bytes(rows, args.out)
    write_csv(args.out / "zoo_winners.csv",
              ["network", "dist", "d", "P", "winner", "t_s", "runner_up", "runner_up_t_s"], winners(timed))
    write_csv(args.out / "zoo_crossover.csv", ["network", "dist", "d", "challenger", "faster_at_P", "crossover_P"],
              crossovers(timed) + crossovers(timed, "oktopk"))
    print("\n".join(str(p) for p in paths), f"{args.out / 'zoo_winners.csv'}", f"{args.out / 'zoo_crossover.csv'}",
          sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
