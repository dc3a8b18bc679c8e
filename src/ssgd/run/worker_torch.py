"""One torch.distributed rank of `backend=torch`: `python -m ssgd.run.worker_torch <run dir>/worker_config.yaml`.

Started by `python src/train.py backend=torch` (ssgd.run.launch_torch), by `torchrun --nproc-per-node G -m
ssgd.run.worker_torch ...`, or by `srun python -m ssgd.run.worker_torch ...`. Reads who it is from its launcher's
environment (`ssgd.worlds.rendezvous.ranks`: RANK / WORLD_SIZE / LOCAL_RANK, or SLURM_PROCID / SLURM_NTASKS /
SLURM_LOCALID) and stops with one line and exit status 2 when a variable is missing. The rest is the
MPI worker's (`ssgd.run.worker_mpi.main`: read the resolved config, check the rank count, pick this rank's
device, train, report on rank 0) with a `TorchWorld`, which leaves the process group at the end.
"""
from __future__ import annotations

import os
import sys

USAGE = ("usage: torchrun --nproc-per-node G -m ssgd.run.worker_torch RUN_DIR/worker_config.yaml  "
         "(or srun -n P python -m ssgd.run.worker_torch ...; the file is written by `python src/train.py backend=torch "
         "dist.launch=false`)")


def main(argv: list[str]) -> int:
    from ssgd.errors import ConfigError
    from ssgd.worlds.rendezvous import ranks

    if len(argv) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        who = ranks(os.environ)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from ssgd.run import worker_mpi as worker
    from ssgd.worlds.torch_dist import TorchWorld

    world = TorchWorld(who)
    try:
        status = worker.main(argv, lambda: world)
    except BaseException:
        world.close()
        raise
    world.close(together=True)      # every rank returns here together (the run's end, or before the group)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
