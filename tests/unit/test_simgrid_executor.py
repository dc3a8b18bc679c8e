"""The SimGrid executor (ssgd.comm.executors.simgrid): the lab's collective programs as actors on simulated hosts.

Pinned: results bitwise equal to the thread executor for every collective at P = 1..12; each rank's messages and
bytes, counted as its actor puts them in mailboxes, equal to the ops' own `sent()` (which the thread executor
counts); simulated times equal to the closed forms of a network without contention where the schedule has none
(CM02 without cross traffic: no correction factors; oracle: a message alone on its route takes 2 latency + n / bandwidth); errors and
deadlocks raised as such. All on the one platform of tests/conftest.py (SimGrid builds one per process).
"""
from __future__ import annotations

import math

import pytest
import torch

from collective_checks import payload
from conftest import simgrid_test_platform
from ssgd.comm.base import Collective, Reduced
from ssgd.comm.collectives.allgather import SparseAllgather
from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.comm.collectives.gtopk import GTopKAllreduce
from ssgd.comm.executors.thread import CollectiveDeadlock, run_threads
from ssgd.comm.ops import Allgatherv, Bcast, Recv, Send
from ssgd.errors import ConfigError
from ssgd.payload import Dense, Sparse
from ssgd.perf.platform import Platform

pytest.importorskip("simgrid", reason="SimGrid's Python bindings are not installed (make simgrid)")
from ssgd.comm.executors.simgrid import run_simgrid  # noqa: E402

PLATFORM = simgrid_test_platform()
BW, LAT = PLATFORM.bandwidth, PLATFORM.latency


def message_s(nbytes: float) -> float:
    """A message alone on its route: up the sender's NIC, down the receiver's (the oracle of this file)."""
    return 2 * LAT + nbytes / BW


COLLECTIVES = {
    "dense": (lambda: DenseAllreduce(), "dense"), "dense-fp16": (lambda: DenseAllreduce("fp16"), "dense"),
    "allgather": (lambda: SparseAllgather(), "allgather"),
    "allgather-narrow-bf16": (lambda: SparseAllgather("bf16", narrow_indices=True), "allgather"),
    "gtopk": (lambda: GTopKAllreduce(), "gtopk"), "gtopk-strict-fp16": (lambda: GTopKAllreduce("strict", "fp16"), "gtopk"),
}


def both(name: str, P: int, d: int = 600, k: int = 40, seed: int = 5):
    make, kind = COLLECTIVES[name]
    coll = make()
    inputs = lambda: [coll.encode(payload(kind, r, P, d, k if kind == "gtopk" else None, seed)) for r in range(P)]
    return run_threads(make(), inputs()), run_simgrid(coll, inputs(), PLATFORM, cpu="none")


def same_reduced(a: Reduced, b: Reduced) -> bool:
    if type(a.total) is not type(b.total) or a.P != b.P:
        return False
    if isinstance(a.total, Dense):
        same = torch.equal(a.total.values, b.total.values)
    else:
        same = torch.equal(a.total.idx, b.total.idx) and torch.equal(a.total.val, b.total.val)
    if (a.support is None) != (b.support is None):
        return False
    return same and (a.support is None or torch.equal(a.support, b.support))


@pytest.mark.parametrize("name", list(COLLECTIVES))
@pytest.mark.parametrize("P", range(1, 13))
def test_results_and_counts_equal_the_thread_executor(name, P):
    (want, want_logs), (got, got_logs) = both(name, P)
    assert all(same_reduced(a, b) for a, b in zip(want, got))
    assert [(l.stats.messages, l.stats.bytes) for l in got_logs] == \
        [(l.stats.messages, l.stats.bytes) for l in want_logs]
    assert P == 1 or sum(l.stats.messages for l in got_logs) > 0          # the check saw messages


@pytest.mark.parametrize("P", [2, 3, 4, 8, 12])
def test_a_dense_ring_allreduce_takes_its_closed_form(P):
    d = 1200 * P                                     # P divides d: every chunk 4 d / P bytes
    (_, _), (_, logs) = both("dense", P, d=d)
    assert max(l.clock for l in logs) == pytest.approx(2 * (P - 1) * message_s(4 * d / P), rel=1e-9)


class _Program(Collective):
    """A collective of one hand-written program (`body(rank, P, payload)` yields ops)."""

    name = "hand_written"

    def __init__(self, body):
        self.body = body

    def program(self, rank, P, payload):
        yield from self.body(rank, P, payload)
        return Reduced(payload, P)

    def model_seconds(self, net, P, d, counts):
        return 0.0


def test_a_message_alone_takes_latency_plus_bytes_over_bandwidth():
    def body(rank, P, payload):
        if rank == 0:
            yield Send(1, torch.arange(250_000, dtype=torch.float32))
        else:
            buf = torch.zeros(250_000)
            yield Recv(0, buf)
            assert torch.equal(buf, torch.arange(250_000, dtype=torch.float32))
    _, logs = run_simgrid(_Program(body), [Dense(torch.zeros(1))] * 2, PLATFORM, cpu="none")
    assert logs[1].clock == pytest.approx(message_s(1e6), rel=1e-9)


@pytest.mark.parametrize("P", [2, 5, 8, 12])
def test_a_binomial_broadcast_takes_ceil_log2_P_rounds(P):
    def body(rank, P, payload):
        got = yield Bcast(torch.full((25_000,), float(rank)))
        assert torch.equal(got, torch.zeros(25_000))
    _, logs = run_simgrid(_Program(body), [Dense(torch.zeros(1))] * P, PLATFORM, cpu="none")
    assert max(l.clock for l in logs) == pytest.approx(math.ceil(math.log2(P)) * message_s(1e5), rel=1e-9)


@pytest.mark.parametrize("P", [3, 7])
def test_a_ring_allgatherv_of_equal_blocks_takes_P_minus_1_steps(P):
    def body(rank, P, payload):
        got = yield Allgatherv(torch.full((5_000,), float(rank)))
        assert [int(g[0]) for g in got] == list(range(P))
    _, logs = run_simgrid(_Program(body), [Dense(torch.zeros(1))] * P, PLATFORM, cpu="none")
    assert max(l.clock for l in logs) == pytest.approx((P - 1) * message_s(2e4), rel=1e-9)


def test_measured_cpu_is_charged_to_the_rank_that_spent_it():
    def body(rank, P, payload):
        if rank == 1:
            x = torch.randn(300, 300)
            for _ in range(40):
                x = x @ x / 300
        yield Allgatherv(torch.zeros(1))
    _, none = run_simgrid(_Program(body), [Dense(torch.zeros(1))] * 2, PLATFORM, cpu="none")
    _, charged = run_simgrid(_Program(body), [Dense(torch.zeros(1))] * 2, PLATFORM, cpu="measured")
    assert charged[0].clock > none[0].clock + 1e-4      # rank 0 waited in the allgather for rank 1's compute


def test_a_deadlock_names_every_rank_pending_op():
    def body(rank, P, payload):
        yield Recv((rank + 1) % P, torch.zeros(3))
    with pytest.raises(CollectiveDeadlock, match=r"rank 0: Recv<-1; rank 1: Recv<-2; rank 2: Recv<-0"):
        run_simgrid(_Program(body), [Dense(torch.zeros(1))] * 3, PLATFORM)


def test_an_error_in_a_program_is_raised_not_a_deadlock():
    def body(rank, P, payload):
        if rank == 1:
            raise KeyError("boom in rank 1")
        yield Recv(1, torch.zeros(3))
    with pytest.raises(KeyError, match="boom in rank 1"):
        run_simgrid(_Program(body), [Dense(torch.zeros(1))] * 2, PLATFORM)
    (_, _), (_, logs) = both("gtopk", 4)                 # and the next call still runs
    assert max(l.clock for l in logs) > 0


def test_another_network_in_the_same_process_is_refused_in_one_line():
    other = Platform(hosts=4, bandwidth=PLATFORM.bandwidth * 10, latency=LAT, tcp=PLATFORM.tcp)
    with pytest.raises(ConfigError, match="one platform per process"):
        run_simgrid(DenseAllreduce(), [Dense(torch.zeros(4))] * 2, other)
    with pytest.raises(ValueError, match="13 ranks on a platform of 12 hosts"):
        run_simgrid(DenseAllreduce(), [Dense(torch.zeros(4))] * 13, PLATFORM)


def test_a_sparse_payload_travels_as_the_real_tensor():
    def body(rank, P, payload):
        if rank == 0:
            yield Send(1, torch.tensor([3.5, -1.25]))
        else:
            buf = torch.zeros(2)
            yield Recv(0, buf)
            payload.val.copy_(buf)
    out, _ = run_simgrid(_Program(body), [Sparse(torch.tensor([0, 1]), torch.zeros(2), 4) for _ in range(2)], PLATFORM)
    assert out[1].total.val.tolist() == [3.5, -1.25]
