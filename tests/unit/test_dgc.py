"""DGC sampling (hclhkbu/GaussianK-SGD compression.py, `DGCSamplingCompressor`): the selection equals the
released algorithm's on the same sample, thresholds known by construction, and the Compressor contract
(own generator, u untouched, copies)."""
import pytest
import torch

from ssgd.compress.dgc import DGCSampling, sample_size, sample_threshold


def released_dgcsampling(u: torch.Tensor, density: float, positions: torch.Tensor, k_sample: int) -> torch.Tensor:
    """GaussianK-SGD `DGCSamplingCompressor.compress`, written plainly (abs, topk of the sample,
    k-th value, strict >, exact top-k of the survivors above 4k/3), given the sampled positions."""
    abs_values = torch.abs(u)
    k = max(int(u.numel() * density), 1)
    tmpvalues, _ = torch.topk(abs_values[positions], k=k_sample)     # sorted, descending
    thres = tmpvalues[k_sample - 1]
    indexes = (abs_values > thres).nonzero().view(-1)
    if len(indexes) > 4 * k / 3:
        _, tmpindexes = torch.topk(abs_values[indexes], k=k)
        indexes = indexes[tmpindexes]
    return indexes


def vector(dist: str, d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dist == "normal":
        return torch.randn(d, generator=g)
    if dist == "laplace":
        return torch.empty(d).exponential_(generator=g) - torch.empty(d).exponential_(generator=g)
    return torch.randn(d, generator=g) * 0.1 + 2.0          # shifted: every |u| close to 2


def as_set(idx: torch.Tensor) -> set[int]:
    return set(idx.tolist())


@pytest.mark.parametrize("scale_k", [False, True])
@pytest.mark.parametrize("dist", ["normal", "laplace", "shifted"])
@pytest.mark.parametrize("density", [0.001, 0.004, 0.015625, 0.3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_selection_equals_the_released_algorithm_on_the_same_sample(seed, density, dist, scale_k):
    d = 20_000
    u = vector(dist, d, seed)
    k = max(int(d * density), 1)
    size = min(d, max(int(0.01 * d), k))                       # the sample size documented in dgc.py
    k_sample = max(int(size * density), 1) if scale_k else k
    positions = torch.randint(d, (size,), generator=torch.Generator().manual_seed(100 + seed))
    s = DGCSampling(torch.Generator().manual_seed(100 + seed), scale_k=scale_k).compress(u, density)
    assert as_set(s.idx) == as_set(released_dgcsampling(u, density, positions, k_sample))
    assert torch.equal(s.val, u[s.idx]) and s.numel == d


def levels(d: int, high: int, seed: int) -> torch.Tensor:
    """|u| = 1 everywhere (random signs) except `high` positions with distinct |u| in [5, 6)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0)
    pos = torch.randperm(d, generator=g)[:high]
    u[pos] = (5.0 + torch.arange(high) / high) * u[pos]
    return u


@pytest.mark.parametrize("seed", range(5))
def test_known_threshold_few_survivors_are_all_sent(seed):
    """Released k on a 1 % sample: the k-th largest of a 100-entry sample of mostly ones is 1, so
    thr = 1 and exactly the 50 entries above it pass (|u| == thr is not sent); 50 <= 4k/3: no trim."""
    d, density = 10_000, 0.01                                 # k = 100, sample 100 entries
    u = levels(d, 50, seed)
    s = DGCSampling(torch.Generator().manual_seed(seed)).compress(u, density)
    assert as_set(s.idx) == as_set(torch.nonzero(u.abs() > 1).view(-1))
    assert len(s) == 50                                       # fewer than k: nothing tops the count up


@pytest.mark.parametrize("seed", range(5))
def test_known_threshold_many_survivors_are_trimmed_to_the_exact_top_k(seed):
    d, density = 10_000, 0.01                                 # 500 pass thr = 1 > 4k/3 = 133
    u = levels(d, 500, seed)
    s = DGCSampling(torch.Generator().manual_seed(seed)).compress(u, density)
    assert as_set(s.idx) == as_set(torch.topk(u.abs(), 100).indices)


def test_known_threshold_scaled_k():
    """scale_k: k_s = int(|S| * density) = 100 of a 10,000-entry sample; half the entries are at
    |u| = 1, 1,000 above it (about 10 of them sampled, far below 100): thr = 1, 1,000 sent (< k)."""
    d, density = 1_000_000, 0.01
    g = torch.Generator().manual_seed(0)
    u = torch.where(torch.rand(d, generator=g) < 0.5, 1.0, 0.5)
    high = torch.randperm(d, generator=g)[:1000]
    u[high] = 3.0 + torch.rand(1000, generator=g)
    s = DGCSampling(torch.Generator().manual_seed(0), scale_k=True).compress(u, density)
    assert as_set(s.idx) == as_set(high)


@pytest.mark.parametrize("scale_k", [False, True])
@pytest.mark.parametrize("density", [0.0005, 0.001, 0.01])
def test_result_is_a_top_set_of_bounded_size(density, scale_k):
    d = 100_000
    u = torch.randn(d, generator=torch.Generator().manual_seed(3))
    k = max(int(d * density), 1)
    c = DGCSampling(torch.Generator().manual_seed(4), scale_k=scale_k)
    for _ in range(5):
        s = c.compress(u, density)
        n = len(s)
        assert 3 * n <= 4 * k or n == k
        assert n == 0 or as_set(s.idx) == as_set(torch.topk(u.abs(), n).indices)   # tie-free data
        if not scale_k and density < 0.0075:     # released k: ~10 k pass the threshold, always trimmed
            assert n == k


def test_scaled_k_hits_the_target_on_average_on_normal_data():
    d, density = 1_000_000, 0.001
    u = torch.randn(d, generator=torch.Generator().manual_seed(5))
    c = DGCSampling(torch.Generator().manual_seed(6), scale_k=True)
    counts = [len(c.compress(u, density)) for _ in range(20)]
    assert len(set(counts)) > 1                                  # the count varies with the sample
    assert 0.7 < sum(counts) / len(counts) / (d * density) < 1.2


def test_same_generator_state_same_selection_and_the_state_advances():
    u = torch.randn(50_000, generator=torch.Generator().manual_seed(7))
    a = DGCSampling(torch.Generator().manual_seed(8), scale_k=True)
    b = DGCSampling(torch.Generator().manual_seed(8), scale_k=True)
    first = [a.compress(u, 0.002).idx for _ in range(3)]
    assert all(torch.equal(x, b.compress(u, 0.002).idx) for x in first)
    assert len({tuple(sorted(x.tolist())) for x in first}) > 1    # each call draws a new sample
    state = a.state_dict()
    x = a.compress(u, 0.002).idx
    a.load_state_dict(state)
    assert torch.equal(x, a.compress(u, 0.002).idx)


def test_leaves_u_and_the_global_rng_alone_and_values_are_copies():
    u = torch.randn(30_000, generator=torch.Generator().manual_seed(9))
    before, rng = u.clone(), torch.get_rng_state()
    s = DGCSampling(torch.Generator().manual_seed(0)).compress(u, 0.001)
    assert torch.equal(u, before) and torch.equal(torch.get_rng_state(), rng)
    s.val.fill_(0.0)
    assert torch.equal(u, before)


def test_zero_vector_sends_nothing():
    """thr = 0 and the test is strict (as released): an all-zero u selects no entry."""
    s = DGCSampling(torch.Generator().manual_seed(0)).compress(torch.zeros(1000), 0.01)
    assert len(s) == 0 and s.idx.dtype == torch.int64 and s.val.dtype == torch.float32


def test_sample_size_and_threshold():
    assert sample_size(1_000_000, 1000, 0.01) == 10_000
    assert sample_size(1_000_000, 15_625, 0.01) == 15_625      # density > fraction: at least k
    assert sample_size(50, 1, 0.01) == 1 and sample_size(10, 10, 0.01) == 10
    u = torch.arange(1000, dtype=torch.float32) - 500           # |u| = 500, 499, ..., 0, ..., 499
    g, ref = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    pos = torch.randint(1000, (40,), generator=ref)
    assert sample_threshold(u, 40, 3, g) == float(u[pos].abs().sort(descending=True).values[2])


def test_bad_construction():
    with pytest.raises(ValueError, match="own torch.Generator"):
        DGCSampling(None)
    with pytest.raises(ValueError, match="sample_fraction"):
        DGCSampling(torch.Generator(), sample_fraction=0.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_selects_what_the_cpu_selects():
    u = torch.randn(200_000, generator=torch.Generator().manual_seed(10))
    cpu = DGCSampling(torch.Generator().manual_seed(11)).compress(u, 0.001)
    gpu = DGCSampling(torch.Generator().manual_seed(11)).compress(u.cuda(), 0.001)
    assert gpu.idx.is_cuda and as_set(gpu.idx.cpu()) == as_set(cpu.idx)


@pytest.mark.parametrize("nan", [False, True])
@pytest.mark.parametrize("density", [0.001, 0.004, 0.02])
def test_large_vectors_through_the_block_peaks_equal_the_released_algorithm(density, nan):
    """d >= 65,536: the survivors are counted through block peaks, and where those prove more than 4k/3
    (the released k at density < 1 %) the exact top-k comes from the same peaks; a NaN disables that."""
    d = 300_001
    u = vector("laplace", d, 7)
    if nan:
        u[[5, 70_000, d - 1]] = float("nan")
    k = max(int(d * density), 1)
    size = min(d, max(int(0.01 * d), k))
    positions = torch.randint(d, (size,), generator=torch.Generator().manual_seed(9))
    s = DGCSampling(torch.Generator().manual_seed(9)).compress(u, density)
    assert as_set(s.idx) == as_set(released_dgcsampling(u, density, positions, k))
    assert torch.equal(s.val, u[s.idx]) and not bool(s.val.isnan().any())
