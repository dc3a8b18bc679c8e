"""The in-process executor's point-to-point passes (`ssgd.comm.executors.thread`): visiting only the ranks whose
Send is matched completes the same messages in the same order as a scan of every rank per pass, the rule its
docstring states. The oracle below is that scan, written out; a recording network simulator sees every
completion in order, so equal records mean equal modelled clocks on any network (a shaped link's token
buckets depend on the order)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ssgd.comm.base import Collective, Reduced
from ssgd.comm.collectives.allgather import SparseAllgather
from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.comm.collectives.gtopk import GTopKAllreduce
from ssgd.comm.collectives.oktopk import OkTopkAllreduce
from ssgd.comm.collectives.reduce_scatter import DenseReduceScatter, SparseReduceScatter
from ssgd.comm.collectives.sparcml import SparseRecursiveDoubling
from ssgd.comm.executors import thread
from ssgd.comm.ops import Recv, Send
from ssgd.payload import Dense, Sparse
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.netsim import NetSim, simulator
from ssgd.perf.shaped import ShapedLink

ORIGINAL = thread._Lockstep
NETS = {"alpha-beta": AlphaBeta(1e-4, 1e-9),          # order-free clocks
        "shaped": ShapedLink(latency=5e-5, beta=8e-9, burst=2000.0, host=((8.0, 6e-5), (1e5, 1e-4)),
                             host_beta=1e-10)}       # token buckets: the clocks depend on the order of messages


class ScanLockstep(thread._Lockstep):
    """The oracle: each pass looks at every rank 0 .. P-1 in turn and completes its Send when the matching Recv
    is posted at that moment (the order under test; how one message is carried out, `complete`, is shared)."""

    def point_to_point(self) -> bool:
        progressed = False
        for r in range(self.P):
            op = self.pending[r]
            if not isinstance(op, Send) or not 0 <= op.dest < self.P:
                continue
            peer = self.pending[op.dest]
            if isinstance(peer, Recv) and peer.source == r and peer.tag == op.tag:
                self.complete(r)
                progressed = True
        return progressed


class Recording(NetSim):
    """Every call the executor makes on its simulator, in order, passed on to `inner`."""

    def __init__(self, inner: NetSim, calls: list) -> None:
        self.inner, self.calls = inner, calls

    @property
    def clocks(self) -> list[float]:
        return self.inner.clocks

    def compute(self, rank, seconds):
        self.calls.append(("compute", rank, seconds))
        self.inner.compute(rank, seconds)

    def send(self, src, dst, nbytes):
        self.calls.append(("send", src, dst, nbytes))
        self.inner.send(src, dst, nbytes)

    def allreduce(self, numel, element_size=4):
        self.calls.append(("allreduce", numel, element_size))
        self.inner.allreduce(numel, element_size)

    def allgatherv(self, block_bytes):
        self.calls.append(("allgatherv", tuple(block_bytes)))
        self.inner.allgatherv(block_bytes)

    def bcast(self, nbytes):
        self.calls.append(("bcast", nbytes))
        self.inner.bcast(nbytes)


def sparse_payloads(P: int, d: int, k: int, seed: int, overlap: bool) -> list[Sparse]:
    """Each rank's k entries of d with distinct magnitudes; `overlap`: the ranks draw from a shared half of d."""
    rng = np.random.default_rng(seed)
    pool = rng.permutation(d)[: d // 2] if overlap else np.arange(d)
    out = []
    for r in range(P):
        idx = np.sort(rng.choice(pool, size=min(k, len(pool)), replace=False))
        val = rng.standard_normal(len(idx)).astype(np.float32) * (1 + r)
        out.append(Sparse(torch.from_numpy(idx.astype(np.int64)), torch.from_numpy(val), d))
    return out


def dense_payloads(P: int, d: int, seed: int) -> list[Dense]:
    rng = np.random.default_rng(seed)
    return [Dense(torch.from_numpy(rng.standard_normal(d).astype(np.float32))) for _ in range(P)]


CASES = {   # name -> (a fresh collective, sparse payloads?, calls on the same instance)
    "dense": (DenseAllreduce, False, 1),
    "allgather": (SparseAllgather, True, 1),
    "gtopk": (GTopKAllreduce, True, 1),
    "gtopk-strict-fp16": (lambda: GTopKAllreduce("strict", "fp16"), True, 1),
    "oktopk-exact": (lambda: OkTopkAllreduce(1, 1), True, 1),
    "oktopk-reuse": (lambda: OkTopkAllreduce(2, 10**9), True, 3),
    "topkdsa": (SparseRecursiveDoubling, True, 1),
    "sparse-reduce-scatter": (SparseReduceScatter, True, 1),
    "dense-reduce-scatter": (DenseReduceScatter, False, 1),
}


def run(lockstep: type, name: str, P: int, net, overlap: bool, monkeypatch) -> tuple[list, list, list]:
    """Every call of case `name` through run_threads with `lockstep` as its engine: results, logs, simulator calls."""
    make, sparse, calls_n = CASES[name]
    coll, d = make(), 60 * P
    calls: list = []
    monkeypatch.setattr(thread, "_Lockstep", lockstep)
    monkeypatch.setattr(thread, "simulator", lambda n, p: Recording(simulator(n, p), calls))
    out = []
    for call in range(calls_n):
        payloads = sparse_payloads(P, d, 7, call, overlap) if sparse else dense_payloads(P, d, call)
        results, logs = thread.run_threads(coll, [coll.encode(p) for p in payloads], net)
        out.append((results, logs))
    return out, calls, [lg.clock for _, logs in out for lg in logs]


def same(a, b) -> bool:
    ta, tb = a.total, b.total
    if isinstance(ta, Dense):
        return torch.equal(ta.values, tb.values)
    support = (a.support is None and b.support is None) or torch.equal(a.support, b.support)
    return torch.equal(ta.idx, tb.idx) and torch.equal(ta.val, tb.val) and support


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("P", [1, 2, 3, 5, 8, 13])
def test_passes_complete_what_a_scan_of_every_rank_completes_in_its_order(name, P, monkeypatch):
    for net in NETS.values():
        for overlap in (False, True):
            want, want_calls, want_clocks = run(ScanLockstep, name, P, net, overlap, monkeypatch)
            got, got_calls, got_clocks = run(ORIGINAL, name, P, net, overlap, monkeypatch)
            assert P == 1 or len(want_calls) > 0                      # the comparison saw messages
            assert got_calls == want_calls and got_clocks == want_clocks
            for (wr, wl), (gr, gl) in zip(want, got):
                assert all(same(a, b) for a, b in zip(wr, gr))
                assert [(lg.stats.messages, lg.stats.bytes) for lg in gl] == \
                    [(lg.stats.messages, lg.stats.bytes) for lg in wl]


class _TwoRanks(Collective):
    """Two ranks' hand-written program: `ops(rank)` yields what each rank does."""

    name = "two_ranks"

    def __init__(self, ops) -> None:
        self.ops = ops

    def program(self, rank, P, payload):
        yield from self.ops(rank)
        return Reduced(payload, P)

    def model_seconds(self, net, P, d, counts):
        return 0.0


def test_a_deadlock_names_every_rank_and_a_mismatch_its_sizes():
    crossed = _TwoRanks(lambda r: iter((Recv(1 - r, torch.empty(3)), Send(1 - r, torch.zeros(3)))))
    with pytest.raises(thread.CollectiveDeadlock, match=r"two_ranks: no rank can progress \(rank 0: Recv<-1; "
                                                        r"rank 1: Recv<-0\)"):
        thread.run_threads(crossed, dense_payloads(2, 3, 0))
    sizes = _TwoRanks(lambda r: iter((Send(1, torch.zeros(3)),) if r == 0 else (Recv(0, torch.empty(4)),)))
    with pytest.raises(thread.CollectiveDeadlock, match=r"rank 0 sends \(3,\) torch.float32 but rank 1 receives "
                                                        r"\(4,\)"):
        thread.run_threads(sizes, dense_payloads(2, 3, 0))
