"""`MPIWorld`: this process is one rank of an MPI job (`backend=mpi`); see `ssgd.world`.

Importing this module initialises MPI; only the worker entry point (`ssgd.worker`) does.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from mpi4py import MPI

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.mpi import run_mpi
from ssgd.comm.ops import RankLog
from ssgd.payload import Payload

T = TypeVar("T")


class MPIWorld:
    """One rank per process: `map` runs only this rank, collectives go through mpi4py."""

    def __init__(self, comm: MPI.Comm | None = None) -> None:
        torch.set_num_threads(1)   # as every virtual rank of the threads backend: same bits
        self.comm = comm or MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.local_ranks = [self.rank]
        self.buffers: dict = {}    # dense results are reused: valid until the next collective call

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

    def close(self) -> None:
        pass
