"""Schedules, the thread pool's guarantees, and that logged costs are the cost model's."""
import json
import threading

import pytest
import torch

from conftest import make_cfg, train
from ssgd.run import build
from ssgd.compress.sparse import k_of
from ssgd.perf import cost
from ssgd.loop.schedule import LRSchedule
from ssgd.loop.sync import DensitySchedule
from ssgd.worlds.base import ThreadWorld


def test_lr_warmup_then_steps():
    s = LRSchedule(lr=0.1, warmup_epochs=10, warmup_start=0.1 / 4, milestones=(81, 122), gamma=0.1)
    assert s(0) == pytest.approx(0.025)
    assert s(5) == pytest.approx(0.025 + 0.075 * 0.5)
    assert s(10) == pytest.approx(0.1) and s(80.9) == pytest.approx(0.1)
    assert s(81) == pytest.approx(0.01) and s(130) == pytest.approx(0.001)


def test_warmup_starts_at_lr_over_P_by_default():
    sched = build.lr_schedule(make_cfg("schedule.warmup_epochs=5", "cluster=8x1gbe"), P=8)
    assert sched(0) == pytest.approx(0.1 / 8)


def test_density_warmup_per_epoch():
    d = DensitySchedule(0.001, (0.015625, 0.004))
    assert [d(e) for e in range(4)] == [0.015625, 0.004, 0.001, 0.001]
    with pytest.raises(ValueError, match=r"^density=0\.0: must be a number in \(0, 1\]"):
        DensitySchedule(0.0)


def test_lr_schedule_refuses_every_setting_that_gives_a_non_finite_or_negative_lr():
    for kwargs, key in [({"lr": float("inf")}, "lr"), ({"lr": 0.1, "warmup_start": -1.0}, "warmup_start"),
                        ({"lr": 0.1, "gamma": float("nan")}, "gamma"),
                        ({"lr": 0.1, "gamma": 1e200, "milestones": (1, 2)}, "gamma"),
                        ({"lr": 0.1, "milestones": (float("inf"),)}, "milestones"),
                        ({"lr": 0.1, "warmup_epochs": float("nan")}, "warmup_epochs")]:
        with pytest.raises(ValueError, match=rf"^{key}="):
            LRSchedule(**kwargs)


def test_pool_threads_use_one_intra_op_thread_and_cover_every_rank_once():
    world = ThreadWorld(P=7, threads=2)
    both = threading.Barrier(2, timeout=10)   # ranks 0 and 1 live on different pool threads, concurrently

    def work(r):
        if r < 2:
            both.wait()
        return r, torch.get_num_threads(), threading.current_thread().name

    try:
        seen = world.map(work)
    finally:
        world.close()
    assert [r for r, _, _ in seen] == list(range(7))
    assert all(nt == 1 for _, nt, _ in seen)
    assert len({name for _, _, name in seen}) == 2          # really two pool threads


def test_a_failing_rank_ends_the_phase_with_its_error():
    world = ThreadWorld(P=5, threads=2)

    def work(r):
        if r == 3:
            raise RuntimeError("rank 3 failed")
        return r

    try:
        with pytest.raises(RuntimeError, match="rank 3 failed"):
            world.map(work)
        assert world.map(lambda r: r) == list(range(5))      # the pool is still usable
    finally:
        world.close()


@pytest.mark.parametrize("compressor,cluster", [("gtopk", "32x1gbe"), ("dense", "16x10gbe"), ("topk", "8x1gbe")])
def test_logged_comm_model_and_bytes_are_the_cost_model(compressor, cluster, tmp_path):
    summary, params = train(tmp_path, f"compressor={compressor}", f"cluster={cluster}", "trainer.max_steps=1",
                            "trainer.batch_size=8")
    cfg = make_cfg(f"cluster={cluster}")
    net, P, d = build.network(cfg), cfg.cluster.world_size, summary["params"]
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    k = k_of(d, 0.004)                                   # epoch 0 density of the topk/gtopk warm-up
    expected = {"gtopk": (cost.gtopk_seconds(net, P, k), max(cost.gtopk_sent(r, P, k)[1] for r in range(P))),
                "dense": (cost.dense_seconds(net, P, d), max(cost.allreduce_sent(r, P, d)[1] for r in range(P))),
                "topk": (cost.sparse_allgather_seconds(net, [k] * P),
                         max(cost.allgatherv_sent(r, [8 * k] * P)[1] for r in range(P)))}[compressor]
    assert row["target/comm_s"] == pytest.approx(expected[0])
    assert row["comm/bytes_sent"] == expected[1]


def test_a_diverging_run_stops_and_says_so(tmp_path):
    summary, _ = train(tmp_path, "optimizer.lr=1e12", "compressor=dense", "trainer.max_steps=30")
    assert 1 <= summary["diverged_at_step"] == summary["steps"] < 30
    from ssgd.run.final_lines import final_lines

    assert "DIVERGED" in final_lines(summary)
