"""alpha/beta fitting on synthetic timings with known constants."""
import random

import pytest

from ssgd.perf.alphabeta import AlphaBeta, fit_alpha_beta

SIZES = [8 * 4**i for i in range(12)]          # 8 B .. 32 MiB


@pytest.mark.parametrize("alpha,beta", [(0.436e-3, 9e-9), (1.6e-6, 1.35e-10), (45.25e-6, 1.0667e-9)])
def test_exact_timings_give_back_the_constants(alpha, beta):
    fit = fit_alpha_beta(SIZES, [alpha + n * beta for n in SIZES])
    assert fit.alpha == pytest.approx(alpha, rel=1e-9) and fit.beta == pytest.approx(beta, rel=1e-9)


def test_noisy_timings_are_fitted_within_the_noise():
    rng = random.Random(0)
    alpha, beta = 0.436e-3, 9e-9
    times = [(alpha + n * beta) * (1 + rng.uniform(-0.05, 0.05)) for n in SIZES for _ in range(5)]
    fit = fit_alpha_beta([n for n in SIZES for _ in range(5)], times)
    assert fit.alpha == pytest.approx(alpha, rel=0.05) and fit.beta == pytest.approx(beta, rel=0.05)


def test_small_messages_fix_alpha_despite_large_ones():
    """An unweighted fit lets the 32 MiB points swamp alpha (it comes out negative here)."""
    alpha, beta = 2e-6, 1e-10
    times = [alpha + n * beta for n in SIZES]
    times[-1] *= 1.02                                          # 2 % noise on the largest message only
    fit = fit_alpha_beta(SIZES, times)
    assert fit.alpha == pytest.approx(alpha, rel=0.05) and fit.beta == pytest.approx(beta, rel=0.05)


def test_constants_stay_non_negative():
    fit = fit_alpha_beta([10, 1000, 100000], [1e-3, 1e-3, 1e-3])   # flat: beta would be ~0 or negative
    assert fit.alpha > 0 and fit.beta >= 0
    assert isinstance(fit, AlphaBeta)


def test_bad_input_is_rejected():
    with pytest.raises(ValueError):
        fit_alpha_beta([8, 8], [1e-6, 1e-6])
    with pytest.raises(ValueError):
        fit_alpha_beta([8, 16], [1e-6, 0.0])


def test_regimes_fit_recovers_the_asymptote_of_a_token_bucket_link():
    """A tbf-shaped link: messages up to the burst leave at host speed, longer ones pay the rate on
    what exceeds the burst. The one-line fit bends beta; the regime fit recovers alpha and the slope."""
    from ssgd.perf.alphabeta import fit_alpha_beta_regimes

    alpha, beta, burst, host = 3e-5, 8e-9, 262144, 1e-10
    sizes = [8, 128, 2048, 8192, 32768, 131072, 524288, 2**21, 2**23, 2**25, 2**27]
    times = [alpha + min(n, burst) * host + max(n - burst, 0) * beta for n in sizes]
    fit = fit_alpha_beta_regimes(sizes, times)
    assert fit.beta == pytest.approx(beta, rel=1e-9)
    assert fit.alpha == pytest.approx(alpha + (128 + 2048) / 2 * host, rel=1e-12)   # median of the 4 sizes <= 8 KiB
    naive = fit_alpha_beta(sizes, times)
    assert abs(naive.beta - beta) / beta > 0.05                  # what the regime fit is for


def test_regimes_fit_refuses_too_few_points():
    from ssgd.perf.alphabeta import fit_alpha_beta_regimes

    with pytest.raises(ValueError, match="distinct sizes"):
        fit_alpha_beta_regimes([8, 2**22], [1e-5, 1e-2])
