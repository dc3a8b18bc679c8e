"""backend=thread against a one-process-per-rank backend (mpi, torch): the same run must end the same.

`EQUIV` is the run (5 steps of 3 x 256 digits, dropout on, capture on: it must work, and agree, on both
backends); `assert_same_runs(thread_dir, other_dir, compressor)` compares their run directories: sparse schemes
and dense16 (its 16-bit ring sums in the program) end with bitwise equal weights and every rank's residual;
dense within 1e-5 after 5 steps, because the other
backend's all-reduce adds in an order of its own (MPI_Allreduce and torch.distributed fix none); the captured
statistics of rank 0's u agree to 1e-5 (their mean of u goes through that all-reduce) and u at step 3 to 1e-6.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from omegaconf import OmegaConf

from conftest import CONF

EQUIV = ["cluster.world_size=3", "trainer.batch_size=256", "trainer.epochs=1", "trainer.checkpoint_every=1",
         "model.dropout=0.2", "seed=5", "capture.stats=true", "capture.u_steps=[3]"]
RANKS = 3


def assert_same_runs(thread_dir: Path, other_dir: Path, compressor: str) -> None:
    a, b = (torch.load(d / "checkpoint.pt", weights_only=False) for d in (thread_dir, other_dir))
    assert a["shared"]["step"] == b["shared"]["step"] == 5
    node = OmegaConf.load(CONF / "compressor" / f"{compressor}.yaml")
    wire = OmegaConf.select(node, "wire.values", default="fp32")
    # a 16-bit dense allreduce (dense16) is a ring the program computes itself: bitwise, like the sparse ones
    if node.collective._target_ == "ssgd.comm.collectives.dense.DenseAllreduce" and wire == "fp32":
        for x, y in zip(a["shared"]["params"], b["shared"]["params"]):
            assert torch.allclose(x, y, rtol=0, atol=1e-5), (x - y).abs().max()
    else:
        assert all(torch.equal(x, y) for x, y in zip(a["shared"]["params"], b["shared"]["params"]))
        for r in range(RANKS):      # every rank's residual too
            memory_a, memory_b = a["ranks"][r]["memory"], b["ranks"][r]["memory"]
            assert memory_a.keys() == memory_b.keys()
            assert all(torch.equal(memory_a[key], memory_b[key]) for key in memory_a)
    stats = [[json.loads(line) for line in (d / "capture" / "stats.jsonl").read_text().splitlines()]
             for d in (thread_dir, other_dir)]
    assert [r["step"] for r in stats[1]] == [1, 2, 3, 4, 5]
    for x, y in zip(*stats):     # rank 0's u: equal; x = mean of u: the other backend's sum order
        assert x.keys() == y.keys() and all(math.isclose(x[k], y[k], rel_tol=1e-5, abs_tol=1e-12) for k in x)
    u = [torch.load(d / "capture" / "u_step000003.pt", weights_only=False)["u"] for d in (thread_dir, other_dir)]
    assert torch.allclose(u[0], u[1], rtol=0, atol=1e-6)
