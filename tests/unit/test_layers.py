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


@pytest.mark.slow      # a fresh interpreter; test_no_file_in_perf_imports_above_perf is its static twin
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


@pytest.mark.parametrize("source", ["from ssgd.run.build import trainer", "import ssgd.loop.replica", "from ssgd import launch",
                                    "from .. import comm", "from ..tools import measure",
                                    "from ssgd.compress.sparse import k_of", "import ssgd"])
def test_the_static_check_flags_every_way_of_importing_above_perf(source):
    assert forbidden(imported_modules(source, "ssgd.perf")), source


@pytest.mark.parametrize("source", ["from ssgd.perf import cost", "from . import wfbp", "from .alphabeta import AlphaBeta",
                                    "from ssgd.errors import ConfigError", "from ssgd import errors",
                                    "from ssgd.perf.iteration import Profile", "import json"])
def test_the_static_check_allows_perf_itself(source):
    assert forbidden(imported_modules(source, "ssgd.perf")) == [], source


# The house (docs/layout.md): every module of the package is in one room, and a room imports only rooms on
# lower floors (and itself). The root holds the vocabulary every floor shares (errors, payload, config) and
# the entry faces on top (ddp, __main__, report).
FLOORS = {
    "errors": 0, "payload": 0, "native": 0, "conf": 0,
    "config": 1, "utils": 1, "perf": 1, "compress": 1,
    "data": 2, "comm": 2,
    "comm.collectives": 3, "comm.executors": 3, "models": 3,
    "worlds": 4,
    "loop": 5,
    "scheme_config": 6,
    "run": 7, "ddp": 7, "fsdp": 7,
    "tools": 8,
    "__main__": 9, "report": 9,
}
SRC = ROOT / "src" / "ssgd"


def room_of(module: str) -> str | None:
    """The room of a module name of this package (None for `ssgd` itself or another package)."""
    parts = module.split(".")
    if parts[0] != "ssgd" or len(parts) == 1:
        return None
    if parts[1] == "comm" and len(parts) > 2 and parts[2] in ("collectives", "executors"):   # rooms of their own
        return f"comm.{parts[2]}"
    return parts[1]


def module_name(path) -> tuple[str, str]:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    package = ".".join(parts[:-1])
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts), package


def upward_arrows(room: str, mods: set[str]) -> list[str]:
    """The imports of a module in `room` that reach its own floor in another room, or a floor above."""
    bad = []
    for m in mods:
        target = room_of(m)
        if m == "ssgd":
            bad.append(m)
        elif target is not None and target != room and FLOORS.get(target, 99) >= FLOORS[room]:
            bad.append(m)
    return sorted(bad)


def test_every_module_is_in_a_room_with_a_floor():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 80
    homeless = sorted(str(p.relative_to(SRC)) for p in files
                      if p != SRC / "__init__.py" and room_of(module_name(p)[0]) not in FLOORS)
    assert homeless == [], f"modules outside every room of docs/layout.md: {homeless}"


def test_no_room_imports_its_own_floor_or_above():
    bad = {}
    for path in sorted(SRC.rglob("*.py")):
        name, package = module_name(path)
        room = room_of(name)
        if room is None:
            continue
        arrows = upward_arrows(room, imported_modules(path.read_text(), package))
        if arrows:
            bad[str(path.relative_to(ROOT))] = arrows
    assert bad == {}, f"imports against the floors of docs/layout.md: {bad}"


@pytest.mark.parametrize("room, source", [("loop", "from ssgd.run import build"), ("comm", "import ssgd.loop.sync"),
                                          ("models", "from ssgd.models import mlp\nfrom ssgd.comm.executors import thread"),
                                          ("compress", "from ssgd.comm.ops import Send"), ("ddp", "from ssgd.tools import scheme_costs"),
                                          ("perf", "import ssgd"), ("data", "from ssgd.comm import wire"),
                                          ("native", "from ssgd.comm.collectives import gtopk"), ("comm", "from ssgd.comm.executors import thread"),
                                          ("comm.collectives", "from ssgd.comm.executors.thread import run_threads"),
                                          ("comm.executors", "from ssgd.comm.collectives.dense import DenseAllreduce"), ("run", "from ssgd.ddp import register"),
                                          ("loop", "from ssgd.scheme_config import build_scheme"),
                                          ("scheme_config", "from ssgd.run import build")])
def test_the_floor_check_flags_an_upward_or_sideways_arrow(room, source):
    assert upward_arrows(room, imported_modules(source, "ssgd." + room)), source


@pytest.mark.parametrize("room, source", [("loop", "from ssgd.worlds.base import World"), ("run", "from ssgd.loop import trainer"),
                                          ("comm.collectives", "from ssgd import native\nfrom ssgd.perf import cost\nfrom ssgd.comm.ops import Send"),
                                          ("compress", "from ssgd import native"),
                                          ("ddp", "from ssgd.loop.sync import RankCompression"), ("tools", "from ssgd.run import build"),
                                          ("ddp", "from ssgd.scheme_config import build_scheme"),
                                          ("run", "from ssgd.scheme_config import build_scheme"),
                                          ("scheme_config", "from ssgd.loop.sync import Scheme"),
                                          ("config", "from ssgd.errors import ConfigError")])
def test_the_floor_check_allows_arrows_down(room, source):
    assert upward_arrows(room, imported_modules(source, "ssgd." + room)) == [], source


# The algorithm reads no configuration: a scheme's config node becomes objects in `ssgd.scheme_config`.
CONFIG_FREE = ("loop", "comm", "comm.collectives", "comm.executors", "compress")


def test_the_algorithm_rooms_import_no_hydra_or_omegaconf():
    bad = {}
    for path in sorted(SRC.rglob("*.py")):
        name, package = module_name(path)
        if room_of(name) in CONFIG_FREE:
            found = sorted(m for m in imported_modules(path.read_text(), package)
                           if m.split(".")[0] in ("hydra", "omegaconf"))
            if found:
                bad[str(path.relative_to(ROOT))] = found
    assert bad == {}, f"the algorithm parses config nodes: {bad} (ssgd.scheme_config turns them into objects)"
