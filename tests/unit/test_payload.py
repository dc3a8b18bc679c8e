"""The payload protocol (ssgd.payload): Dense and Sparse by hand, and a payload kind defined only in this
file (float16 values) going through the error-feedback memory, the per-rank sync step, the executors,
the driver and capture without any change to them."""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import Tensor

from ssgd.loop.capture import Capture, CaptureConfig, u_statistics
from ssgd.comm.collectives.allgather import SparseAllgather
from ssgd.comm.base import Collective, Reduced
from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.comm.driver import advance, run_program
from ssgd.comm.collectives.gtopk import GTopKAllreduce
from ssgd.comm.ops import Allgatherv, Allreduce, Bcast, Op
from ssgd.comm.executors.thread import run_threads
from ssgd.comm.wire import MAX_NUMEL
from ssgd.compress.base import Compressor
from ssgd.compress.memory import ResidualMemory
from ssgd.compress.sparse import k_of, select_topk
from ssgd.payload import Dense, Sparse, member_of, sum_sparse
from ssgd.perf import cost
from ssgd.loop.sync import DensitySchedule, RankCompression, Scheme, counts_of
from ssgd.worlds.base import ThreadWorld


def sparse(idx, val, d):
    return Sparse(torch.tensor(idx, dtype=torch.int64), torch.tensor(val, dtype=torch.float32), d)


# --- Dense and Sparse by hand ---------------------------------------------------------------------
def test_dense_by_hand():
    v = torch.tensor([1.0, -2.0, 3.0])
    p = Dense(v)
    assert (p.numel, p.count, p.indices()) == (3, 3, None)
    assert p.to_dense() is v                                   # no copy
    assert p.to_dense(scale=2).tolist() == [0.5, -1.0, 1.5]
    out = torch.full((3,), 7.0)
    assert p.to_dense(scale=2, out=out) is out and out.tolist() == [0.5, -1.0, 1.5]
    assert p.to_dense(out=out) is out and torch.equal(out, v)
    assert p.restrict(None) is p
    part = p.restrict(torch.tensor([2, 0]))
    assert part.count == 2 and part.indices().tolist() == [2, 0] and part.to_dense().tolist() == [1.0, 0.0, 3.0]
    e = torch.tensor([1.0, 1.0, 1.0])
    p.subtract_from(e)
    assert e.tolist() == [0.0, 3.0, -2.0]


def test_sparse_by_hand():
    p = sparse([4, 1], [2.0, -1.0], d=6)
    assert (p.numel, p.count, len(p), p.indices().tolist()) == (6, 2, 2, [4, 1])
    assert p.to_dense().tolist() == [0, -1.0, 0, 0, 2.0, 0]
    out = torch.full((6,), 9.0)                                 # stale contents are cleared
    assert p.to_dense(scale=4, out=out) is out and out.tolist() == [0, -0.25, 0, 0, 0.5, 0]
    assert p.restrict(None) is p
    assert p.restrict(torch.tensor([1, 3])).to_dense().tolist() == [0, -1.0, 0, 0, 0, 0]
    e = torch.tensor([1.0, -1.0, 1.0, 1.0, float("inf"), 1.0])   # values were copied from e: zeroed, even inf
    p.subtract_from(e)
    assert e.tolist() == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize("seed", range(6))
def test_member_of_by_marks_and_by_search_agree_with_isin(seed):
    """Membership three ways (marking a rank's flags, bisection of a sorted support, isin for an unsorted one)
    against torch.isin; the flags are all False again afterwards, and restrict keeps the payload's order."""
    g = torch.Generator().manual_seed(seed)
    d = int(torch.randint(1, 3000, (1,), generator=g))
    x = torch.randperm(d, generator=g)[:int(torch.randint(0, d + 1, (1,), generator=g))]
    support = torch.randperm(d, generator=g)[:int(torch.randint(0, d + 1, (1,), generator=g))]
    marks = torch.zeros(d, dtype=torch.bool)
    for s in (support, support.sort().values):
        want = torch.isin(x, s)
        assert torch.equal(member_of(x, s), want)
        assert torch.equal(member_of(x, s, marks), want) and not marks.any()
        p = Sparse(x, torch.randn(x.numel(), generator=g), d)
        by_marks, by_search = p.restrict(s, marks), p.restrict(s)
        assert torch.equal(by_marks.idx, x[want]) and torch.equal(by_marks.idx, by_search.idx)
        assert torch.equal(by_marks.val, by_search.val) and not marks.any()


@pytest.mark.parametrize("p", [Dense(torch.ones(4)), sparse([1], [1.0], d=4)])
def test_to_dense_refuses_a_wrong_out_buffer(p):
    for bad in (torch.zeros(5), torch.zeros(4, dtype=torch.float64), torch.zeros(2, 2)):
        with pytest.raises(ValueError, match="out must be float32"):
            p.to_dense(out=bad)


@pytest.mark.parametrize("P", [1, 3])
def test_average_into_a_buffer_is_the_same_bits(P):
    gen = torch.Generator().manual_seed(P)
    dense = [Dense(torch.randn(50, generator=gen)) for _ in range(P)]
    sparses = [select_topk(torch.randn(50, generator=gen), 5) for _ in range(P)]
    for collective, payloads in [(DenseAllreduce(), dense), (SparseAllgather(), sparses), (GTopKAllreduce(), sparses)]:
        results, _ = run_threads(collective, payloads)
        out = torch.full((50,), float("nan"))
        assert results[0].average(out=out) is out
        assert torch.equal(out.view(torch.int32), results[0].average().view(torch.int32))


def test_dense_allreduce_sums_any_payload_in_its_dense_form():
    payloads = [sparse([0, 2], [1.0, 2.0], d=4), sparse([2], [0.5], d=4)]
    results, logs = run_threads(DenseAllreduce(), payloads)
    assert results[1].total.to_dense().tolist() == [1.0, 0.0, 2.5, 0.0]
    assert results[1].sent(payloads[1]) is payloads[1]          # the whole payload counts as sent
    assert [log.stats.bytes for log in logs] == [16, 16]        # a dense allreduce of d = 4 floats


# --- the driver -----------------------------------------------------------------------------------
def one_rank(op: Op):
    """How a single-rank executor carries out an operation (P = 1: every collective is the identity)."""
    if isinstance(op, (Allreduce, Bcast)):
        return op.buf.clone()
    if isinstance(op, Allgatherv):
        return [op.buf.clone()]
    raise AssertionError(f"P = 1 never sends: {op!r}")


@pytest.mark.parametrize("collective", [DenseAllreduce(), SparseAllgather(), GTopKAllreduce()])
def test_run_program_with_a_one_rank_executor_equals_the_thread_executor(collective):
    u = torch.randn(40, generator=torch.Generator().manual_seed(0))
    payload = Dense(u) if isinstance(collective, DenseAllreduce) else select_topk(u, 6)
    got = run_program(collective, 0, 1, payload, one_rank)
    want = run_threads(collective, [payload])[0][0]
    assert torch.equal(got.average(), want.average())
    assert (got.support is None) == (want.support is None)


def test_a_program_must_return_reduced():
    class ReturnsTensor(Collective):
        name = "returns_tensor"

        def program(self, rank, P, payload):
            yield Allreduce(payload.to_dense())
            return payload.to_dense()

        def model_seconds(self, net, P, d, counts):
            return 0.0

    program = ReturnsTensor().program(0, 1, Dense(torch.ones(2)))
    op, result = advance(program)
    assert isinstance(op, Allreduce) and result is None
    with pytest.raises(TypeError, match="not Reduced"):
        advance(program, op.buf)


# --- a third payload kind, defined only here --------------------------------------------------------
@dataclass(frozen=True)
class HalfSparse:
    """Sparse entries with float16 values: a lossy (quantised) payload. Implements `ssgd.payload.Payload`."""

    idx: Tensor
    val: Tensor          # float16
    numel: int

    @property
    def count(self) -> int:
        return self.idx.numel()

    def to_dense(self, scale: float = 1.0, out: Tensor | None = None) -> Tensor:
        out = torch.zeros(self.numel) if out is None else out.zero_()
        out[self.idx] = self.val.float() / scale
        return out

    def restrict(self, support: Tensor | None) -> HalfSparse:
        if support is None:
            return self
        keep = torch.isin(self.idx, support)
        return HalfSparse(self.idx[keep], self.val[keep], self.numel)

    def subtract_from(self, e: Tensor) -> None:
        e.index_add_(0, self.idx, -self.val.float())      # lossy: the rounding error stays in e

    def indices(self) -> Tensor | None:
        return self.idx


class HalfTopK(Compressor):
    """Top-k, values rounded to float16."""

    def compress(self, u: Tensor, density: float) -> HalfSparse:
        s = select_topk(u, k_of(u.numel(), density))
        return HalfSparse(s.idx, s.val.half(), u.numel())


def pack_half(p: HalfSparse) -> Tensor:
    """int16 [3n]: each int32 index as two int16, then the float16 bits: 6 bytes per entry."""
    return torch.cat([p.idx.to(torch.int32).view(torch.int16), p.val.view(torch.int16)])


def unpack_half(buf: Tensor, numel: int) -> HalfSparse:
    n = buf.numel() // 3
    return HalfSparse(buf[:2 * n].view(torch.int32).to(torch.int64), buf[2 * n:].view(torch.float16), numel)


class HalfAllgather(Collective):
    """AllGather of HalfSparse payloads on their own wire format; the sum is a float32 `Sparse`."""

    name = "half_allgather"
    max_numel = MAX_NUMEL

    def program(self, rank, P, payload):
        blocks = yield Allgatherv(pack_half(payload))
        parts = [unpack_half(b, payload.numel) for b in blocks]
        return Reduced(sum_sparse([Sparse(p.idx, p.val.float(), p.numel) for p in parts]), P)

    def model_seconds(self, net, P, d, counts):
        return cost.allgatherv_seconds(net, [6 * c for c in counts])


class RootSupportSum(Collective):
    """Dense sum of every payload; only the entries at rank 0's indices count as sent (a support,
    like gTop-k's global set). Uses nothing of a payload but the protocol."""

    name = "root_support_sum"

    def program(self, rank, P, payload):
        total = yield Allreduce(payload.to_dense())
        support = yield Bcast(payload.indices())
        return Reduced(Dense(total), P, support=support)

    def model_seconds(self, net, P, d, counts):
        return 0.0


def test_a_new_payload_kind_goes_through_memory_sync_executor_and_capture(tmp_path):
    P, d, density, steps = 3, 64, 0.125, 3
    k = k_of(d, density)
    scheme = Scheme(name="half", make_compressor=lambda r: HalfTopK(),
                    make_memory=lambda d, device="cpu": ResidualMemory(d, device), collective=RootSupportSum(),
                    density=DensitySchedule(density))
    syncs = [RankCompression(scheme, r, d) for r in range(P)]
    gen = torch.Generator().manual_seed(0)
    world = ThreadWorld(P, threads=1)
    capture = Capture(CaptureConfig(stats=True, u_steps=(1,)), tmp_path, seed=0, is_root=True, scheme="half")
    try:
        for step in range(1, steps + 1):
            grads = [torch.randn(d, generator=gen) for _ in range(P)]
            want_u = [(s.memory.e + g).double() for s, g in zip(syncs, grads)]
            us, payloads = zip(*[s.compress(g.clone(), density) for s, g in zip(syncs, grads)])
            assert counts_of(payloads) == [k] * P
            results, _ = world.collective(scheme.collective, payloads)
            # the aggregate: the rank-order sum of the decoded float16 values, / P
            total = payloads[0].to_dense().clone()
            for p in payloads[1:]:
                total += p.to_dense()
            assert torch.equal(results[0].average(), total / P)
            capture.observe(step, 0, density, world, list(us), list(payloads), results, results[0].average())
            # capture's statistics, against numpy on the decoded payloads
            u0 = want_u[0].numpy()
            q0 = np.zeros(d)
            q0[payloads[0].idx.numpy()] = payloads[0].val.double().numpy()
            stats = u_statistics(us[0], payloads[0], results[0].sent(payloads[0]), density, torch.Generator())
            assert stats["err/active"] == pytest.approx(float(((u0 - q0) ** 2).sum()), rel=1e-12)
            assert stats["err/active_sent"] == stats["err/active"]           # rank 0's indices are the support
            assert stats["density/achieved"] == k / d
            for r, (s, p, res) in enumerate(zip(syncs, payloads, results)):
                sent = res.sent(p)
                s.settle(p, res)
                # conservation, exactly: u = sent + residual, float16 rounding error included
                assert torch.equal(sent.to_dense().double() + s.memory.e.double(), want_u[r])
                if r == 0:
                    assert torch.equal(sent.idx, p.idx)                       # all of rank 0's entries
                    assert float(s.memory.e[p.idx].abs().sum()) > 0           # their rounding error is kept
        records = [json.loads(line) for line in (tmp_path / "capture" / "stats.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == [1, 2, 3] and all(r["density/achieved"] == k / d for r in records)
        snap = torch.load(tmp_path / "capture" / "u_step000001.pt", weights_only=False)
        assert snap["selected"].tolist() == snap["sent"].tolist() and len(snap["selected"]) == k
    finally:
        capture.close()
        world.close()


@pytest.mark.parametrize("P", [1, 2, 5])
def test_the_new_kind_has_its_own_collective_on_every_executor(P):
    """The docs/collectives.md example: HalfSparse through its own AllGather, in lock step and
    through the driver; the result is the rank-order sum of the decoded values."""
    gen = torch.Generator().manual_seed(P)
    payloads = [HalfTopK().compress(torch.randn(30, generator=gen), 0.2) for _ in range(P)]
    results, logs = run_threads(HalfAllgather(), payloads)
    want = payloads[0].to_dense().clone()
    for p in payloads[1:]:
        want += p.to_dense()
    for res in results:
        assert torch.equal(res.total.to_dense(), want) and res.sent(payloads[0]) is payloads[0]
    counts = counts_of(payloads)
    assert [(log.stats.messages, log.stats.bytes) for log in logs] == \
        [cost.allgatherv_sent(r, [6 * c for c in counts]) for r in range(P)]
    if P == 1:
        assert torch.equal(run_program(HalfAllgather(), 0, 1, payloads[0], one_rank).average(), results[0].average())
