"""The paper figures' one style: a colour-blind-safe palette, one look per named series, legends outside
the data, and every figure saved at a paper's two column widths.

- Palette: Okabe & Ito's eight colours ("Color Universal Design", 2008), told apart under the common
  colour-vision deficiencies; every series also differs from the others of its axes in line style or
  marker, so a figure printed in grey still tells them apart.
- SERIES: name -> Look (colour, line style, marker). A scheme keeps its look in every figure; adding a
  series is one line there. SOURCES: how a scaling figure draws where a number comes from (the model's
  line, the paper's open markers, ...); adding a source (e.g. a SimGrid network model) is one line there.
- `save(draw, out, stem, header, rows)` calls `draw(width)` once per width of WIDTHS (inches) under the
  width's font sizes, tidies the ticks matplotlib chose (`tidy_ticks`), checks that no two series of one
  axes share colour and style (`clashes`, an error otherwise), runs the BEFORE_SAVE hooks, and writes
  out/<stem>_<variant>.pdf (vector) and .png (300 dpi) per variant, out/<stem>.pdf and .png (the double-column variant, the file the README shows)
  and out/<stem>.csv (the plotted numbers). The figure keeps its exact size (no tight bounding box): a
  draw function lays out with `figure(...)` (constrained layout) and `legend_below`.
"""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as mticker  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.legend import Legend  # noqa: E402

from figlib import write_csv  # noqa: E402

# Okabe & Ito: black, orange, sky blue, bluish green, yellow, blue, vermillion, reddish purple.
BLACK, ORANGE, SKY, GREEN, YELLOW, BLUE, VERMILLION, PURPLE = (
    "#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
GREY = "#999999"                                       # reference lines and bands, never a series
COLORS = (BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY, BLACK)       # yellow: too light on white for lines
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
WIDTHS = {"col1": 3.3, "col2": 7.0}                    # inches: a paper's single and double column
DEFAULT_VARIANT = "col2"                               # what out/<stem>.png and .pdf hold
DPI = 300


@dataclass(frozen=True)
class Look:
    """How one series is drawn: colour, line style ("none": markers only), marker ("" for none), filled."""

    color: str
    ls: str = "-"
    marker: str = ""
    filled: bool = True

    def kw(self, **extra) -> dict:
        """Keyword arguments of `Axes.plot` / `errorbar` for this look (extra ones win)."""
        kw = {"color": self.color, "ls": self.ls, "marker": self.marker or "None",
              "mfc": self.color if self.filled else "none"}
        return {**kw, **extra}


# One look per series; no two share colour AND line style AND marker. Add a series here (one line).
SERIES: dict[str, Look] = {
    "dense": Look(BLUE, "-", "o"),
    "dense_wfbp": Look(BLUE, ":", "o"),
    "topk": Look(ORANGE, "--", "s"),
    "gtopk": Look(GREEN, "-", "^"),
    "gaussiank": Look(VERMILLION, "-.", "D"),
    "gaussiank_bisect": Look(VERMILLION, ":", "v"),
    "randomk": Look(PURPLE, ":", "v"),
    "topk_at_gaussiank": Look(ORANGE, "-.", "P"),
    "topk_blocks": Look(SKY, "--", "D"),
    "dgcsampling": Look(BLACK, "-", "^"),
    "dgcsampling_scaled": Look(BLACK, "--", "v"),
    "topkdsa": Look(PURPLE, "--", "v"),
    "oktopk": Look(VERMILLION, "-", "D"),
    "oktopk_reuse": Look(VERMILLION, "--", "P"),
}


@dataclass(frozen=True)
class Source:
    """Where a scaling figure's number comes from, and how it changes a scheme's look: `ls` (None: the
    scheme's own), `marker` ("scheme": the scheme's, "": none, else this one), filled, `dodge` (points
    shifted along log x per scheme so that equal values stay visible), its legend text."""

    label: str
    ls: str | None = None
    marker: str = ""
    filled: bool = True
    dodge: bool = False


# One line per source; a new network model (e.g. "simgrid": Source("model (SimGrid)", "--", "|")) is one line.
SOURCES: dict[str, Source] = {
    "model": Source("model (alpha-beta)"),
    "paper": Source("paper", "none", "scheme", filled=False),
    "calibrated": Source("model fitted to the paper's P = 4, 8", "-.", "x"),
    "testbed": Source("measured on the testbed", "none", "scheme", filled=True, dodge=True),
    "simgrid": Source("simulated on SimGrid (replay)", ":", "D"),
}


def look(series: str, index: int = 0) -> Look:
    """The look of a named series (SERIES); an unnamed one gets the index-th of `cycle`."""
    return SERIES.get(series) or cycle(index)


def cycle(index: int) -> Look:
    """The index-th of len(COLORS) x len(LINESTYLES) distinct looks: colours first, then line styles, each
    with its own marker."""
    n = len(COLORS)
    return Look(COLORS[index % n], LINESTYLES[(index // n) % len(LINESTYLES)], MARKERS[index % len(MARKERS)])


def sourced(scheme: str, source: str, index: int = 0, n_schemes: int = 1) -> tuple[Look, float]:
    """A scheme's look as `source` draws it, and the factor its x values are multiplied by (dodge)."""
    base, src = look(scheme), SOURCES[source]
    marker = base.marker if src.marker == "scheme" else src.marker
    factor = 2 ** (0.09 * (index - (n_schemes - 1) / 2)) if src.dodge else 1.0
    return Look(base.color, src.ls or base.ls, marker, src.filled), factor


def rc(width: float) -> dict:
    """Matplotlib settings of a figure `width` inches wide: font sizes readable at print size."""
    small = width < 5
    base = 7 if small else 8
    return {"font.size": base, "axes.titlesize": base, "axes.labelsize": base,
            "xtick.labelsize": base - 1, "ytick.labelsize": base - 1, "legend.fontsize": base - 1,
            "figure.titlesize": base + 1, "lines.linewidth": 1.1, "lines.markersize": 4 if small else 5,
            "axes.grid": False, "legend.frameon": False, "pdf.fonttype": 42, "svg.fonttype": "none"}


def figure(width: float, nrows: int, ncols: int, panel_h: float, legend_h: float = 0.0, **kw) -> tuple[Figure, object]:
    """A constrained-layout figure `width` wide with nrows x ncols axes of about `panel_h` inches high,
    plus `legend_h` inches for the legends below (kw: plt.subplots' sharex, sharey, ...)."""
    return plt.subplots(nrows, ncols, figsize=(width, nrows * panel_h + legend_h), layout="constrained",
                        squeeze=False, **kw)


def grid_shape(n: int, width: float, narrow_cols: int = 2, wide_cols: int = 4) -> tuple[int, int]:
    """(rows, cols) of a grid of n panels at `width`: at most narrow_cols (single column) or wide_cols."""
    cols = max(1, min(n, narrow_cols if width < 5 else wide_cols))
    return math.ceil(n / cols), cols


def legend_below(fig: Figure, handles: list, labels: list[str], where: str = "lower center", ncol: int | None = None,
                 title: str | None = None) -> Legend:
    """A figure legend outside the axes: where = "lower|upper left|center|right" (below or above them)."""
    where = where if " " in where else f"lower {where}"
    ncol = ncol or min(len(labels), 2 if fig.get_figwidth() < 5 else 6)
    return fig.legend(handles, labels, loc=f"outside {where}", ncol=ncol, title=title,
                      handlelength=2.2, columnspacing=1.0)


def unique_handles(axes: Iterable[Axes]) -> tuple[list, list[str]]:
    """Every legend label of `axes` once (the first handle that has it), in order."""
    seen: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, handle)
    return list(seen.values()), list(seen)


def signature(artist) -> tuple:
    """What a reader tells a series by: colour, line style, marker, filled (scatter: face and edge colour,
    size, marker path)."""
    if isinstance(artist, PathCollection):
        face = [to_hex(c, keep_alpha=False) for c in artist.get_facecolors()[:1]]
        edge = [to_hex(c, keep_alpha=False) for c in artist.get_edgecolors()[:1]]
        path = artist.get_paths()[0].vertices.round(3).tobytes() if artist.get_paths() else b""
        return ("scatter", tuple(face), tuple(edge), tuple(artist.get_sizes()[:1]), path)
    ls = artist.get_linestyle() if len(artist.get_xdata()) > 1 else "None"
    marker = str(artist.get_marker())
    open_ = str(artist.get_markerfacecolor()).lower() == "none"
    return (to_hex(artist.get_color()), ls, marker, marker not in ("None", "") and open_)


def series_artists(ax: Axes) -> list:
    """The series of an axes: its lines and scatters, less errorbar caps and bars (label _nolegend_)."""
    lines = [a for a in ax.lines if a.get_visible() and a.get_label() != "_nolegend_"]
    return lines + [c for c in ax.collections if isinstance(c, PathCollection) and c.get_visible()]


def clashes(fig: Figure) -> list[str]:
    """One line per pair of series in one axes of `fig` that share colour and style (empty: none)."""
    found = []
    for i, ax in enumerate(fig.axes):
        seen: dict[tuple, str] = {}
        for artist in series_artists(ax):
            sig, label = signature(artist), artist.get_label()
            if sig in seen:
                found.append(f"axes {i} ({ax.get_title() or 'untitled'}): {seen[sig]!r} and {label!r} look alike {sig[:4]}")
            seen.setdefault(sig, label)
    return found


def overlapping_ticks(fig: Figure) -> list[str]:
    """One line per pair of neighbouring tick labels of one axis of `fig` that overlap once drawn (empty:
    none), and per tick label smaller than 5 pt."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for i, ax in enumerate(fig.axes):
        for name, labels, along in (("x", ax.get_xticklabels(), 0), ("y", ax.get_yticklabels(), 1)):
            shown = [t for t in labels if t.get_visible() and t.get_text()]
            found += [f"axes {i} {name}: {t.get_text()!r} at {t.get_fontsize():g} pt" for t in shown
                      if t.get_fontsize() < 5]
            boxes = sorted(((t.get_window_extent(renderer).extents, t.get_text()) for t in shown),
                           key=lambda b: b[0][along])
            found += [f"axes {i} ({ax.get_title() or 'untitled'}) {name}: {ta!r} and {tb!r} overlap"
                      for (a, ta), (b, tb) in zip(boxes, boxes[1:]) if _cross(a, b)]
    return found


def _cross(a, b) -> bool:
    """Whether two boxes (x0, y0, x1, y1) in pixels overlap by more than a pixel both ways."""
    return min(a[2], b[2]) - max(a[0], b[0]) > 1 and min(a[3], b[3]) - max(a[1], b[1]) > 1


def tidy_ticks(fig: Figure) -> None:
    """Readable ticks on every axes left to matplotlib's defaults: on a linear axis about 2 labelled ticks per
    inch of the axis, at most 4 (single column) or 6; on a log axis spanning less than a decade, plain labels at 2 and 5 instead of
    one crowded label per minor tick, none on the minor ticks otherwise."""
    fig.draw_without_rendering()                       # lays the axes out: their sizes are known
    for ax in fig.axes:
        box = ax.get_position()
        for axis, inches in ((ax.xaxis, box.width * fig.get_figwidth()), (ax.yaxis, box.height * fig.get_figheight())):
            if type(axis.get_major_locator()) is mticker.AutoLocator:
                nbins = max(2, min(4 if fig.get_figwidth() < 5 else 6, int(inches * 2)))
                axis.set_major_locator(mticker.MaxNLocator(nbins=nbins, steps=[1, 2, 2.5, 5, 10]))
            if axis.get_scale() != "log" or type(axis.get_minor_formatter()) is not mticker.LogFormatterSciNotation:
                continue
            lo, hi = sorted(axis.get_view_interval())
            if lo > 0 and hi / lo < 10:
                axis.set_minor_locator(mticker.LogLocator(subs=(2.0, 5.0)))
                axis.set_minor_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
                axis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
            else:
                axis.set_minor_formatter(mticker.NullFormatter())


# hooks(fig, stem, variant) run on every figure before it is written (the figure test records sizes here)
BEFORE_SAVE: list[Callable[[Figure, str, str], None]] = []


def save(draw: Callable[[float], Figure], out: Path, stem: str, header: list[str], rows: list[list]) -> list[Path]:
    """Draw at every width of WIDTHS and write the files of the module docstring; the paths written.
    ValueError naming the figure and the two series when two series of one axes look alike."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for variant, width in WIDTHS.items():
        with plt.rc_context(rc(width)):
            fig = draw(width)
            tidy_ticks(fig)
            try:
                for hook in BEFORE_SAVE:
                    hook(fig, stem, variant)
                if found := clashes(fig):
                    raise ValueError(f"{stem} ({variant}): two series look alike: {found[0]}")
                written = write(fig, out, f"{stem}_{variant}")
                if variant == DEFAULT_VARIANT:
                    written += [shutil.copyfile(p, out / p.name.replace(f"{stem}_{variant}", stem)) for p in written]
                paths += written
            finally:
                plt.close(fig)
    write_csv(out / f"{stem}.csv", header, rows)
    return paths + [out / f"{stem}.csv"]


def write(fig: Figure, out: Path, name: str) -> list[Path]:
    """out/name.png (DPI) and out/name.pdf (vector, the same bytes on rerun), at the figure's own size."""
    png, pdf = out / f"{name}.png", out / f"{name}.pdf"
    fig.savefig(png, dpi=DPI)
    fig.savefig(pdf, metadata={"CreationDate": None})
    return [png, pdf]
