"""paper_figs/forked.py: a run forked from the warm server gives the results of a fresh `python src/train.py`.

runs.py trains `make figs`'s runs as children of one server that imported torch, Hydra and the lab once;
this pins that the fork changes nothing but the start-up time: the same metrics, record by record, and the
same summary (wall-clock keys aside), with one thread (the --jobs 2 case, OMP_NUM_THREADS=1 in the server)
and a failing run's status and last line coming back."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import paper_script

runs_py = paper_script("runs")
forked = paper_script("forked")
JOB = ["-cn", "topk_histograms_laptop", "hydra.mode=RUN", "trainer.max_steps=12", "trainer.log_every=2",
       "capture.u_steps=[4]"]


def timeless(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "wall_s" and not k.startswith(("time/", "throughput"))}


def records(run: Path) -> list[dict]:
    return [timeless(json.loads(line)) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def server():
    return forked.server(runs_py.run_env(one_thread=True))


@pytest.mark.slow              # the fresh run is a new interpreter (train.py), as the slow marker says
def test_a_forked_run_equals_a_fresh_one(server, tmp_path):
    runs_py.train("fresh", JOB, tmp_path, {}, True, None)
    runs_py.train("forked", JOB, tmp_path, {}, True, server)
    fresh, fork = tmp_path / "fresh", tmp_path / "forked"
    assert len(records(fresh)) > 3 and records(fork) == records(fresh)
    assert timeless(json.loads((fork / "summary.json").read_text())) == \
        timeless(json.loads((fresh / "summary.json").read_text()))
    captured = sorted(p.name for p in (fresh / "capture").iterdir())
    assert "u_step000004.pt" in captured and sorted(p.name for p in (fork / "capture").iterdir()) == captured
    assert (fork / "capture" / "u_step000004.pt").read_bytes() == (fresh / "capture" / "u_step000004.pt").read_bytes()
    assert json.loads((fork / "run_info.json").read_text())["overrides"] == JOB


def test_a_failing_forked_run_reports_its_status_and_last_line(server, tmp_path):
    with pytest.raises(RuntimeError, match=r"run bad failed \(exit 2\): .*compressor.density"):
        runs_py.train("bad", [*JOB, "compressor.density=1.5"], tmp_path, {}, True, server)
