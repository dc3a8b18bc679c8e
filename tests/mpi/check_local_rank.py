"""The local rank of an MPI rank, for one GPU per rank: `mpiexec -n P python -m mpi4py tests/mpi/check_local_rank.py [GPUS]`.

Rank 0 prints one line per rank: `rank r: env <local rank from OMPI_COMM_WORLD_LOCAL_RANK or MPICH> split <rank
among the ranks sharing this host's memory, MPI.COMM_TYPE_SHARED> device <MPIWorld.prepare's device>`. The device is
asked for `cuda` as if this host had GPUS GPUs (default: the real count), so the mapping is checked without a GPU too.
"""
from __future__ import annotations

import os
import sys

import torch
from omegaconf import OmegaConf

from ssgd.worlds.mpi import MPIWorld
from ssgd.worlds.rendezvous import MPI_LOCAL, local_rank, rank_device

world = MPIWorld()
gpus = int(sys.argv[1]) if len(sys.argv) > 1 else torch.cuda.device_count()
env = local_rank(os.environ, MPI_LOCAL)
split = world.shared_memory_rank()
if len(sys.argv) > 1:                      # a pretended GPU count: the pure mapping on the split's local rank
    device = rank_device("cuda", split, gpus, None)
else:                                      # the real thing: what a worker does with device=cuda
    device = world.prepare(OmegaConf.create({"device": "cuda"})).device
rows = world.allgather([(world.rank, env.rank if env else None, split.rank, split.size, device)])
if world.is_root:
    for r, env_rank, split_rank, split_size, dev in rows:
        print(f"rank {r}: env {env_rank} split {split_rank}/{split_size} device {dev}")
