"""The backends' table (ssgd.run.backends): one row per schema option, and the places that depend on the backend
ask it instead of naming a backend."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from conftest import ROOT, make_cfg
from ssgd.config import Backend, DebugConfig
from ssgd.errors import ConfigError
from ssgd.run import backends, build, worker
from ssgd.worlds.base import ThreadWorld

RUN = ROOT / "src" / "ssgd" / "run"


def test_every_option_of_the_schema_has_one_row():
    assert list(backends.BACKENDS) == [b.value for b in Backend]
    assert all(backends.parts(b).name == b.value for b in Backend)
    assert backends.launched() == ["mpi", "torch"]
    with pytest.raises(ValueError, match="backend=nope: unknown; known: thread, mpi, torch"):
        backends.parts("nope")


def test_the_rows_give_each_ranks_command():
    assert backends.parts("mpi").worker_command(Path("w.yaml")) == [
        sys.executable, "-m", "mpi4py", "-m", "ssgd.run.worker", "mpi", "w.yaml"]
    assert backends.parts("torch").worker_command(Path("w.yaml")) == [
        sys.executable, "-m", "ssgd.run.worker", "torch", "w.yaml"]
    with pytest.raises(ValueError, match="no launcher"):
        backends.parts("thread").launcher_module()


@pytest.mark.parametrize("overrides, only", [
    (("backend=thread",), False), (("backend=mpi",), False), (("backend=mpi", "mpi.launch=false"), True),
    (("backend=torch",), False), (("backend=torch", "dist.launch=false"), True),
    (("backend=torch", "dist.emit=sbatch"), True),
])
def test_which_runs_only_print_how_to_start_their_ranks(overrides, only):
    assert build.prints_only(build.spec(make_cfg(*overrides)).config) is only


def test_the_in_process_world_comes_from_the_table():
    world = build.local_world(build.spec(make_cfg("cluster.world_size=3", "threads=2")).config)
    try:
        assert isinstance(world, ThreadWorld) and (world.size, world.K) == (3, 2)
    finally:
        world.close()
    with pytest.raises(ValueError, match="backend=mpi: every rank is a process"):
        build.local_world(build.spec(make_cfg("backend=mpi")).config)


def test_the_memory_rule_is_the_rows():
    assert backends.parts("thread").footprint(1000, 4, False).bytes == 4 * 2 * 1000 * 4
    assert backends.parts("mpi").footprint(1000, 4, True) is None         # a hostfile spreads the ranks
    assert backends.parts("torch").footprint(1000, 4, False).remedy.startswith("or use backend=thread")


@pytest.mark.parametrize("module", ["app.py", "build.py", "footprint.py", "worker.py"])
def test_no_backend_is_named_where_the_table_is_asked(module):
    """A backend's name appears in its row, its launcher and its messages, never in a comparison."""
    text = (RUN / module).read_text()
    assert not re.search(r"Backend\.\w|[=!]= *[\"'](thread|mpi|torch)[\"']|[\"'](thread|mpi|torch)[\"'] *[=!]=", text)


def test_the_worker_refuses_a_backend_without_a_launcher(capsys):
    assert worker.main(["thread", "w.yaml"]) == 2
    assert capsys.readouterr().err.startswith("usage: python -m ssgd.run.worker {mpi,torch} ")


def test_fault_injection_without_the_rank_hook_is_refused_in_one_line(monkeypatch):
    """debug.fail_rank does nothing outside the tests' rank hook, so a run that sets it without the hook is refused
    rather than trained as if no fault had been asked for."""
    monkeypatch.delenv("SSGD_RANK_HOOK", raising=False)
    with pytest.raises(ConfigError, match=r"^debug.fail_rank=1: fault injection runs in the tests' rank hook only"):
        DebugConfig(fail_rank=1)
    monkeypatch.setenv("SSGD_RANK_HOOK", "tests/rank_faults.py")
    assert DebugConfig(fail_rank=1).fail_rank == 1
