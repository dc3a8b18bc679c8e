"""The package's side of the gTop-k comparison, in one place: the benchmark and its test call only this.

(The package's collective and payload interfaces are being reworked; when they change, this file is
the only one in bench/ to adapt.)
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch


def select(u: torch.Tensor, k: int) -> Any:
    """This rank's gTop-k payload: the exact top-k of u (what compressor=gtopk sends)."""
    from ssgd.compress.sparse import select_topk

    return select_topk(u, k)


def payload_arrays(payload: Any) -> tuple[np.ndarray, np.ndarray]:
    """(int64 indices, float32 values) of a payload, for the released baseline's input."""
    return payload.idx.numpy().astype(np.int64), payload.val.numpy().astype(np.float32)


def gtopk() -> Any:
    from ssgd.comm.collectives.gtopk import GTopKAllreduce

    return GTopKAllreduce()


def run(collective: Any, payload: Any, comm: Any, pool: dict | None = None) -> tuple[Any, Any]:
    """One call of `collective` on this MPI rank: (result, per-rank log with byte/message counts). `pool`: the
    result buffers kept between calls, as the trainer keeps them (`ssgd.comm.executors.staging.pooled`)."""
    from ssgd.comm.executors.mpi import run_mpi

    return run_mpi(collective, payload, comm, pool)


class TimedComm:
    """An MPI communicator that adds the seconds its calls take (the MPI library's own time) to `inside`."""

    CALLS = ("Send", "Recv", "Allreduce", "Allgather", "Allgatherv", "Bcast")

    def __init__(self, comm: Any) -> None:
        self.comm, self.inside = comm, 0.0

    def __getattr__(self, name: str) -> Any:
        import time

        call = getattr(self.comm, name)
        if name not in self.CALLS:
            return call

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.inside += time.perf_counter() - start
        return timed


def run_timed(collective: Any, payload: Any, comm: Any, pool: dict | None = None) -> tuple[Any, Any, list[float]]:
    """`run`, and the seconds this rank computed before each of its program's operations and after the last: all
    its time outside the MPI library's calls (the program's own work and the executor's around each call), for
    `ssgd.comm.executors.thread.run_threads(compute=...)`."""
    import time

    from ssgd.comm.driver import run_program
    from ssgd.comm.executors.mpi import execute
    from ssgd.comm.ops import RankLog

    log, gaps, timed_comm = RankLog(), [], TimedComm(comm)
    since = [time.perf_counter()]

    def timed(op: Any) -> Any:
        start, before = time.perf_counter(), timed_comm.inside
        out = execute(op, timed_comm, log, pool)
        end = time.perf_counter()
        gaps.append(start - since[0] + (end - start) - (timed_comm.inside - before))
        since[0] = end
        return out

    reduced = run_program(collective, comm.Get_rank(), comm.Get_size(), payload, timed)
    gaps.append(time.perf_counter() - since[0])
    return reduced, log, gaps


def global_set(reduced: Any) -> tuple[np.ndarray, np.ndarray]:
    """(int64 indices, float32 summed values) of a sparse result (the global top-k, not yet / P)."""
    return reduced.total.idx.numpy().astype(np.int64), reduced.total.val.numpy()


def sent_indices(payload: Any, reduced: Any) -> np.ndarray:
    """int64 indices of this rank's payload entries that count as sent (error feedback keeps the rest)."""
    return reduced.sent(payload).indices().numpy().astype(np.int64)


def make_params(d: int, parts: int = 8) -> Any:
    """`parts` parameters of d elements in all, as a model's (untouched memory: no page is written),
    with the trainer's persistent gradient buffer (`ssgd.loop.decode.ParamGrads`): pass it to `decode`."""
    from ssgd.loop.decode import ParamGrads

    sizes = [d // parts + (1 if i < d % parts else 0) for i in range(parts)]
    return ParamGrads([torch.nn.Parameter(torch.empty(n)) for n in sizes if n])


def decode(reduced: Any, params: Any) -> torch.Tensor:
    """What the trainer does with the result (`Trainer.step`: `self.grads.set(results[0])`): the
    averaged gradient decoded into the persistent buffer (a sparse result clears the previous
    result's positions and writes its own), each parameter's .grad a view of it."""
    return params.set(reduced)
