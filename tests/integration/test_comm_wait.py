"""time/comm_min_s and time/comm_max_s split a collective's own cost from the wait for a late rank: on real
torch.distributed ranks where one rank sleeps before every collective, the others' time in it holds the sleep
and the late rank's does not; with threads (one collective run together) all three times are one number."""
from __future__ import annotations

import pytest

from conftest import train
from straggler import late_rank_summary
from torch_ranks import run_ranks

DELAY_S = 0.2                   # well above a loaded machine's scheduling jitter


@pytest.mark.slow              # a rank sleeps on purpose: wall-clock seconds, not computation
@pytest.mark.parametrize("P, slow", [(2, 1), (3, 0)])
def test_a_late_rank_shows_as_wait_not_as_cost(tmp_path, P, slow):
    out = run_ranks(P, late_rank_summary, (slow, DELAY_S, str(tmp_path)), timeout=120)[0]
    assert out["steps"], "no step records"
    for rec in out["steps"][1:]:                  # step 1 also waits for the first rendezvous of each rank
        assert rec["time/comm_max_s"] >= 0.8 * DELAY_S, rec
        assert rec["time/comm_min_s"] <= rec["time/comm_max_s"] - 0.5 * DELAY_S, rec
        assert rec["time/comm_min_s"] <= rec["time/comm_s"] <= rec["time/comm_max_s"], rec
        if slow == 0:                             # rank 0 is the late one: its own time is the short one
            assert rec["time/comm_s"] < 0.5 * DELAY_S, rec
        else:
            assert rec["time/comm_s"] >= 0.8 * DELAY_S, rec
    summary = out["summary"]
    assert summary["time/comm_min_s"] <= summary["time/comm_s"] <= summary["time/comm_max_s"]


def test_threads_run_one_collective_so_the_three_times_agree(tmp_path):
    import json

    summary, _ = train(tmp_path, "trainer.max_steps=3", "trainer.log_every=1", "cluster.world_size=3")
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "time/comm_s" in r]
    assert len(steps) == 3
    for rec in steps:
        assert rec["time/comm_min_s"] == rec["time/comm_s"] == rec["time/comm_max_s"] > 0
    assert summary["time/comm_min_s"] == pytest.approx(summary["time/comm_s"], rel=1e-12)
