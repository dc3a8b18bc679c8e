"""Execute a collective's P rank programs as SimGrid actors: rank r on simulated host r of a `Platform`.

The fourth executor (docs/simgrid.md). Every rank's program runs unchanged, with the real payloads:
  * `Send` / `Recv`: a copy of the real tensor travels through a mailbox named by (source, destination, tag), with
    the buffer's bytes as the message size; the receiver copies it into its `Recv` buffer;
  * `Allreduce`, `Allgatherv`, `Bcast`: each rank sends the point-to-point messages of the algorithm the
    ops' byte counts describe (`ssgd.perf.cost`): a ring reduce-scatter then ring allgather of
    `torch.tensor_split` chunks, a ring allgatherv, a binomial broadcast from rank 0. These messages carry
    their sizes only; the result comes from a slot every rank filled, computed as the thread executor does
    (`RESULTS`: the rank-order sum), so results are bitwise those of `run_threads`.
SimGrid times every message on the platform (bandwidth sharing, latency, TCP model). Each rank's CPU time in
its own program between two ops (merges, encodings, selections inside the collective) is measured on this
machine with `time.thread_time` while torch uses one thread, and charged to that rank's host
(`cpu="measured"`): every simulated host has a core of its own. The executor's own work (the slot results,
mailbox handling) is not charged. `cpu="none"` charges nothing (network time alone).

Returns, like `run_threads`, per-rank results and `RankLog`s: the messages and bytes each rank's actor
really put in mailboxes, and its clock, the simulated seconds from the call's start to its program's end.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.driver import advance
from ssgd.comm.executors.simgrid_engine import Session, session
from ssgd.comm.executors.thread import RESULTS, CollectiveDeadlock, describe
from ssgd.comm.ops import Allgatherv, Allreduce, Bcast, Op, RankLog, Recv, Send, nbytes
from ssgd.payload import Payload
from ssgd.perf.cost import bcast_children, ring_chunks
from ssgd.perf.platform import Platform

Cpu = Literal["measured", "none"]


class SimRank:
    """One rank's view of one collective call: its mailboxes, its log, the call's shared result slots.

    Every rank of one call shares `call` (a number from `Session.next_call`, naming the call's mailboxes) and
    `slots` (a dict, empty when the call starts). `run_rank` drives one rank inside a SimGrid actor; a
    simulation that composes calls (a replay of whole iterations) creates one SimRank per rank and call."""

    def __init__(self, s: Session, call: int, rank: int, P: int, slots: dict[int, list[Any]]) -> None:
        self.sg, self.call, self.r, self.P, self.slots = s.sg, call, rank, P, slots
        self.log = RankLog()
        self.pending: Op | None = None  # the op this rank is carrying out (None: its program has returned)
        self.collectives = 0          # numbered apart from Send/Recv: ranks differ in how many they run

    def box(self, name: str) -> Any:
        return self.sg.Mailbox.by_name(f"{self.call}:{name}")

    def put(self, name: str, obj: Any, size: int) -> None:
        self.box(name).put(obj, int(size))
        self.log.stats.add((1, int(size)))

    def ring(self, tag: str, size: Callable[[int], int], first: int) -> None:
        """P-1 ring steps: at step s this rank sends block b = (first - s) % P, of `size(b)` bytes, to the next
        rank and receives one. `size(b)` is read when the block is sent: by then its owner has posted."""
        P, r = self.P, self.r
        for s in range(P - 1):
            nbytes_ = int(size((first - s) % P))
            comm = self.box(f"{tag}>{(r + 1) % P}").put_async(None, nbytes_)
            self.log.stats.add((1, nbytes_))
            self.box(f"{tag}>{r}").get()
            comm.wait()

    def execute(self, op: Op) -> Any:
        """Carry out `op` for this rank; what its program receives back."""
        if isinstance(op, Send):
            # a copy: the sender may run on and reuse its buffer before the receiver's actor copies it out
            self.put(f"p{self.r}>{op.dest}:{op.tag}", op.buf.clone(), nbytes(op.buf))
            return None
        if isinstance(op, Recv):
            got = self.box(f"p{op.source}>{self.r}:{op.tag}").get()
            if got.shape != op.buf.shape or got.dtype != op.buf.dtype:
                raise CollectiveDeadlock(f"rank {op.source} sends {tuple(got.shape)} {got.dtype} but rank {self.r} "
                                         f"receives {tuple(op.buf.shape)} {op.buf.dtype}")
            op.buf.copy_(got)
            return None
        return self.collective(op)

    def collective(self, op: Op) -> Any:
        if type(op) not in RESULTS:
            raise TypeError(f"the SimGrid executor has no handler for {type(op).__name__}")
        n, self.collectives = self.collectives, self.collectives + 1
        slot = self.slots.setdefault(n, [None] * self.P)
        slot[self.r] = op
        tag = f"c{n}"
        if isinstance(op, Allreduce):
            chunks = [op.buf.element_size() * c for c in ring_chunks(op.buf.numel(), self.P)]
            self.ring(tag + "rs", chunks.__getitem__, self.r)
            self.ring(tag + "ag", chunks.__getitem__, self.r + 1)
        elif isinstance(op, Allgatherv):
            self.ring(tag, lambda b: nbytes(slot[b].buf), self.r)
        elif isinstance(op, Bcast):
            self.bcast(tag, nbytes(op.buf))
        return self.result(n, slot, op)

    def bcast(self, tag: str, size: int) -> None:
        """Binomial tree from rank 0 (MPICH's and Open MPI's binomial broadcast): receive from the parent, then
        send to each child in turn, each send blocking, the largest subtree first (in this tree, rank r's subtree
        holds r + 2^j for the lower j, so the nearest child's is the largest): ceil(log2 P) rounds."""
        if self.r:
            self.box(f"{tag}>{self.r}").get()
        for child in bcast_children(self.r, self.P):
            self.put(f"{tag}>{child}", None, size)

    def result(self, n: int, slot: list[Any], op: Op) -> Any:
        """The call's result, computed once from every rank's op (all have posted: the messages saw to it)."""
        done = self.slots.setdefault(("result", n), [])  # type: ignore[arg-type]
        if not done:
            if any(type(o) is not type(op) for o in slot):
                kinds = ", ".join(f"rank {r}: {type(o).__name__}" for r, o in enumerate(slot))
                raise CollectiveDeadlock(f"ranks posted different collectives ({kinds})")
            done.append(RESULTS[type(op)](slot))
        return done[0]


def run_rank(rank: SimRank, collective: Collective, payload: Payload, cpu: Cpu, out: dict[str, Any]) -> None:
    """Inside a SimGrid actor: rank `rank.r`'s program to its end, charging its CPU time (module docstring).
    Its result goes to out["results"][rank.r], an error to out["errors"] (never raised: an exception leaving
    an actor aborts the process); `rank.log.clock` is its simulated seconds from the call's start."""
    try:
        torch.set_num_threads(1)
        start, sleep = rank.sg.Engine.clock, rank.sg.this_actor.sleep_for
        program = collective.program(rank.r, rank.P, payload)
        value: Any = None
        while True:
            t0 = time.thread_time()
            op, done = advance(program, value)
            if cpu == "measured":
                sleep(time.thread_time() - t0)
            if op is None:
                break
            rank.pending = op
            value = rank.execute(op)
        rank.log.clock = rank.sg.Engine.clock - start
        rank.pending, out["results"][rank.r] = None, done
    except Exception as err:          # an exception escaping an actor aborts the whole process
        out["errors"].append((rank.r, err))


def run_simgrid(collective: Collective, payloads: Sequence[Payload], platform: Platform,
                cpu: Cpu = "measured") -> tuple[list[Reduced], list[RankLog]]:
    """Run `collective` on P = len(payloads) ranks, rank r on host r of `platform`; per-rank results and logs
    (module docstring). ValueError when P exceeds the platform's hosts or `cpu` is unknown; a rank's error is
    raised here (the first, by rank); `CollectiveDeadlock` when some rank never finished."""
    P = len(payloads)
    if not 1 <= P <= platform.hosts:
        raise ValueError(f"run_simgrid: {P} ranks on a platform of {platform.hosts} hosts")
    if cpu not in ("measured", "none"):
        raise ValueError(f"run_simgrid: cpu={cpu!r}: allowed: measured, none")
    s = session(platform)
    call, slots = s.next_call(), {}
    ranks = [SimRank(s, call, r, P, slots) for r in range(P)]
    out: dict[str, Any] = {"results": [None] * P, "errors": []}
    for r in range(P):
        s.sg.Actor.create(f"c{call}r{r}", s.hosts[r], run_rank, ranks[r], collective, payloads[r], cpu, out)
    s.engine.run()
    raised = [(r, err) for r, err in sorted(out["errors"], key=lambda e: e[0]) if not isinstance(err, s.sg.ActorKilled)]
    if raised:
        raise raised[0][1]
    if any(res is None for res in out["results"]):     # SimGrid found a deadlock and killed the actors
        state = "; ".join(f"rank {r.r}: {describe(r.pending)}" for r in ranks)
        raise CollectiveDeadlock(f"{collective.name}: no rank can progress on SimGrid ({state})")
    return out["results"], [rank.log for rank in ranks]
