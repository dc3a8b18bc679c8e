"""How the P ranks of a run are executed; `ThreadWorld` runs all of them in this process.

A world gives the trainer everything that depends on the backend, so the trainer has no backend
branches (the `World` protocol): which ranks this process computes (`local_ranks`: all P here, one
per process under MPI), running per-rank work (`map`), running a collective over the local ranks'
payloads (`collective`), per-rank model replicas (`replicate`), exchanging small per-rank values
(`allgather` to every process, `gather_root` to the one that writes outputs), and `close`.
`ssgd.worlds.mpi.MPIWorld` and `ssgd.worlds.torch_dist.TorchWorld` are the one-rank-per-process worlds.

`ThreadWorld` runs a step in phases: the compute phase runs on a pool of K OS threads
(K = usable cores, capped at P), each running its share of the virtual ranks one after another
with one intra-op thread (`torch.set_num_threads(1)`), so results do not depend on K; the
collective phase runs in the calling thread, all ranks in lock step (`ssgd.comm.executors.thread`);
docs/collectives.md describes the executors.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

import torch

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.ops import RankLog
from ssgd.comm.executors.thread import run_threads
from ssgd.payload import Payload
from ssgd.perf.platform import Platform

T = TypeVar("T")


class World(Protocol):
    """What the trainer needs from a backend (see the module docstring)."""

    size: int
    local_ranks: list[int]

    def map(self, fn: Callable[[int], T]) -> list[T]: ...

    def collective(self, collective: Collective,
                   payloads: Sequence[Payload]) -> tuple[list[Reduced], list[RankLog]]: ...

    def replicate(self, model: torch.nn.Module) -> list[torch.nn.Module]: ...

    def allgather(self, items: list[T]) -> list[T]: ...

    def gather_root(self, items: dict[int, T]) -> dict[int, T]: ...

    @property
    def is_root(self) -> bool: ...

    def close(self) -> None: ...


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class ThreadWorld:
    """P virtual ranks in this process, computed on K pool threads."""

    def __init__(self, P: int, threads: int | None = None, platform: Platform | None = None) -> None:
        """`platform`: run every collective on SimGrid's simulation of it (`ssgd.comm.executors.simgrid`), with the
        same results; each rank's `RankLog.clock` then holds its simulated seconds in the call. None: lock step."""
        torch.set_num_threads(1)   # before any worker exists: the setting is per OS thread
        self.size, self.platform = P, platform
        self.local_ranks = list(range(P))
        self.K = max(1, min(threads or usable_cores(), P))
        self.pool = ThreadPoolExecutor(self.K, thread_name_prefix="rank", initializer=torch.set_num_threads,
                                       initargs=(1,))

    def map(self, fn: Callable[[int], T]) -> list[T]:
        if self.K == 1:
            return [fn(r) for r in self.local_ranks]

        def share(k: int) -> list[T]:
            return [fn(r) for r in range(k, self.size, self.K)]

        parts = [f.result() for f in [self.pool.submit(share, k) for k in range(self.K)]]
        out: list[T] = [None] * self.size  # type: ignore[list-item]
        for k, part in enumerate(parts):
            out[k::self.K] = part
        return out

    def collective(self, collective: Collective,
                   payloads: Sequence[Payload]) -> tuple[list[Reduced], list[RankLog]]:
        """Results and logs of the local ranks, in rank order (here: all P)."""
        if self.platform is not None:
            from ssgd.comm.executors.simgrid import run_simgrid      # SimGrid's bindings load only when asked for
            # the network alone: this host's CPU time in the merges would put its load on the target clock
            return run_simgrid(collective, payloads, self.platform, cpu="none")
        return run_threads(collective, payloads)

    def replicate(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """One module per local rank, sharing Parameters (see `share_parameters`)."""
        return share_parameters(model, self.size)

    def allgather(self, items: list[T]) -> list[T]:
        """Per-local-rank values -> values of all P ranks, in rank order, in every process (here:
        already all)."""
        return items

    def gather_root(self, items: dict[int, T]) -> dict[int, T]:
        """{rank: item} of every rank, in the process that writes outputs."""
        return items

    @property
    def is_root(self) -> bool:
        """Whether this process writes run outputs (rank 0's process)."""
        return True

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def share_parameters(model: torch.nn.Module, n: int) -> list[torch.nn.Module]:
    """n modules that share `model`'s Parameters but each own their buffers (batch-norm stats).

    Valid for synchronous SGD, where every worker applies the same update to identical weights.
    Element 0 is `model` itself.
    """
    import copy

    out = [model]
    names = [name for name, _ in model.named_parameters()]
    for _ in range(n - 1):
        replica = copy.deepcopy(model)
        for name in names:
            owner, _, attr = name.rpartition(".")
            setattr(replica.get_submodule(owner) if owner else replica, attr, model.get_parameter(name))
        out.append(replica)
    return out
