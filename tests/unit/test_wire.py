"""Wire formats (`compressor.wire.values=fp32|fp16|bf16`, ssgd.comm.wire) against independent oracles.

Rounding oracles are numpy: fp16 is numpy's own float16 cast; bf16 is round-to-nearest-even of the
float32 bits written out here. Collectives are checked against plain-dict / numpy simulations of their
schedules (tests/oracles.py for gTop-k's tree), their byte counts against `ssgd.perf.cost`, and error
feedback against conservation: e_new + decoded(sent) == u exactly, in float32, rounding included.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/, for `oracles`
import oracles  # noqa: E402

from conftest import group_options, make_cfg  # noqa: E402
from ssgd.comm.collectives.allgather import SparseAllgather  # noqa: E402
from ssgd.comm.collectives.dense import DenseAllreduce  # noqa: E402
from ssgd.comm.collectives.gtopk import GTopKAllreduce  # noqa: E402
from ssgd.comm.executors.thread import run_threads  # noqa: E402
from ssgd.comm.wire import WireFormat  # noqa: E402
from ssgd.errors import BadArgument, ConfigError  # noqa: E402
from ssgd.loop.sync import RankCompression  # noqa: E402
from ssgd.payload import Dense, Sparse  # noqa: E402
from ssgd.perf import cost  # noqa: E402
from ssgd.perf.alphabeta import AlphaBeta  # noqa: E402
from ssgd.run import build  # noqa: E402

F32 = np.float32
HALF = ["fp16", "bf16"]
NET = AlphaBeta(1e-3, 1e-8)


# --- oracles ----------------------------------------------------------------------------------------
def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even), as float32; finite inputs that stay finite."""
    b = np.ascontiguousarray(x, dtype=F32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(F32)


def round16(values: str, x) -> np.ndarray:
    x = np.asarray(x, dtype=F32)
    if values == "fp16":
        return np.clip(x, -65504, 65504).astype(np.float16).astype(F32)
    return bf16_round(x)


def f32_bits(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=F32)).view(np.int32)


def sparse_of(entries: dict[int, float], d: int, wire: WireFormat) -> Sparse:
    idx = torch.tensor(list(entries), dtype=torch.int64).reshape(-1)
    val = torch.tensor([float(v) for v in entries.values()], dtype=torch.float32).reshape(-1)
    return wire.encode(Sparse(idx, val, d))


# --- the format itself --------------------------------------------------------------------------------
def test_bytes_per_entry_and_element():
    assert [(WireFormat(v).entry_bytes, WireFormat(v).value_bytes) for v in ("fp32", "fp16", "bf16")] == \
        [(8, 4), (6, 2), (6, 2)]
    with pytest.raises(BadArgument, match=r"^values='fp8': allowed: fp32, fp16, bf16$"):
        WireFormat("fp8")


@pytest.mark.parametrize("values", HALF)
def test_rounding_equals_the_numpy_oracle(values):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-6, 4, 5000),
                        [0.0, -0.0, 1.0, 65504.0, 65519.0, 1e6, -1e6, 2 ** -24, 3e-8]]).astype(F32)
    got = WireFormat(values).round(torch.from_numpy(x))
    assert got.dtype == WireFormat(values).dtype
    np.testing.assert_array_equal(f32_bits(got.float().numpy()), f32_bits(round16(values, x)))


def test_fp16_saturates_instead_of_overflowing():
    got = WireFormat("fp16").round(torch.tensor([1e6, -7e4, float("nan")]))
    assert got[:2].tolist() == [65504.0, -65504.0] and bool(got[2].isnan())


@pytest.mark.parametrize("values", HALF)
@pytest.mark.parametrize("n", [0, 1, 3, 10])
def test_pack_is_six_bytes_per_entry_and_unpacks_exactly(values, n):
    wire, d = WireFormat(values), 1000
    rng = np.random.default_rng(n)
    s = sparse_of({int(i): F32(v) for i, v in zip(rng.choice(d, n, replace=False), rng.standard_normal(n))}, d, wire)
    buf = wire.pack(s)
    assert buf.dtype == torch.uint8 and buf.numel() == 6 * n and wire.entries_in(buf) == n
    back = wire.unpack(buf, d)
    assert torch.equal(back.idx, s.idx) and back.val.dtype == torch.float32
    assert torch.equal(back.val, s.val.float()) and back.numel == d
    # a block that starts at an offset no int32 view allows (an allgather's second block) still unpacks
    shifted = torch.cat([torch.zeros(2, dtype=torch.uint8), buf])[2:]
    assert shifted.storage_offset() % 4 == 2
    again = wire.unpack(shifted, d)
    assert torch.equal(again.idx, s.idx) and torch.equal(again.val, s.val.float())


def test_pack_refuses_values_the_format_did_not_encode():
    s = Sparse(torch.tensor([1]), torch.tensor([0.5]), 10)
    with pytest.raises(TypeError, match="needs payload values of dtype torch.bfloat16"):
        WireFormat("bf16").pack(s)
    half_bits = int(np.array([0.5], dtype=F32).view(np.int32)[0])
    assert WireFormat("fp32").pack(s).tolist() == [1, half_bits]         # fp32: the int32 [2n] format


# --- error feedback keeps the rounding -----------------------------------------------------------------
@pytest.mark.parametrize("values", HALF)
def test_sparse_subtract_keeps_the_rounding_exactly(values):
    wire = WireFormat(values)
    gen = torch.Generator().manual_seed(1)
    u = torch.randn(500, generator=gen) * torch.logspace(-6, 4, 500)
    idx = torch.randperm(500, generator=gen)[:100]
    payload = wire.encode(Sparse(idx, u[idx], 500))
    e = u.clone()
    payload.subtract_from(e)
    assert torch.equal(e + payload.to_dense(), u)                      # in float32, exactly
    np.testing.assert_array_equal(f32_bits((u - e)[idx].numpy()), f32_bits(round16(values, u[idx].numpy())))
    rest = torch.ones(500, dtype=torch.bool).index_fill_(0, idx, False)
    assert torch.equal(e[rest], u[rest])
    assert bool((e[idx] != 0).any())                                   # the rounding is really kept


@pytest.mark.parametrize("values", HALF)
def test_dense_subtract_keeps_the_rounding_exactly(values):
    u = torch.randn(300, generator=torch.Generator().manual_seed(2))
    payload = WireFormat(values).encode(Dense(u))
    e = u.clone()
    payload.subtract_from(e)
    assert torch.equal(e + payload.to_dense(), u) and bool((e != 0).any())
    assert payload.to_dense().dtype == torch.float32


SCHEMES = group_options("compressor")


@pytest.mark.parametrize("values", HALF)
@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("P", [1, 3])
def test_conservation_in_float32_for_every_scheme(name, values, P):
    """u == e_new + decoded(sent) exactly, every rank, several steps; sent values are the format's."""
    scheme = build.scheme(make_cfg(f"compressor={name}", f"compressor.wire.values={values}"), seed=0)
    assert scheme.collective.wire.values == values
    d = 301
    syncs = [RankCompression(scheme, r, d) for r in range(P)]
    gen = torch.Generator().manual_seed(P)
    for step in range(3):
        grads = [torch.randn(d, generator=gen) * 10.0 ** (r - 1) for r in range(P)]
        us, payloads = [], []
        for sync, g in zip(syncs, grads):
            e_before = sync.memory.e.clone() if hasattr(sync.memory, "e") else torch.zeros(d)
            _, payload = sync.compress(g.clone(), scheme.density(step))
            us.append(e_before + g)
            payloads.append(payload)
            carried = payload.val if isinstance(payload, Sparse) else payload.values
            assert carried.dtype == WireFormat(values).dtype
        results, _ = run_threads(scheme.collective, payloads)
        for sync, u, payload, res in zip(syncs, us, payloads, results):
            sent = res.sent(payload).to_dense()
            sync.settle(payload, res)
            if hasattr(sync.memory, "e"):
                assert torch.equal(sync.memory.e + sent, u), "error feedback lost the rounding"


# --- collectives with 16-bit values -------------------------------------------------------------------
@pytest.mark.parametrize("values", HALF)
@pytest.mark.parametrize("P", [1, 2, 3, 5])
def test_allgather_sums_the_rounded_values_and_counts_six_bytes(values, P):
    wire, d = WireFormat(values), 200
    rng = np.random.default_rng(P)
    entries = []
    for r in range(P):
        n = int(rng.integers(0, 40)) if r % 3 else 17       # ragged, an odd count (unaligned blocks)
        entries.append({int(i): F32(v) for i, v in zip(rng.choice(d, n, replace=False), rng.standard_normal(n))})
    rounded = [{i: round16(values, [v])[0] for i, v in e.items()} for e in entries]
    results, logs = run_threads(SparseAllgather(values), [sparse_of(e, d, wire) for e in entries], net=NET)
    want = oracles.allgather_total(rounded, d)
    counts = [len(e) for e in entries]
    for r, res in enumerate(results):
        np.testing.assert_array_equal(f32_bits(res.total.to_dense().numpy()), f32_bits(want))
        assert (logs[r].stats.messages, logs[r].stats.bytes) == cost.allgatherv_sent(r, [6 * c for c in counts])
    assert max(log.clock for log in logs) == pytest.approx(SparseAllgather(values).model_seconds(NET, P, d, counts))
    assert SparseAllgather(values).model_seconds(NET, P, d, counts) == pytest.approx(
        cost.allgatherv_seconds(NET, [6 * c for c in counts]))


def gtopk16_oracle(entries: list[dict], k: int, values: str) -> dict:
    """tests/oracles.gtopk with the 16-bit wire: leaves send rounded values, every forwarded partial
    sum is rounded again, and so is the root's broadcast."""
    r16 = lambda vec: {i: round16(values, [v])[0] for i, v in vec.items()}   # noqa: E731
    current = [r16(e) for e in entries]
    for pairs in oracles.gtopk_pairs(len(entries)):
        for receiver, sender in pairs:
            current[receiver] = oracles.merge(current[receiver], r16(current[sender]), k)
            current[sender] = None
    return r16(current[0])


@pytest.mark.parametrize("values", HALF)
@pytest.mark.parametrize("P", [1, 2, 3, 4, 5, 8])
def test_gtopk_tree_with_16bit_values_equals_its_oracle(values, P):
    wire, d, k, checked = WireFormat(values), 300, 12, 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        entries = [{int(i): F32(v) for i, v in zip(rng.choice(d, k, replace=False), rng.standard_normal(k) * 4)}
                   for _ in range(P)]
        try:
            want = gtopk16_oracle(entries, k, values)
        except oracles.AmbiguousTopK:        # 16-bit values tie more often; such a cut has no single answer
            continue
        results, logs = run_threads(GTopKAllreduce(values=values), [sparse_of(e, d, wire) for e in entries], net=NET)
        for r, res in enumerate(results):
            got = dict(zip(res.total.idx.tolist(), res.total.val.numpy()))
            assert set(got) == set(want)
            assert all(f32_bits(got[i]) == f32_bits(want[i]) for i in want)
            assert (logs[r].stats.messages, logs[r].stats.bytes) == cost.gtopk_sent(r, P, k, 6)
        assert max(log.clock for log in logs) == pytest.approx(cost.gtopk_seconds(NET, P, k, 6))
        checked += 1
    assert checked >= 10


def test_gtopk_values_exact_in_16_bits_give_the_fp32_result():
    """Small integers are exact in bf16 and so are their sums: both formats agree bit for bit."""
    d, k, P = 100, 5, 4
    rng = np.random.default_rng(3)
    entries = [{int(i): F32(v) for i, v in zip(rng.choice(d, k, replace=False), rng.permutation(np.arange(1, 40))[:k]
                                                * (1 if r % 2 else -1))} for r in range(P)]
    fp32, _ = run_threads(GTopKAllreduce(), [sparse_of(e, d, WireFormat()) for e in entries])
    bf16, _ = run_threads(GTopKAllreduce(values="bf16"), [sparse_of(e, d, WireFormat("bf16")) for e in entries])
    assert torch.equal(fp32[0].total.idx, bf16[0].total.idx) and torch.equal(fp32[0].total.val, bf16[0].total.val)


def ring_oracle(xs: list[np.ndarray], values: str) -> np.ndarray:
    """The ring's sum of chunk c: x_c, then + x_{c+1}, ... + x_{c+P-1}, each partial sum rounded."""
    P, d = len(xs), xs[0].size
    out = np.zeros(d, dtype=F32)
    for c, part in enumerate(np.array_split(np.arange(d), P)):
        acc = xs[c][part]
        for j in range(1, P):
            acc = round16(values, acc + xs[(c + j) % P][part])
        out[part] = acc
    return out


@pytest.mark.parametrize("values", HALF)
@pytest.mark.parametrize("P", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("d", [1, 5, 64, 1001])
def test_dense16_ring_equals_its_oracle_and_counts_two_bytes(values, P, d):
    wire = WireFormat(values)
    gen = torch.Generator().manual_seed(P * d)
    payloads = [wire.encode(Dense(torch.randn(d, generator=gen) * (r + 1))) for r in range(P)]
    results, logs = run_threads(DenseAllreduce(values), payloads)
    want = ring_oracle([p.values.float().numpy() for p in payloads], values)
    for r, res in enumerate(results):
        np.testing.assert_array_equal(f32_bits(res.total.to_dense().numpy()), f32_bits(want))
        assert (logs[r].stats.messages, logs[r].stats.bytes) == cost.allreduce_sent(r, P, d, 2)
    assert DenseAllreduce(values).model_seconds(NET, P, d, [d] * P) == cost.allreduce_seconds(NET, P, d, 2)


def test_dense16_sends_half_the_bytes_of_dense():
    d, P = 1000, 4
    x = [torch.randn(d) for _ in range(P)]
    _, logs32 = run_threads(DenseAllreduce(), [Dense(v) for v in x])
    _, logs16 = run_threads(DenseAllreduce("bf16"), [WireFormat("bf16").encode(Dense(v)) for v in x])
    assert [2 * b.stats.bytes for b in logs16] == [b.stats.bytes for b in logs32]


@pytest.mark.parametrize("collective", [SparseAllgather("bf16"), GTopKAllreduce(values="bf16"), DenseAllreduce("bf16")])
def test_16bit_collectives_refuse_unencoded_payloads(collective):
    payload = Sparse(torch.tensor([0, 1]), torch.tensor([1.0, 2.0]), 4) if not isinstance(collective, DenseAllreduce) \
        else Dense(torch.ones(4))
    with pytest.raises(TypeError, match="bfloat16"):
        run_threads(collective, [payload])


# --- the configuration ------------------------------------------------------------------------------
@pytest.mark.parametrize("override, line", [
    ("compressor.wire.values=fp8", "compressor.wire.values='fp8': allowed: fp32, fp16, bf16"),
    ("compressor.min_compression=-1", "compressor.min_compression=-1"),
    ("+compressor.collective.values=bf16", "compressor.collective.values: set compressor.wire.values instead"),
])
def test_bad_wire_settings_are_one_line_naming_the_key(override, line):
    with pytest.raises(ConfigError) as err:
        build.spec(make_cfg("compressor=topk", override))
    assert line in str(err.value) and "\n" not in str(err.value)


def test_a_collective_without_16bit_values_is_refused(tmp_path):
    from ssgd.scheme_config import wire_of
    from omegaconf import OmegaConf

    node = OmegaConf.create({"collective": {"_target_": "ssgd.comm.base.Collective"}, "wire": {"values": "fp16"}})
    with pytest.raises(ConfigError, match="has no 16-bit wire format"):
        wire_of(node)


def test_files_without_wire_keys_default_to_fp32_and_no_rule():
    from ssgd.config import compressor_config
    from ssgd.scheme_config import build_scheme

    scheme = build_scheme(compressor_config("topk"), seed=0)
    assert scheme.wire.values == "fp32" and scheme.min_compression == 0.0
    assert build_scheme(compressor_config("dense16"), seed=0).collective.wire.values == "bf16"


# --- the minimum-compression rule -----------------------------------------------------------------------
@pytest.mark.parametrize("values, density, rule, dense", [
    ("fp32", 0.5, 2.0, True),     # 4d bytes dense vs 8 * d/2 = 4d sparse: saves 1x < 2x
    ("fp32", 0.2, 2.0, False),    # 4000 vs 8 * 200 = 1600: saves 2.5x
    ("fp32", 0.25, 2.0, False),   # 4000 vs 2000: exactly 2x, not less -> sparse
    ("bf16", 0.2, 2.0, True),     # 2000 vs 6 * 200 = 1200: 1.67x < 2x
    ("fp32", 1.0, 0.0, False),    # off
])
def test_min_compression_decides_by_bytes(values, density, rule, dense):
    scheme = build.scheme(make_cfg("compressor=topk", f"compressor.wire.values={values}",
                                   f"compressor.min_compression={rule}"), seed=0)
    d = 1000
    want = scheme.wire.value_bytes * d < rule * scheme.wire.entry_bytes * max(int(d * density), 1)
    assert scheme.goes_dense(d, density) == want == dense
    sync = RankCompression(scheme, 0, d)
    u = torch.randn(d)
    _, payload = sync.compress(u.clone(), density)
    assert isinstance(payload, Dense) == want
    assert scheme.collective_for(d, density) is (scheme.dense if want else scheme.collective)


def test_min_compression_never_applies_to_a_dense_scheme():
    scheme = build.scheme(make_cfg("compressor=dense", "compressor.min_compression=100"), seed=0)
    assert scheme.dense is None and not scheme.goes_dense(10, 1.0)


def test_min_compression_in_training_sends_dense_bytes(tmp_path):
    """topk at density 1 (k = d) with the rule: the trainer sends a dense allreduce's bytes, not 8d."""
    import json

    from conftest import train

    args = ["compressor=topk", "compressor.density=1.0", "compressor.density_warmup=[]", "cluster.world_size=2",
            "trainer.max_steps=1", "trainer.batch_size=8"]
    rows = {}
    for rule in ("0", "2"):
        train(tmp_path / rule, *args, f"compressor.min_compression={rule}")
        lines = [json.loads(x) for x in (tmp_path / rule / "metrics.jsonl").read_text().splitlines()]
        rows[rule] = next(r for r in lines if "comm/bytes_sent" in r)
    assert rows["0"]["density/achieved"] == rows["2"]["density/achieved"] == 1.0
    sparse_bytes, dense_bytes = rows["0"]["comm/bytes_sent"], rows["2"]["comm/bytes_sent"]
    assert sparse_bytes == 2 * dense_bytes          # P = 2: allgather sends 8d, the ring allreduce 4d


def test_16bit_values_send_six_bytes_per_entry_in_training(tmp_path):
    """The trainer's comm/bytes_sent is the executor's count: 6/8 of the fp32 bytes for a sparse scheme."""
    import json

    from conftest import train

    args = ["compressor=topk", "cluster.world_size=3", "trainer.max_steps=1", "trainer.batch_size=8"]
    sent = {}
    for values in ("fp32", "bf16"):
        train(tmp_path / values, *args, f"compressor.wire.values={values}")
        lines = [json.loads(x) for x in (tmp_path / values / "metrics.jsonl").read_text().splitlines()]
        row = next(r for r in lines if "comm/bytes_sent" in r)
        sent[values] = (row["comm/bytes_sent"], row["target/comm_s"])
    assert 8 * sent["bf16"][0] == 6 * sent["fp32"][0] and sent["bf16"][0] > 0
    assert sent["bf16"][1] < sent["fp32"][1]          # the cost model sees the smaller messages too


def test_the_iteration_model_times_dense16_as_two_byte_elements():
    from ssgd.tools.scheme_costs import scheme

    dense, dense16 = scheme("dense", 10_000), scheme("dense16", 10_000)
    assert dense16.collective.wire.values == "bf16" and dense.collective.wire.values == "fp32"
    assert dense16.collective.model_seconds(NET, 4, 10_000, [10_000] * 4) == cost.allreduce_seconds(NET, 4, 10_000, 2)
    assert dense.collective.model_seconds(NET, 4, 10_000, [10_000] * 4) == cost.allreduce_seconds(NET, 4, 10_000, 4)


# --- narrow (uint16) indices, numel <= 2^16 (issue 23 item 2) -----------------------------------------
@pytest.mark.parametrize("values", ["fp32", *HALF])
@pytest.mark.parametrize("d, index_bytes", [(65536, 2), (65537, 4), (1000, 2)])
def test_narrow_indices_round_trip_at_the_boundary(values, d, index_bytes):
    """numel = 2^16 is the largest whose indices (0 .. 65535) fit uint16; 2^16 + 1 keeps int32. The
    decoded payload equals the int32 format's, bit for bit, at the extreme indices too."""
    narrow, plain = WireFormat(values, narrow_indices=True), WireFormat(values)
    rng = np.random.default_rng(d)
    idx = sorted({0, d - 1, 32767, 32768, *map(int, rng.choice(d, 29, replace=False))})
    s = sparse_of({i: F32(v) for i, v in zip(idx, rng.standard_normal(len(idx)))}, d, narrow)
    assert narrow.entry_bytes_for(d) == index_bytes + plain.value_bytes
    buf = narrow.pack(s)
    assert buf.numel() * buf.element_size() == narrow.entry_bytes_for(d) * len(idx)
    shifted = [torch.cat([torch.zeros(1, dtype=torch.uint8), buf])[1:]] if buf.dtype == torch.uint8 else []
    for b in (buf, *shifted):                            # a block of an allgather may start anywhere
        back, want = narrow.unpack(b, d), plain.unpack(plain.pack(s), d)
        assert back.idx.tolist() == idx == want.idx.tolist() and back.idx.dtype == torch.int64
        np.testing.assert_array_equal(f32_bits(back.val.numpy()), f32_bits(want.val.numpy()))


def test_index_bytes_is_two_only_when_asked_and_in_range():
    from ssgd.comm.wire import index_bytes
    assert [index_bytes(n, True) for n in (1, 65536, 65537, 2**31 - 1)] == [2, 2, 4, 4]
    assert [index_bytes(n) for n in (1, 65536, 65537)] == [4, 4, 4]
    assert [WireFormat(v, True).entry_bytes_for(100) for v in ("fp32", "fp16", "bf16")] == [6, 4, 4]
    with pytest.raises(BadArgument):
        WireFormat("fp32", narrow_indices="yes")


@pytest.mark.parametrize("values", ["fp32", *HALF])
@pytest.mark.parametrize("P", [2, 3])
@pytest.mark.parametrize("d", [65536, 65537])
def test_allgather_with_narrow_indices_has_the_same_bits_and_counts_its_bytes(values, P, d):
    """The narrow AllGather's totals equal the int32 one's bitwise; its bytes and its cost model count
    entry_bytes_for(d) per entry (6 / 4 below 2^16 + 1, 8 / 6 above)."""
    wire = WireFormat(values)
    rng = np.random.default_rng(P + d)
    entries = [{int(i): F32(v) for i, v in zip(rng.choice(d, n, replace=False), rng.standard_normal(n))}
               for n in (17, 40, 3)[:P]]                                  # odd counts: unaligned blocks
    payloads = [sparse_of(e, d, wire) for e in entries]
    narrow = SparseAllgather(values, narrow_indices=True)
    got, logs = run_threads(narrow, payloads, net=NET)
    want, _ = run_threads(SparseAllgather(values), payloads, net=NET)
    per = (2 if d <= 65536 else 4) + wire.value_bytes                     # written out, not the function
    counts = [len(e) for e in entries]
    for r in range(P):
        np.testing.assert_array_equal(f32_bits(got[r].total.to_dense().numpy()),
                                      f32_bits(want[r].total.to_dense().numpy()))
        assert (logs[r].stats.messages, logs[r].stats.bytes) == cost.allgatherv_sent(r, [per * c for c in counts])
    assert narrow.model_seconds(NET, P, d, counts) == pytest.approx(cost.allgatherv_seconds(NET, [per * c for c in counts]))
