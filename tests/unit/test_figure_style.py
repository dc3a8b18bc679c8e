"""paper_figs/style.py and the paper figures drawn with it: every figure of paper_figs/figures.yaml, drawn
from small inputs (tiny training runs, hand-made run folders, the shipped profiles), is saved at 3.3 and
7 in wide (within 1 %) as PDF and 300-dpi PNG beside the default file, and no two series of one axes
share colour and style (checked on the live figure through style.BEFORE_SAVE, before it is written)."""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from omegaconf import OmegaConf
from PIL import Image

from tests.conftest import make_cfg, paper_script, train

style = paper_script("style")
registry = paper_script("registry")


def pdf_width_in(path: Path) -> float:
    """Width of the first page's MediaBox, in inches (72 points each)."""
    box = re.search(rb"/MediaBox\s*\[\s*0\s+0\s+([\d.]+)\s+([\d.]+)\s*\]", path.read_bytes())
    assert box, path
    return float(box[1]) / 72


def png_width_in(path: Path) -> float:
    with Image.open(path) as im:
        dpi = im.info.get("dpi", (style.DPI,))[0]
        assert round(dpi) == style.DPI, (path, dpi)
        return im.size[0] / style.DPI


# --- the style itself ------------------------------------------------------------------------------------
def test_named_series_and_sources_are_distinct():
    looks = [(lk.color, lk.ls, lk.marker) for lk in style.SERIES.values()]
    assert len(set(looks)) == len(looks)
    assert all(lk.color.upper() in {c.upper() for c in (*style.COLORS, style.SKY)} for lk in style.SERIES.values())
    for scheme in ("dense", "topk", "gtopk"):          # one scheme from every source: told apart by style
        drawn = [style.sourced(scheme, s)[0] for s in style.SOURCES]
        assert len({(lk.ls, lk.marker, lk.filled) for lk in drawn}) == len(drawn)
    assert len({(lk.color, lk.ls, lk.marker) for lk in map(style.cycle, range(28))}) == 28


def test_a_new_series_is_one_line():
    style.SERIES["simgrid_test"] = style.Look(style.SKY, ":", "|")
    try:
        assert style.look("simgrid_test").kw()["marker"] == "|"
    finally:
        del style.SERIES["simgrid_test"]


def test_two_alike_series_are_refused(tmp_path):
    def draw(width):
        fig, axes = style.figure(width, 1, 1, 2.0)
        axes[0][0].plot([0, 1], [0, 1], **style.look("topk").kw(), label="a")
        axes[0][0].plot([0, 1], [1, 0], **style.look("topk").kw(), label="b")
        return fig

    (found,) = style.clashes(draw(7.0))
    assert "'a' and 'b'" in found
    with pytest.raises(ValueError, match="two series look alike"):
        style.save(draw, tmp_path, "fig_alike", ["x"], [])
    plt.close("all")


def test_overlapping_tick_labels_are_found():
    fig, axes = style.figure(3.3, 1, 1, 2.0)
    axes[0][0].set_xticks(range(5), [f"label number {i}" for i in range(5)])
    assert any("overlap" in line for line in style.overlapping_ticks(fig))
    axes[0][0].set_xticks(range(5), [str(i) for i in range(5)])
    assert style.overlapping_ticks(fig) == []
    plt.close(fig)


def test_save_writes_both_widths_and_the_default(tmp_path):
    def draw(width):
        fig, axes = style.figure(width, 1, 2, 1.5, 0.4)
        for ax, name in zip(axes[0], ("dense", "gtopk")):
            ax.plot([1, 2], [1, 2], **style.look(name).kw(), label=name)
        style.legend_below(fig, *style.unique_handles(axes.flat))
        return fig

    paths = style.save(draw, tmp_path, "fig_t", ["x"], [[1]])
    names = {p.name for p in paths}
    assert names == {f"fig_t{v}.{e}" for v in ("", "_col1", "_col2") for e in ("png", "pdf")} | {"fig_t.csv"}
    for variant, width in style.WIDTHS.items():
        assert pdf_width_in(tmp_path / f"fig_t_{variant}.pdf") == pytest.approx(width, rel=0.01)
        assert png_width_in(tmp_path / f"fig_t_{variant}.png") == pytest.approx(width, rel=0.01)
    assert (tmp_path / "fig_t.png").read_bytes() == (tmp_path / "fig_t_col2.png").read_bytes()


# --- every paper figure ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """Top-k runs of two models with statistics and u snapshots, a gTop-k run, a dense run (as
    tests/unit/test_analysis.py builds them): enough for fig_histograms, fig_bounds and fig_convergence."""
    root = tmp_path_factory.mktemp("runs")
    small = ["trainer.max_steps=6", "trainer.batch_size=16", "trainer.eval_every=1", "trainer.epochs=1"]
    for name, extra in [("topk", ["compressor=topk", "capture.stats=true", "capture.u_steps=[1,3,6]"]),
                        ("topk_d01", ["compressor=topk", "compressor.density=0.01", "capture.stats=true",
                                      "capture.u_steps=[2,6]"]),
                        ("gtopk", ["compressor=gtopk", "capture.stats=true"]),
                        ("dense", ["compressor=dense"]), ("dense2", ["compressor=dense", "seed=2"])]:
        train(root / name, *small, *extra)
        (root / name / ".hydra").mkdir()
        OmegaConf.save(make_cfg(*small, *extra), root / name / ".hydra" / "config.yaml")
    return root


@pytest.fixture(scope="module")
def drawn(tiny_runs, made_runs, tmp_path_factory):
    """{(stem, variant): (width, height, problems)} of every figure the scripts of the registry saved (problems:
    series alike, overlapping or tiny tick labels, a legend inside an axes), and the output folder."""
    out = tmp_path_factory.mktemp("out")
    seen: dict[tuple[str, str], tuple[float, float, list[str]]] = {}

    def record(fig, stem, variant):
        legends_inside = [f"axes {i} has its own legend" for i, ax in enumerate(fig.axes) if ax.get_legend()]
        seen[(stem, variant)] = (*fig.get_size_inches(), style.clashes(fig) + style.overlapping_ticks(fig)
                                 + legends_inside)

    style.BEFORE_SAVE.append(record)
    try:
        for script, argv in SCRIPTS(tiny_runs, made_runs, out).items():
            assert paper_script(script).main(argv) == 0, script
    finally:
        style.BEFORE_SAVE.remove(record)
    return seen, out


@pytest.fixture(scope="module")
def made_runs(tmp_path_factory):
    """Hand-made run folders: a density sweep (tests/unit/test_fig_density.py's) and u snapshots of the FNN-3
    and SmallCNN runs fig_selection's real-u part reads (tests/unit/test_fig_selection.py's)."""
    from tests.unit.test_fig_density import fake_run
    from tests.unit.test_fig_selection import fake_runs

    root = tmp_path_factory.mktemp("made")
    for seed in (1, 2):
        fake_run(root, "dense", 1.0, seed, [0.92, 0.95, 0.95, 0.95, 0.96], 1.0)
        for scheme, density, acc in (("topk", 0.01, 0.93), ("topk", 0.001, 0.8), ("gaussiank", 0.01, 0.91),
                                     ("gaussiank", 0.001, 0.85)):
            fake_run(root, scheme, density, seed, [0.5, 0.7, 0.9, acc, acc], density)
    fake_runs(root / "selection", d=2000, steps=(1, 30))
    return root


def SCRIPTS(runs: Path, made: Path, out: Path) -> dict[str, list[str]]:
    """Each figure script of the registry and its argv here: small inputs, quick settings."""
    quick = ["--reps", "1", "--devices", "cpu", "--min-round-s", "0", "--retries", "0"]
    return {"fig_scaling": ["--out", str(out)],
            "fig_histograms": ["--runs", str(runs), "--out", str(out)],
            "fig_bounds": ["--runs", str(runs), "--out", str(out)],
            "fig_convergence": ["--runs", str(runs), "--out", str(out)],
            "fig_density": ["--runs", str(made / "density"), "--out", str(out)],
            "fig_zoo": ["--out", str(out)],                      # the committed SIMULATED race's CSVs
            "fig_selection": ["--sizes", "1000", "4000", *quick, "--reference-d", "2000", "--real-densities", "0.01",
                              "--runs", str(made / "selection"), "--out", str(out), "--results-dir", str(out / "res")]}


@pytest.mark.slow       # trains five 6-step runs and draws every figure at two widths
def test_every_registry_figure_is_drawn_here(drawn):
    """Every figure script of `make figs` is in SCRIPTS, and every image it lists was drawn (the convergence
    figures under the name of the tiny runs' one figure)."""
    entries = [e for e in registry.entries(registry.load()) if e.in_figs]
    assert {e.script.stem for e in entries} == set(SCRIPTS(Path(), Path(), Path()))
    stems = {stem for stem, _ in drawn[0]}
    images = {o.removesuffix(".png") for e in entries if e.name != "convergence" for o in e.outputs()
              if o.endswith(".png")}
    assert images and images <= stems
    assert "fig_convergence" in stems and "fig_selection_real" in stems


@pytest.mark.slow
def test_every_figure_fits_a_column_and_has_no_two_alike_series(drawn):
    """Both widths within 1 %, PDF and PNG of each and the default files; no two series alike, tick labels
    apart and at least 5 pt, legends outside the axes."""
    seen, out = drawn
    assert seen
    for (stem, variant), (width, height, found) in seen.items():
        assert width == pytest.approx(style.WIDTHS[variant], rel=0.01), (stem, variant)
        assert 1.0 < height < 10.0, (stem, variant, height)
        assert found == [], (stem, variant, found)
        assert pdf_width_in(out / f"{stem}_{variant}.pdf") == pytest.approx(style.WIDTHS[variant], rel=0.01)
        assert png_width_in(out / f"{stem}_{variant}.png") == pytest.approx(style.WIDTHS[variant], rel=0.01)
        assert (out / f"{stem}.png").is_file() and (out / f"{stem}.pdf").is_file()
    assert {v for _, v in seen} == set(style.WIDTHS)
