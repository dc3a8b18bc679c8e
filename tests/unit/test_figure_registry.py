"""paper_figs/figures.yaml, the registry of the figures: every entry is consistent (its script exists, its
outputs and README rows are listed, its findings are its script's), make_figs.py's plan and the Makefile
follow it, and the recipe of paper_figs/README.md ("Adding a figure") holds: a toy figure added to a copy
of the checkout as its script and one entry is planned by make_figs.py, made by `make fig-toy`, and written
into the README by readme.py, with no other edit."""
import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, paper_script

registry = paper_script("registry")
ENTRIES = registry.entries(registry.load())


def functions(script: Path) -> set[str]:
    return {n.name for n in ast.parse(script.read_text()).body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_entry_is_consistent(entry):
    assert entry.script.is_file(), entry.script
    outputs = entry.outputs()
    assert outputs and entry.rows(), "an entry lists its outputs and its README rows"
    for row in entry.rows():
        assert (f"{row.name}.png" if row.is_image else row.name) in outputs, row.name
    if entry.has_findings:
        assert "findings" in functions(entry.script)
        assert {f"{image}.png" for image in entry.images()} <= set(outputs)
    if entry.in_figs:
        assert entry.expected_s > 0 and entry.script.parent == ROOT / "paper_figs"
        assert "main" in functions(entry.script)


def test_every_figure_script_has_an_entry():
    scripts = {e.script.name for e in ENTRIES}
    assert {p.name for p in (ROOT / "paper_figs").glob("fig_*.py")} <= scripts


def test_figures_are_made_by_the_generic_rule():
    """`make fig-<entry>` for every entry comes from one rule: no per-figure target shadows it."""
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^fig-%:", text, re.M)
    assert not [e.name for e in ENTRIES if re.search(rf"^fig-{e.name}:", text, re.M)]


def test_make_figs_plan_follows_the_registry(tmp_path):
    make_figs = paper_script("make_figs")
    names = [name for name, _ in make_figs.steps(tmp_path / "o", tmp_path / "r", 2, False)]
    assert names == ["runs", *[e.step for e in ENTRIES if e.in_figs], "readme"]
    assert [name for name, _ in make_figs.steps(tmp_path / "o", tmp_path / "r", 2, True)] == \
        ["runs", *[e.step for e in ENTRIES if e.in_figs and e.quick]]


TOY = '''"""A toy figure: one line, and what it says."""
import argparse
import sys
from pathlib import Path

from figlib import OUT, plt, read_rows, save


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 2])
    save(fig, Path(args.out), "fig_toy", ["x", "y"], [[0, 0], [1, 2]])
    return 0


def findings(out):
    rows = read_rows(out, "fig_toy") or []
    return [f"- toy: y reaches {max(float(r['y']) for r in rows):g}"] if rows else []


if __name__ == "__main__":
    sys.exit(main())
'''
ENTRY = '''  toy:
    script: paper_figs/fig_toy.py
    expected_s: 1
    outputs: [fig_toy]
    readme:
      - {name: fig_toy, command: "`make fig-toy`", data: "a line", paper: "none"}
    findings: {}
'''


@pytest.mark.slow
def test_a_new_figure_is_its_script_and_one_entry(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "paper_figs", root / "paper_figs",
                    ignore=shutil.ignore_patterns("runs", "out", "measured", "__pycache__"))
    shutil.copytree(ROOT / "experiments", root / "experiments")
    shutil.copy(ROOT / "Makefile", root / "Makefile")
    (root / "bench").symlink_to(ROOT / "bench")              # fig_selection.py imports bench/selection.py
    (root / "paper_figs" / "fig_toy.py").write_text(TOY)
    figures = root / "paper_figs" / "figures.yaml"
    figures.write_text(figures.read_text() + ENTRY)          # `figures:` is the file's last key

    def py(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=300)

    plan = py("paper_figs/make_figs.py", "--dry-run").stdout.splitlines()
    assert [i for i, line in enumerate(plan) if "fig_toy.py" in line] == [len(plan) - 2]      # before readme.py
    made = subprocess.run(["make", "-n", "-o", ".venv/.setup-done", "fig-toy", f"PY={sys.executable}",
                           f"OUT={tmp_path / 'out'}"], cwd=root, capture_output=True, text=True, timeout=120)
    assert f"fig_toy.py --out {tmp_path / 'out'}" in made.stdout, made.stdout + made.stderr
    drawn = py("paper_figs/make_figs.py", "--figure", "toy", "--out", str(tmp_path / "out"))
    assert drawn.returncode == 0, drawn.stderr
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"fig_toy.png", "fig_toy.pdf", "fig_toy.csv"}
    readme = tmp_path / "out" / "README.md"
    written = py("paper_figs/readme.py", "--out", str(tmp_path / "out"), "--readme", str(readme))
    assert written.returncode == 0, written.stderr
    text = readme.read_text()
    assert "| [`fig_toy`](fig_toy.png) | `make fig-toy` | a line | none |" in text
    assert "### fig_toy\n\n![fig_toy](fig_toy.png)\n\n- toy: y reaches 2\n" in text
