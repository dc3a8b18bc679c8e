"""Several trainings in one MPI job: `mpiexec -n P python -m mpi4py tests/mpi/train_runs.py CONFIG.yaml ...`.

Each argument is a worker config (`ssgd.run.launch_mpi.prepare` wrote it, as `python src/train.py backend=mpi` does);
every rank builds the run of each config in turn through the MPI backend's own pieces (`MPIWorld`,
`MPIWorld.prepare`, `build.trainer`), trains it and writes the run directory beside the config. One job
pays MPI start-up and the ranks' torch import once for all the runs a test module compares; the launcher
and the worker entry point themselves are tested through `src/train.py` (tests/integration/test_mpi.py).
An exception on a rank ends the job non-zero (`python -m mpi4py` aborts the other ranks).
"""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from ssgd.run import build
from ssgd import config
from ssgd.worlds.mpi import MPIWorld


def main(paths: list[str]) -> int:
    world = MPIWorld()
    for path in map(Path, paths):
        cfg = world.prepare(config.load(OmegaConf.load(path)))
        trainer, writer, _ = build.trainer(cfg, path.parent, world)
        try:
            trainer.fit()
        finally:
            writer.close()
        if world.is_root:
            print(f"trained {path.parent}: {trainer.step_count} steps", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
