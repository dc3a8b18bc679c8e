"""The token-bucket link model (ssgd/perf/shaped.py) and the in-process executor's clocks on it, against hand
computations and the alpha-beta model it must reduce to."""
import pytest
import torch

from ssgd.comm.collectives.dense import DenseAllreduce
from ssgd.comm.collectives.gtopk import GTopKAllreduce
from ssgd.comm.executors.thread import run_threads
from ssgd.payload import Dense, Sparse
from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.netsim import AlphaBetaSim, ShapedSim, Unmodelled, simulator
from ssgd.perf.shaped import ShapedLink, ShapedNet

SIZES = [8 * 4**i for i in range(13)]          # the ping-pong's (ssgd.tools.pingpong)
LAT, BETA, HOST = 20e-6, 8e-9, 1e-9             # 125 MB/s of payload on the link, 1 GB/s from a full bucket
BURST, WINDOW = 200_000.0, 8192                  # a full bucket; what leaves at once (flat in a real ping-pong)


def link(burst: float = BURST, host: float = HOST) -> ShapedLink:
    return ShapedLink(latency=LAT, beta=BETA, burst=burst, host_beta=host,
                      host=((0.0, LAT), (WINDOW, LAT), (1e6, LAT + (1e6 - WINDOW) * host)))


def h(n: float) -> float:
    """The host time of n bytes on link() after the latency."""
    return max(0.0, n - WINDOW) * HOST


def test_a_full_bucket_passes_its_burst_at_host_speed_and_the_rest_at_the_rate():
    lk = link()
    assert lk.message(100_000) == pytest.approx(LAT + h(100_000))
    assert lk.message(4096) == pytest.approx(LAT)
    assert lk.message(1_000_000) == pytest.approx(LAT + (1_000_000 - BURST) * BETA)
    seconds, left = lk.transfer(100_000, BURST)
    assert left == pytest.approx(BURST - 100_000 + seconds / BETA)            # used 100 kB, got some back meanwhile
    assert lk.transfer(1_000_000, BURST)[1] == 0.0                          # drained
    assert lk.transfer(100_000, 0.0) == pytest.approx((100_000 * BETA, 0.0))  # an empty bucket: the rate
    assert lk.message(3e6) == pytest.approx(LAT + (3e6 - BURST) * BETA)     # beyond the host points: the rate wins


def test_back_to_back_messages_drain_the_bucket_and_idle_time_refills_it():
    net = ShapedNet(link(), 2)
    free, arrived = net.send(0, 150_000, 0.0)
    assert free == pytest.approx(h(150_000)) and arrived == pytest.approx(free + LAT)
    tokens = BURST - 150_000 + free / BETA
    free2, _ = net.send(0, 150_000, free)                                   # right after: 150 kB on what is left
    assert free2 - free == pytest.approx(max(h(150_000), (150_000 - tokens) * BETA))
    assert free2 - free > 2 * h(150_000)
    later = free2 + BURST * BETA                                            # long enough to refill it
    free3, _ = net.send(0, 150_000, later)
    assert free3 - later == pytest.approx(h(150_000))
    assert net.send(1, 150_000, 0.0)[0] == pytest.approx(h(150_000))       # every rank has its own bucket


@pytest.mark.parametrize("P", [2, 3, 4, 7])
@pytest.mark.parametrize("d", [1000, 2**20])
def test_without_a_burst_the_ring_allreduce_is_the_alpha_beta_one(P, d):
    """burst 0 and the host no faster than the rate: every message costs latency + n beta, as in ssgd.perf.cost;
    run_threads on the link gives the same clock as on the alpha-beta network."""
    flat = link(burst=0.0, host=BETA)
    ab = AlphaBeta(LAT, BETA)
    assert ShapedNet(flat, P).allreduce(d, 4, 0.0) == pytest.approx(cost.allreduce_seconds(ab, P, d))
    _, logs = run_threads(DenseAllreduce(), [Dense(torch.ones(d)) for _ in range(P)], net=flat)
    assert max(log.clock for log in logs) == pytest.approx(cost.allreduce_seconds(ab, P, d))


def test_the_allgatherv_gathers_sizes_first_then_steps_round_the_ring():
    net = ShapedNet(link(burst=0.0, host=BETA), 4)
    blocks = [800, 1600, 800, 800]
    sizes = 2 * (LAT + 16 * BETA)                                           # ceil(log2 4) rounds of 2 x 8 bytes
    assert net.allgatherv(blocks, 0.0) == pytest.approx(sizes + 3 * (LAT + 1600 * BETA))


def test_the_binomial_broadcast_posts_to_the_smallest_subtree_first():
    """P = 4: rank 0 sends to 1, then 2 (its link one message at a time); 2 forwards to 3 once it has the data."""
    n = 10_000
    t = n * BETA
    end = ShapedNet(link(burst=0.0, host=BETA), 4).bcast(n, 0.0)
    assert end == pytest.approx(max(t + LAT, 2 * t + LAT + t + LAT))


def test_a_sender_does_not_wait_for_a_busy_receiver():
    """Eager messages on the link: the leaf's message arrives while the root still computes, so the root's clock is
    its compute, then the merge, not compute + the message. Compute is given per step (before each operation)."""
    k, d = 4, 100
    payloads = [Sparse(torch.arange(k) + 10 * r, torch.ones(k), d) for r in range(2)]
    lk = link()
    message = lk.message(8 * k)
    busy = 10 * message
    # rank 0: compute busy, Recv, compute 0, Bcast, compute 0; rank 1: Send, Bcast, compute 0
    _, logs = run_threads(GTopKAllreduce(), payloads, net=lk, compute=[[busy, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert logs[1].clock == pytest.approx(busy + message)               # waited for the broadcast only
    assert logs[0].clock < busy + 2 * message


def test_compute_values_must_cover_every_rank_and_step():
    payloads = [Dense(torch.ones(4)) for _ in range(2)]
    _, logs = run_threads(DenseAllreduce(), payloads, net=AlphaBeta(0.0, 0.0), compute=[[1.0, 2.0], [3.0, 4.0]])
    assert [log.clock for log in logs] == [5.0, 7.0]      # the allreduce ends when the later rank posts it (3)
    with pytest.raises(ValueError, match="compute for 1 ranks"):
        run_threads(DenseAllreduce(), payloads, compute=[[0.0, 0.0]])
    with pytest.raises(ValueError, match="more steps"):
        run_threads(DenseAllreduce(), payloads, compute=[[0.0], [0.0]])


def test_a_pingpong_gives_back_the_link_it_was_measured_on():
    rate = 1 / BETA / 0.95                      # wire bytes per second: 5 % of a frame is headers
    lk = link(burst=262_144 * 0.95)
    seconds = [lk.message(n) for n in SIZES]
    got = ShapedLink.from_pingpong(SIZES, seconds, 262_144, rate)
    assert got.latency == pytest.approx(LAT) and got.beta == pytest.approx(BETA)
    assert got.burst == pytest.approx(262_144 * 0.95)
    for n in (1e3, 5e4, 1e5, 1e6, 1e8):
        assert got.message(n) == pytest.approx(lk.message(n), rel=1e-6)


@pytest.mark.parametrize("bad", [dict(latency=-1.0), dict(beta=float("nan")), dict(host=()),
                                 dict(host=((10.0, 1.0), (5.0, 2.0)))])
def test_bad_links_are_refused(bad):
    fields = dict(latency=LAT, beta=BETA, burst=BURST, host=((0.0, LAT), (1e6, 1e-3)), host_beta=HOST)
    with pytest.raises(ValueError, match="ShapedLink"):
        ShapedLink(**{**fields, **bad})
    with pytest.raises(ValueError, match="from_pingpong"):
        ShapedLink.from_pingpong([8, 16], [1e-5, 1e-5], 262_144, 125e6)


def test_the_simulator_is_picked_by_the_kind_of_network():
    class Slower(AlphaBeta):
        pass

    assert type(simulator(None, 2)) is Unmodelled and type(simulator(AlphaBeta(1.0, 0.0), 2)) is AlphaBetaSim
    assert type(simulator(Slower(1.0, 0.0), 2)) is AlphaBetaSim and type(simulator(link(), 2)) is ShapedSim
    with pytest.raises(TypeError, match="no network simulator for float"):
        simulator(1.0, 2)


def test_the_simulators_clocks_by_hand():
    """Alpha-beta: a message ends at max(both clocks) + alpha + n beta, a collective at max(all) + its closed form;
    no network: only compute moves a clock; the shaped links: the sender is free once its bytes have left."""
    ab = AlphaBetaSim(AlphaBeta(1.0, 0.5), 3)
    ab.compute(0, 2.0)
    ab.send(0, 1, 4)
    assert ab.clocks == [5.0, 5.0, 0.0]
    ab.bcast(2)
    assert ab.clocks == [5.0 + 2 * 2.0] * 3                     # ceil(log2 3) rounds of 1 + 2 x 0.5
    free = Unmodelled(2)
    free.compute(1, 3.0)
    free.send(1, 0, 100)
    free.allgatherv([8, 8])
    assert free.clocks == [0.0, 3.0]
    sh = ShapedSim(link(), 2)
    sh.compute(1, 1.0)
    sh.send(0, 1, 150_000)
    assert sh.clocks == pytest.approx([h(150_000), 1.0])          # arrived before the receiver was ready
