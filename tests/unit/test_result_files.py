"""python -m ssgd.report: a run's figure, a sweep's table (swept keys as columns) and overlay, bad input exit 2."""
import csv
import json
import os
import subprocess
import sys

import pytest

from ssgd.utils import result_files
from tests.conftest import ROOT

PNG = b"\x89PNG\r\n\x1a\n"


def fake_run(run_dir, overrides, acc, compressor):
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    rows = [{"step": s, "train/loss": 2.0 / s, "train/acc": acc * s / 20, "density/scheduled": 0.01,
             "density/achieved": 0.0099, "comm/bytes_sent": 800.0, "time/step_s": 0.01, "target/iter_s": 0.004,
             "target/comm_s": 0.001, "lr": 0.1} for s in (10, 20)] + [{"step": 20, "val/acc": acc, "val/loss": 1.0}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "summary.json").write_text(json.dumps({"compressor": compressor, "world_size": 4, "steps": 20,
                                                      "val/acc": acc, "val/loss": 1.0, "wall_s": 1.5}))


def test_run_figure_is_a_png_in_the_run_dir(tmp_path):
    fake_run(tmp_path / "run", ["compressor=topk"], 0.5, "topk")
    out = result_files.run_figure(tmp_path / "run")
    assert out == tmp_path / "run" / result_files.RUN_FIGURE and out.read_bytes()[:8] == PNG


def test_sweep_table_has_one_row_per_point_with_the_swept_keys(tmp_path):
    fake_run(tmp_path / "1-compressor=gtopk,seed=3", ["compressor=gtopk", "seed=3", "trainer.max_steps=20"], 0.7, "gtopk")
    fake_run(tmp_path / "0-compressor=topk,seed=3", ["compressor=topk", "seed=3", "trainer.max_steps=20"], 0.6, "topk")
    (tmp_path / "2-failed").mkdir()                                   # a point without summary.json is left out
    written = result_files.sweep_table(tmp_path)
    assert [p.name for p in written] == [result_files.SWEEP_CSV, result_files.SWEEP_MD, result_files.SWEEP_FIGURE]
    rows = list(csv.DictReader((tmp_path / result_files.SWEEP_CSV).open()))
    assert [(r["point"], r["compressor"], r["val/acc"]) for r in rows] == [("0", "topk", "0.6"), ("1", "gtopk", "0.7")]
    assert "seed" not in rows[0] and "trainer.max_steps" not in rows[0]   # the same in every point: not a column
    md = (tmp_path / result_files.SWEEP_MD).read_text().splitlines()
    assert md[0].startswith("| point | compressor |") and len(md) == 4
    assert (tmp_path / result_files.SWEEP_FIGURE).read_bytes()[:8] == PNG


@pytest.mark.slow
def test_cli_refuses_a_folder_without_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-m", "ssgd.report", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 2 and str(tmp_path) in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_separate_runs_are_labelled_by_folder_and_their_defaults_are_filled_from_the_composed_config(tmp_path):
    """python -m ssgd.report outputs/<date>: runs named HH-MM-SS, one with compressor and cluster from the defaults."""
    for name, overrides, compressor, cluster in (("01-02-03", ["compressor=topk", "cluster=32x1gbe"], "topk", "32x1gbe"),
                                                 ("01-09-40", [], "gtopk", "local")):
        fake_run(tmp_path / name, overrides, 0.6, compressor)
        (tmp_path / name / ".hydra" / "config.yaml").write_text(
            f"compressor:\n  name: {compressor}\n  density: 0.001\ncluster:\n  name: {cluster}\n  world_size: 4\nseed: 0\n")
    result_files.sweep_table(tmp_path)
    rows = list(csv.DictReader((tmp_path / result_files.SWEEP_CSV).open()))
    assert [(r["point"], r["compressor"], r["cluster"]) for r in rows] == \
        [("01-02-03", "topk", "32x1gbe"), ("01-09-40", "gtopk", "local")]


def records(lr_of, warmup: bool = True) -> list[dict]:
    """Training records every 10 steps of a 200-step run (density 0.004 for 30 steps if `warmup`), evaluations."""
    rows = []
    for s in range(10, 201, 10):
        density = 0.004 if warmup and s <= 30 else 0.001
        rows.append({"step": s, "epoch": s / 31, "train/loss": 2.0 / s, "train/acc": 1 - 1 / s, "lr": lr_of(s),
                     "density/scheduled": density, "density/achieved": density * 0.99,
                     "comm/bytes_sent": 8e5 * density, "comm/bytes_all_ranks": 3.2e6 * density,
                     "time/step_s": 0.01 + s * 1e-5, "target/comm_s": 7e-6})
    return rows + [{"step": s, "epoch": s / 31, "val/loss": 1 / s, "val/acc": 0.9} for s in (100, 200)]


def drawn(rows: list[dict]) -> dict:
    """{panel title: main axes} of the run figure of `rows`."""
    from ssgd.utils import run_report
    import matplotlib.pyplot as plt
    fig = run_report.draw_run({"compressor": "gtopk", "world_size": 4, "steps": 200, "epochs": 6}, rows)
    plt.close(fig)                                              # its axes stay readable
    return {ax.get_title(): ax for ax in fig.axes if ax.get_title() and not ax.get_title().startswith("warm-up")}


def test_a_constant_series_gets_no_panel_and_a_changing_one_does():
    constant, decaying = drawn(records(lambda s: 0.1)), drawn(records(lambda s: 0.1 * 0.5 ** (s // 100)))
    assert "learning rate" not in constant and "learning rate" in decaying
    fig_text = " ".join(t.get_text() for t in next(iter(constant.values())).figure.texts)
    assert "lr = 0.1" in fig_text                               # left out, but its value is said
    # val/acc constant at 0.9: no validation line in the accuracy panel; the modelled comm time (constant) is left out
    assert [line.get_label() for line in constant["accuracy"].lines] == ["training (step means)"]
    assert all("modelled" not in line.get_label() for line in constant["time per step"].lines)


def test_axis_labels_carry_the_registry_units():
    from ssgd.utils.metric_names import METRICS
    from ssgd.utils.run_report import PANELS
    axes = drawn(records(lambda s: 0.1 / s))
    assert set(axes) == {p.title for p in PANELS}
    for panel in PANELS:
        unit = METRICS[panel.keys[0]].unit
        assert f"[{'dimensionless' if unit == '1' else unit}]" in axes[panel.title].get_ylabel(), panel.title
        assert "[steps]" in axes[panel.title].get_xlabel() and "1 epoch = 31 steps" in axes[panel.title].get_xlabel()
    assert "[B]" in axes["bytes sent per step"].get_ylabel() and "[s]" in axes["time per step"].get_ylabel()
    assert "[fraction]" in axes["accuracy"].get_ylabel() and "[nats]" in axes["cross-entropy loss"].get_ylabel()


def test_bytes_say_per_worker_and_all_ranks_and_density_shows_its_warm_up():
    axes = drawn(records(lambda s: 0.1))
    assert [line.get_label() for line in axes["bytes sent per step"].lines] == \
        ["per worker (max over ranks)", "all ranks (sum)"]
    assert axes["density k/d"].get_yscale() == "log"
    insets = [a for a in axes["density k/d"].child_axes if a.get_title().startswith("warm-up")]
    assert len(insets) == 1 and max(insets[0].lines[0].get_xdata()) == 80   # twice step 40, the first at 0.001
    no_warmup = drawn(records(lambda s: 0.1, warmup=False))
    assert "density k/d" not in no_warmup                       # constant density: no panel at all
