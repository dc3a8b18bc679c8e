"""A rank that arrives late at every collective (tests/integration/test_comm_wait.py): trainer steps on real
torch.distributed ranks where rank `slow` sleeps `delay_s` after its forward + backward, before the collective."""
from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import make_cfg


def late_rank_summary(rank: int, P: int, slow: int, delay_s: float, run_dir: str) -> dict:
    """STEPS steps of the trainer in this rank of an initialised gloo group; returns rank 0's summary (all ranks
    write nothing else)."""
    from ssgd.run import build
    from ssgd.worlds.torch_dist import TorchWorld

    cfg = make_cfg("backend=torch", "compressor=gtopk", "compressor.density=0.01", "compressor.density_warmup=[]",
                   f"cluster.world_size={P}", "trainer.max_steps=6", "trainer.log_every=1", "trainer.eval_every=1000",
                   "seed=3")
    trainer, writer, _ = build.trainer(cfg, Path(run_dir), TorchWorld.joined())
    if rank == slow:
        replica = trainer.replicas[rank]
        inner = replica.step

        def late(*args, **kwargs):
            out = inner(*args, **kwargs)
            time.sleep(delay_s)                  # inside the compute phase, before this rank enters the collective
            return out

        replica.step = late
    try:
        trainer.fit()
    finally:
        writer.close()
    if rank != 0:
        return {}
    records = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return {"summary": json.loads((Path(run_dir) / "summary.json").read_text()),
            "steps": [r for r in records if "time/comm_s" in r]}
