"""Execute this process's rank of a collective program on torch.distributed (backend=torch, the DDP hook).

The same `Collective.program` as the in-process executor (`ssgd.comm.executors.thread`) and MPI
(`ssgd.comm.executors.mpi`), stepped by the same `ssgd.comm.driver.run_program`; only how each operation is
carried out differs:

  * `Send` / `Recv`: the process group's own `send` / `recv` (what `dist.send` / `dist.recv` call, without
    their Python argument handling and logging wrappers), with the op's tag (NCCL has no tags: there,
    messages between two ranks match in the order they are posted, which is all the programs here rely on).
  * `Allgatherv`: a size exchange (`all_gather_single` of one int64 per rank), then one
    `all_gather_single` of the blocks padded to the largest size, because NCCL has no allgatherv.
    Bytes are counted as the allgatherv the cost model describes; the padding actually moved is
    (max size - own size) per rank: zero for the fixed-size schemes (Top-k, Random-k, DGC sampling),
    not for Gaussian-k's variable counts.
  * `Bcast`: on gloo, the binomial tree from rank 0 that the cost model counts (`ssgd.perf.cost.bcast_children`),
    as tagged sends and receives on the calling thread. gloo's own broadcast runs on a worker thread of the
    process group, and waking it and then the caller again cost the DDP hook about 0.5 ms of a 9 ms step at
    P = 2 on two shared cores (docs/benchmarks.md). On NCCL, the group's `broadcast` from rank 0.
  * `Allreduce`: `dist.all_reduce(SUM)`. torch.distributed documents no summation order, and gloo's
    and NCCL's algorithms do not add in rank order, so dense results equal the rank-order sum of the
    threads backend only to rounding (tests/integration/test_torch_dist.py states the bound). Sparse
    schemes are bitwise equal to the other executors: their sums are computed by the program itself.

Which device a library reads: gloo takes host tensors, NCCL takes the GPU of this rank. A tensor
elsewhere (a CUDA payload on gloo, a host tensor on NCCL) is staged by `ssgd.comm.executors.staging` and the
copy time logged as `RankLog.staging_s`. Each kind has its method in `TorchExecutor.handlers`, looked up
by the op's type; bytes and messages are counted with each op kind's `sent` (`ssgd.comm.ops`), as in the
other executors.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
# before any process group exists, so that its `group=group.WORLD` defaults do not keep the group alive into
# interpreter shutdown (a gloo thread then aborts the rank): see ssgd.worlds.torch_dist.TorchWorld.close
import torch.distributed.nn.functional  # noqa: F401

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.driver import run_program
from ssgd.comm.ops import Allgatherv, Allreduce, Bcast, Op, RankLog, Recv, Send
from ssgd.comm.executors.staging import empty_on, from_comm, pooled, to_comm
from ssgd.payload import Payload
from ssgd.perf import cost

TAG_BCAST = 1 << 20     # the tree broadcast's messages: above every collective program's tags


def all_gather_single(output: torch.Tensor, input: torch.Tensor, group: dist.ProcessGroup | None = None) -> None:
    """Every rank's `input` (equal sizes), concatenated in rank order into `output`.

    `torch.distributed.all_gather_single` where torch has it (2.14 does, and warns that `all_gather_into_tensor` is
    deprecated), else `all_gather_into_tensor` (2.11 has only that; pyproject.toml allows torch from 2.4)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(output, input, group=group)


def comm_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """The device `group`'s backend reads: this rank's current GPU for NCCL, the host otherwise."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class TorchExecutor:
    """Carries out operations for this rank of `group` (default: the default process group); each kind by its
    method in `self.handlers`, looked up by the op's type."""

    def __init__(self, group: dist.ProcessGroup | None = None, pool: dict | None = None) -> None:
        self.group = group
        self.rank, self.P = dist.get_rank(group), dist.get_world_size(group)
        self.device = comm_device(group)
        self.tags = dist.get_backend(group) != "nccl"
        self.pool = pool
        self.handlers: dict[type, Callable[[Any, RankLog], Any]] = {
            Send: self._send, Recv: self._recv, Allreduce: self._allreduce, Allgatherv: self._allgatherv,
            Bcast: self._bcast}

    @property
    def pg(self) -> dist.ProcessGroup:
        """`group`, or the default group looked up at each use: an executor must not keep the default group
        alive past `destroy_process_group` (its gloo threads would outlive it: tests/unit/test_torch_world_close.py)."""
        return self.group if self.group is not None else dist.group.WORLD

    def __call__(self, op: Op, log: RankLog) -> Any:
        """Carry out `op` for this rank; returns what the program receives back. TypeError for an unknown kind."""
        handler = self.handlers.get(type(op))
        if handler is None:
            raise TypeError(f"torch.distributed executor: unknown operation {op!r}")
        return handler(op, log)

    def _send(self, op: Send, log: RankLog) -> None:
        self.pg.send([to_comm(op.buf, self.device, log)], op.dest, op.tag if self.tags else 0).wait()
        log.stats.add(op.sent())

    def _recv(self, op: Recv, log: RankLog) -> None:
        device = self.device
        buf = op.buf if op.buf.device == device and op.buf.is_contiguous() else empty_on(op.buf, device)
        self.pg.recv([buf], op.source, op.tag if self.tags else 0).wait()
        if buf is not op.buf:
            op.buf.copy_(from_comm(buf, op.buf, log))

    def _allreduce(self, op: Allreduce, log: RankLog) -> torch.Tensor:
        if op.buf.device == self.device:     # all_reduce works in place: the program's buffer stays intact
            out = pooled(op.buf, self.pool)
            out.copy_(op.buf)
        else:
            out = to_comm(op.buf, self.device, log)  # already a copy
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=self.group)
        log.stats.add(op.sent(self.rank, self.P))
        return from_comm(out, op.buf, log)

    def _allgatherv(self, op: Allgatherv, log: RankLog) -> list[torch.Tensor]:
        device, P = self.device, self.P
        send = to_comm(op.buf, device, log).reshape(-1)
        sizes_t = torch.empty(P, dtype=torch.int64, device=device)
        all_gather_single(sizes_t, torch.tensor([send.numel()], dtype=torch.int64, device=device), group=self.group)
        sizes = sizes_t.tolist()
        log.stats.add(op.sent(self.rank, P, [n * send.element_size() for n in sizes]))
        width = max(sizes)
        if width == 0:                       # every block empty (all ranks see the same sizes)
            return [op.buf.new_empty(0) for _ in range(P)]
        padded = send if send.numel() == width else torch.cat([send, send.new_zeros(width - send.numel())])
        recv = torch.empty(P * width, dtype=send.dtype, device=device)
        all_gather_single(recv, padded, group=self.group)
        recv = from_comm(recv, op.buf, log)
        return [recv[r * width:r * width + n] for r, n in enumerate(sizes)]

    def _bcast(self, op: Bcast, log: RankLog) -> torch.Tensor:
        buf = to_comm(op.buf, self.device, log) if self.rank == 0 else empty_on(op.buf, self.device)
        if self.tags:
            self._tree_bcast(buf)
        else:
            opts = dist.BroadcastOptions()
            opts.rootRank = 0
            self.pg.broadcast([buf], opts).wait()
        log.stats.add(op.sent(self.rank, self.P))
        return from_comm(buf, op.buf, log)

    def _tree_bcast(self, buf: torch.Tensor) -> None:
        """The binomial broadcast from rank 0 that `ssgd.perf.cost.bcast_children` describes, as tagged sends and
        receives on this thread: rank r > 0 receives from r less its highest set bit, then forwards."""
        if self.rank:
            self.pg.recv([buf], self.rank - (1 << (self.rank.bit_length() - 1)), TAG_BCAST).wait()
        for child in cost.bcast_children(self.rank, self.P):
            self.pg.send([buf], child, TAG_BCAST).wait()


def run_torch(collective: Collective, payload: Payload, group: dist.ProcessGroup | None = None,
              pool: dict | None = None, executor: TorchExecutor | None = None) -> tuple[Reduced, RankLog]:
    """Run this rank's program of `collective` to completion on `group` (`pool`: see
    `ssgd.comm.executors.staging.pooled`; pass a long-lived `executor` to skip looking the group up per call)."""
    execute = executor or TorchExecutor(group, pool)
    log = RankLog()
    reduced = run_program(collective, execute.rank, execute.P, payload, lambda op: execute(op, log))
    return reduced, log
