"""`MPIWorld`: this process is one rank of an MPI job (`backend=mpi`); see `ssgd.worlds.base`.

Importing this module initialises MPI; only a rank of backend=mpi (`ssgd.run.worker mpi ...`) and MPI tests do.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from mpi4py import MPI
from omegaconf import DictConfig

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.executors.mpi import run_mpi
from ssgd.comm.ops import RankLog
from ssgd.payload import Payload
from ssgd.worlds.rendezvous import MPI_LOCAL, LocalRank, local_rank, rank_device

T = TypeVar("T")


class MPIWorld:
    """One rank per process: `map` runs only this rank, collectives go through mpi4py."""

    job = "MPI job"
    backend = "mpi"

    def __init__(self, comm: MPI.Comm | None = None) -> None:
        torch.set_num_threads(1)   # as every virtual rank of the threads backend: same bits
        self.comm = comm or MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.local_ranks = [self.rank]
        self.buffers: dict = {}    # dense results are reused: valid until the next collective call

    def start_hint(self, n: int) -> str:
        return f"mpiexec -n {n}"

    def prepare(self, cfg: DictConfig) -> DictConfig:
        """Set this rank's device in `cfg` (one GPU per rank: `cuda` -> `cuda:<local rank>`); returns `cfg`.
        The local rank comes from Open MPI's or MPICH's environment, else from a shared-memory split of
        the communicator (collective: every rank calls `prepare`). ConfigError when a host has fewer GPUs
        than ranks."""
        if str(cfg.device) == "cuda":
            local = local_rank(os.environ, MPI_LOCAL) or self.shared_memory_rank()
            cfg.device = rank_device("cuda", local, torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))
        return cfg

    def shared_memory_rank(self) -> LocalRank:
        """This rank's place among the ranks that share its host's memory (MPI.COMM_TYPE_SHARED)."""
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            return LocalRank(node.Get_rank(), node.Get_size(), "MPI.COMM_TYPE_SHARED")
        finally:
            node.Free()

    def map(self, fn: Callable[[int], T]) -> list[T]:
        return [fn(self.rank)]

    def collective(self, collective: Collective,
                   payloads: Sequence[Payload]) -> tuple[list[Reduced], list[RankLog]]:
        reduced, log = run_mpi(collective, payloads[0], self.comm, self.buffers)
        return [reduced], [log]

    def replicate(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        return [model]

    def allgather(self, items: list[T]) -> list[T]:
        """This rank's value -> the values of all P ranks, in rank order, on every rank."""
        return self.comm.allgather(items[0])

    def gather_root(self, items: dict[int, T]) -> dict[int, T]:
        """{rank: item} of every rank on rank 0 ({} elsewhere)."""
        parts = self.comm.gather(items, root=0)
        return {r: v for part in parts for r, v in part.items()} if parts is not None else {}

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def close(self, together: bool = False) -> None:
        """Nothing to leave: a rank of backend=mpi finalises MPI as it exits (ssgd.run.worker.leave), any
        other process at the interpreter's exit (mpi4py's own hook); `together` as TorchWorld.close."""

    in_group = True    # MPI is initialised when the world exists (torch.distributed joins in `prepare`)

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, status: int) -> None:
        """End the whole job now with `status` (MPI_Abort)."""
        self.comm.Abort(status)
