"""Layering: `ssgd.perf` holds models only and imports nothing above it (the programs that use the
rest of the package live in `ssgd.tools`)."""
import ast
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PERF = ROOT / "src" / "ssgd" / "perf"
# what perf may import from this package: itself and the one user-error type
ALLOWED = ("ssgd.perf", "ssgd.errors")


def test_importing_the_models_loads_no_module_above_perf():
    code = ("import json, sys; import ssgd.perf.cost, ssgd.perf.iteration, ssgd.perf.wfbp, ssgd.perf.alphabeta, "
            "ssgd.perf.profiles, ssgd.perf.paper; print(json.dumps(sorted(m for m in sys.modules if m == 'ssgd' "
            "or m.startswith('ssgd.'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert "ssgd.perf.iteration" in loaded and "ssgd.perf.cost" in loaded          # the check saw them
    above = [m for m in loaded if m != "ssgd" and not m.startswith(ALLOWED)]
    assert above == [], f"importing ssgd.perf loaded {above}"


def imported_modules(source: str, package: str) -> set[str]:
    """Every module that `source`, a module of `package`, imports (relative imports resolved;
    `from X import y` counts as X and X.y, `from ssgd import y` as ssgd.y only)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:                                   # from . import x / from ..tools import y
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base != "ssgd":
                out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def forbidden(mods: set[str]) -> list[str]:
    """The modules of this package above perf among `mods` (`import ssgd` alone counts: it reaches all)."""
    return sorted(m for m in mods if (m == "ssgd" or m.startswith("ssgd.")) and not m.startswith(ALLOWED))


def test_no_file_in_perf_imports_above_perf():
    files = sorted(PERF.rglob("*.py"))
    assert PERF / "iteration.py" in files and len(files) >= 7
    bad = {}
    for path in files:
        package = ".".join(["ssgd", *path.relative_to(ROOT / "src" / "ssgd").parent.parts])
        above = forbidden(imported_modules(path.read_text(), package))
        if above:
            bad[str(path.relative_to(ROOT))] = above
    assert bad == {}, f"ssgd.perf must not import {bad} (build, replica, launch, comm, compress, tools, ...)"


@pytest.mark.parametrize("source", ["from ssgd.build import trainer", "import ssgd.replica", "from ssgd import launch",
                                    "from .. import comm", "from ..tools import measure",
                                    "from ssgd.compress.sparse import k_of", "import ssgd"])
def test_the_static_check_flags_every_way_of_importing_above_perf(source):
    assert forbidden(imported_modules(source, "ssgd.perf")), source


@pytest.mark.parametrize("source", ["from ssgd.perf import cost", "from . import wfbp", "from .alphabeta import AlphaBeta",
                                    "from ssgd.errors import ConfigError", "from ssgd import errors",
                                    "from ssgd.perf.iteration import Profile", "import json"])
def test_the_static_check_allows_perf_itself(source):
    assert forbidden(imported_modules(source, "ssgd.perf")) == [], source
