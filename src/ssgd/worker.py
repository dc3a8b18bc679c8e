"""One MPI rank of `backend=mpi`: `python -m mpi4py -m ssgd.worker <run dir>/worker_config.yaml`.

Reads the config the launcher composed and resolved (never composes its own), checks that the MPI
job has `cluster.world_size` ranks, trains, and on rank 0 writes the run outputs next to the config
file and logs the report (stdout and `<run dir>/train.log`, ssgd.utils.logs.setup_rank). Other ranks'
output lines are prefixed with `[rank r]`.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from omegaconf import OmegaConf

log = logging.getLogger(__name__)


class Prefixed:
    """A text stream that starts every line with a prefix (for non-root ranks' stdout/stderr)."""

    def __init__(self, stream: TextIO, prefix: str) -> None:
        self.stream, self.prefix, self.at_line_start = stream, prefix, True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            out.append((self.prefix if self.at_line_start else "") + piece)
            self.at_line_start = piece.endswith("\n")
        self.stream.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def inject_fault(trainer, rank: int, debug) -> None:
    """`debug.fail_rank` fails at step `debug.fail_step` by raising or by SIGKILL (tests only)."""
    import os
    import signal

    if debug.fail_rank is None or debug.fail_rank != rank:
        return
    step = trainer.step

    def failing_step(it: int, density: float) -> dict:
        if trainer.step_count + 1 == debug.fail_step:
            if debug.fail_mode.value == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure at step {debug.fail_step} (debug.fail_rank={rank})")
        return step(it, density)

    trainer.step = failing_step


def main(argv: list[str], make_world: Callable[[], Any] | None = None) -> int:
    """Run this rank; `make_world` builds its world (default: `MPIWorld`; `ssgd.torch_worker` passes a TorchWorld)."""
    from ssgd import build, config
    from ssgd.errors import ConfigError
    from ssgd.utils.logs import setup_rank

    if len(argv) != 1:
        print("usage: mpiexec -n P python -m mpi4py -m ssgd.worker RUN_DIR/worker_config.yaml", file=sys.stderr)
        return 2
    if make_world is None:
        from ssgd.mpi_world import MPIWorld as make_world
    world = make_world()
    if world.rank != 0:
        sys.stdout, sys.stderr = Prefixed(sys.stdout, f"[rank {world.rank}] "), Prefixed(sys.stderr, f"[rank {world.rank}] ")
    path = Path(argv[0])
    setup_rank(path.parent, world.is_root)
    try:
        if not path.is_file():
            raise ConfigError(f"{path}: no such worker config (written by `python src/train.py backend=mpi`)")
        cfg = config.load(OmegaConf.load(path))
        if cfg.cluster.world_size != world.size:
            raise ConfigError(f"cluster.world_size={cfg.cluster.world_size} but this {world.job} has {world.size} ranks; "
                              f"start it with {world.start_hint(cfg.cluster.world_size)} or set cluster.world_size={world.size}")
        cfg = world.prepare(cfg)        # this rank's device (one GPU per rank); torch.distributed: join the group
        trainer, writer, _ = build.trainer(cfg, path.parent, world)
    except ConfigError as err:
        if world.is_root:                     # every rank sees the same config error: say it once
            log.error(f"error: {err}")
        return 2
    inject_fault(trainer, world.rank, cfg.debug)
    try:
        summary = trainer.fit()
    except Exception as err:
        log.error(f"error: rank {world.rank} failed: {type(err).__name__}: {err}")
        raise                                 # `python -m mpi4py` then aborts the whole job
    finally:
        writer.close()
    if world.is_root:
        from ssgd.report import report

        log.info(report(summary))
        log.info(f"  outputs: {path.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
