"""Error feedback conserves the gradient exactly: u == sent + residual, for every scheme in conf/.

`sent` is what counted as sent after the collective (for gTop-k: the local entries that reached the
global set). It is checked twice: as the package reports it (`Reduced.sent`), and as `applied` works it
out from the specification alone, so that a collective that reports more (or less) than it applied
fails here. Checked in float64 so that the check itself cannot round.
"""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from conftest import CONF, group_options, make_cfg
from ssgd.run import build
from ssgd.comm.collectives.gtopk import GTopKAllreduce
from ssgd.comm.collectives.oktopk import OkTopkAllreduce
from ssgd.comm.executors.thread import run_threads
from ssgd.loop.sync import RankCompression

SCHEMES = group_options("compressor")


def schemes_where(key: str, target: str) -> list[str]:
    """The schemes of conf/compressor/ whose `key` node instantiates `target`."""
    return [n for n in SCHEMES if OmegaConf.load(CONF / "compressor" / f"{n}.yaml")[key]["_target_"] == target]


RESIDUAL_SCHEMES = schemes_where("memory", "ssgd.compress.memory.ResidualMemory")
ALLGATHER_SCHEMES = schemes_where("collective", "ssgd.comm.collectives.allgather.SparseAllgather")


def dense64(payload, d):
    return payload.to_dense().double()


def applied(collective, payload, total) -> torch.Tensor:
    """float64 [d]: what this rank's payload put into the aggregate, from the specification only (not
    from `Reduced.sent` or `Reduced.support`). Dense allreduce and AllGather sum every rank's whole
    payload. gTop-k's released rule (Shi et al., ICDCS 2019, Algorithm 3; the released code's
    `add_residuals`): the rank's entries whose index is in the global set I_g, the support of the
    aggregated result `total`, and none other; Ok-Topk's likewise."""
    x = payload.to_dense().double()
    if not isinstance(collective, (GTopKAllreduce, OkTopkAllreduce)):
        return x
    # Ok-Topk (Li and Hoefler, PPoPP 2022, Algorithm 2): the residual keeps what did not reach the global result,
    # so the rank's entries at the result's indices count, as in gTop-k's released rule
    assert getattr(collective, "residual", "released") == "released", \
        "this oracle is the released rule (strict: test_gtopk_residual.py)"
    in_global = torch.zeros(x.numel(), dtype=torch.bool)
    in_global[total.idx] = True
    return torch.where(in_global, x, torch.zeros_like(x))


def conservation_round(scheme, syncs, grads, density):
    d = grads[0].numel()
    us, payloads = [], []
    for sync, g in zip(syncs, grads):
        e_before = sync.memory.e.clone() if hasattr(sync.memory, "e") else torch.zeros(d)
        _, payload = sync.compress(g.clone(), density)
        us.append((e_before + g).double())        # u = g + e (the float32 sum the scheme must use)
        payloads.append(payload)
    results, _ = run_threads(scheme.collective, payloads)
    total_sent = torch.zeros(d, dtype=torch.float64)
    for sync, u, payload, res in zip(syncs, us, payloads, results):
        sent = dense64(res.sent(payload), d)
        want = applied(scheme.collective, payload, res.total)
        sync.settle(payload, res)
        residual = sync.memory.e.double() if hasattr(sync.memory, "e") else torch.zeros(d, dtype=torch.float64)
        assert torch.equal(sent + residual, u), "error feedback lost or invented gradient"
        assert torch.equal(sent, want), "Reduced.sent is not what the collective applied"
        assert torch.equal(want + residual, u), "the residual does not keep what was not applied"
        total_sent += sent
    return total_sent, results


@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("P", [1, 3, 4])
def test_conservation_over_several_steps(name, P):
    scheme = build.scheme(make_cfg(f"compressor={name}"), seed=0)
    d = 257
    syncs = [RankCompression(scheme, r, d) for r in range(P)]
    gen = torch.Generator().manual_seed(P)
    for step in range(4):
        grads = [torch.randn(d, generator=gen) * (r + 1) for r in range(P)]
        conservation_round(scheme, syncs, grads, scheme.density(step))


def test_the_derived_scheme_lists():
    assert {"topk", "gtopk", "gaussiank", "randomk"} <= set(RESIDUAL_SCHEMES) and "dense" not in RESIDUAL_SCHEMES
    assert {"topk", "randomk", "gaussiank"} <= set(ALLGATHER_SCHEMES) and "gtopk" not in ALLGATHER_SCHEMES


@pytest.mark.parametrize("name", RESIDUAL_SCHEMES)
def test_sparse_schemes_keep_a_residual(name):
    """A scheme that sends less than everything must keep the rest (guards against e = 0)."""
    scheme = build.scheme(make_cfg(f"compressor={name}"), seed=0)
    syncs = [RankCompression(scheme, r, 1000) for r in range(2)]
    gen = torch.Generator().manual_seed(0)
    conservation_round(scheme, syncs, [torch.randn(1000, generator=gen), torch.randn(1000, generator=gen)], 0.01)
    assert all(float(s.memory.e.abs().sum()) > 0 for s in syncs)


ADVERSARIAL = {
    "zeros": lambda d: torch.zeros(d),
    "ties": lambda d: torch.ones(d),
    "alternating_ties": lambda d: torch.tensor([(-1.0) ** i for i in range(d)]),
    "one_spike": lambda d: torch.zeros(d).index_fill_(0, torch.tensor([d // 2]), 1e30),
    "subnormal": lambda d: torch.full((d,), 1e-40),
    "huge_range": lambda d: torch.logspace(-30, 30, d),
}


@pytest.mark.parametrize("name", SCHEMES)
@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
@pytest.mark.parametrize("d", [1, 5, 64])
def test_conservation_adversarial(name, case, d):
    scheme = build.scheme(make_cfg(f"compressor={name}"), seed=0)
    syncs = [RankCompression(scheme, r, d) for r in range(3)]
    for density in (0.001, 0.5, 1.0):
        conservation_round(scheme, syncs, [ADVERSARIAL[case](d)] * 3, density)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(SCHEMES), P=st.integers(1, 6), d=st.integers(1, 300),
       density=st.floats(1e-3, 1.0), seed=st.integers(0, 2**31 - 1), scale=st.floats(1e-20, 1e20))
def test_conservation_random(name, P, d, density, seed, scale):
    scheme = build.scheme(make_cfg(f"compressor={name}"), seed=0)
    syncs = [RankCompression(scheme, r, d) for r in range(P)]
    gen = torch.Generator().manual_seed(seed)
    for _ in range(2):
        conservation_round(scheme, syncs, [torch.randn(d, generator=gen) * scale for _ in range(P)], density)


@pytest.mark.parametrize("name", ALLGATHER_SCHEMES)
def test_allgather_schemes_send_their_whole_payload(name):
    """With AllGather aggregation the aggregate is exactly the sum of what every rank sent."""
    scheme = build.scheme(make_cfg(f"compressor={name}"), seed=0)
    syncs = [RankCompression(scheme, r, 500) for r in range(4)]
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(500, generator=gen) for _ in range(4)]
    total_sent, results = conservation_round(scheme, syncs, grads, 0.02)
    assert torch.allclose(results[0].total.to_dense().double(), total_sent, rtol=1e-6, atol=1e-6)
