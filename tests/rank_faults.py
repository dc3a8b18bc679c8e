"""Fault injection for the tests of backend=mpi and backend=torch: the rank hook that tests/conftest.py names in
SSGD_RANK_HOOK (ssgd.run.worker.HOOK_ENV), so every rank the tests start loads it; a production rank runs
without it and ignores the `debug` settings.

`debug.fail_rank` fails when it starts step `debug.fail_step` (1-based): `debug.fail_mode=raise` raises a
RuntimeError, `kill` sends the rank SIGKILL. docs/faults.md lists what the user then sees.
"""
from __future__ import annotations

import os
import signal
from typing import Any


def attach(trainer: Any, world: Any, cfg: Any) -> None:
    """Wrap `trainer.step` of rank `cfg.debug.fail_rank` so that it fails at step `cfg.debug.fail_step`."""
    debug = cfg.debug
    if debug.fail_rank is None or debug.fail_rank != world.rank:
        return
    step = trainer.step

    def failing_step(it: int, density: float) -> dict:
        if trainer.step_count + 1 == debug.fail_step:
            if debug.fail_mode.value == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure at step {debug.fail_step} (debug.fail_rank={world.rank})")
        return step(it, density)

    trainer.step = failing_step
