"""Cost models against the gTop-k paper's closed forms evaluated by hand (Shi et al., ICDCS 2019,
arXiv:1901.04359; forms of the hclhkbu/gtopkssgd README, as plotted by `plot_allreduce_comparison` in
scripts/icdcs2019/communication.py) and hand-computed cases."""
import math

import pytest

from ssgd.perf import cost
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.errors import ConfigError

GBE = AlphaBeta(alpha=0.436e-3, beta=9e-9)      # gTop-k paper's 1 GbE fit (`plot_p2platency`, same script)
M = 25 * 2**20                                  # m = 25M parameters
K = int(M * 0.001)                               # k = 26,214

# the closed forms at m = 25 * 2^20, rho = 0.001 (k = 26,214), evaluated by hand, milliseconds:
# P -> (dense 2(P-1)a + 2(P-1)/P m b, Top-k a logP + 2(P-1)k b, gTop-k 2a logP + 4k logP b; b per element)
TABLE = {4: (1418, 6.5, 9.3), 8: (1658, 14.5, 13.9), 16: (1783, 30.1, 18.6), 32: (1856, 60.7, 23.2),
         64: (1913, 121.5, 27.9), 128: (1983, 242.8, 32.5)}


@pytest.mark.parametrize("P", sorted(TABLE))
def test_paper_table(P):
    dense, topk, gtopk = TABLE[P]
    assert K == 26214
    assert cost.dense_seconds(GBE, P, M) * 1e3 == pytest.approx(dense, abs=0.6)
    assert cost.paper_dense_seconds(GBE, P, M) * 1e3 == pytest.approx(dense, abs=0.6)
    assert cost.gtopk_seconds(GBE, P, K) * 1e3 == pytest.approx(gtopk, abs=0.06)
    assert cost.paper_topk_seconds(GBE, P, K) * 1e3 == pytest.approx(topk, abs=0.06)


def test_ring_allgather_has_the_papers_bandwidth_term_and_a_ring_latency():
    P = 32
    ours = cost.sparse_allgather_seconds(GBE, [K] * P)
    assert ours == pytest.approx((P - 1) * GBE.alpha + 2 * (P - 1) * K * 4 * GBE.beta)
    assert ours - cost.paper_topk_seconds(GBE, P, K) == pytest.approx((P - 1 - math.log2(P)) * GBE.alpha)


def test_single_worker_costs_nothing():
    assert cost.dense_seconds(GBE, 1, 1000) == 0
    assert cost.gtopk_seconds(GBE, 1, 10) == 0
    assert cost.sparse_allgather_seconds(GBE, [10]) == 0
    assert cost.allreduce_sent(0, 1, 1000) == (0, 0)
    assert cost.gtopk_sent(0, 1, 10) == (0, 0)


def test_ring_allreduce_counts_with_uneven_chunks():
    # n = 10 over P = 4: chunks 3, 3, 2, 2; rank 0 skips chunk 1 (reduce-scatter) and 2 (allgather)
    assert cost.ring_chunks(10, 4) == [3, 3, 2, 2]
    assert cost.allreduce_sent(0, 4, 10) == (6, 4 * (20 - 3 - 2))
    assert cost.allreduce_sent(3, 4, 10) == (6, 4 * (20 - 3 - 3))
    assert cost.allreduce_seconds(AlphaBeta(1.0, 0.5), 4, 10) == 6 * (1.0 + 12 * 0.5)


def test_binomial_broadcast_schedule_for_eight():
    children = {r: cost.bcast_children(r, 8) for r in range(8)}
    assert children == {0: [1, 2, 4], 1: [3, 5], 2: [6], 3: [7], 4: [], 5: [], 6: [], 7: []}
    assert cost.bcast_children(0, 5) == [1, 2, 4] and cost.bcast_children(1, 5) == [3]


def test_tree_rounds():
    assert cost.rounds(6) == 3 and cost.rounds(8) == 3 and cost.rounds(9) == 4 and cost.rounds(1) == 0


@pytest.mark.parametrize("key,value", [("alpha", -1.0), ("beta", -1e-9), ("alpha", float("nan"))])
def test_negative_network_constants_are_config_errors(key, value):
    with pytest.raises(ConfigError, match=f"cluster.network.{key}"):
        AlphaBeta(**{"alpha": 1e-3, "beta": 1e-9, key: value})
