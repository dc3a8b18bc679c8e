"""analysis.line_condition: the shape condition behind the Top-k paper's (1 - k/d)^2 bound (issue 26)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import paper_script

an = paper_script("analysis")


def error_share(u: np.ndarray, k: int) -> float:
    s = np.sort(u.astype(np.float64) ** 2)
    return float(s[:-k].sum() / s.sum())


def test_line_profile_by_hand() -> None:
    d, k = 10, 3
    u = np.sqrt(np.arange(d, 0, -1, dtype=np.float64) - 1)  # s_i = d - i: exactly the line through (k, s_k), (d, 0)
    c = an.line_condition(u, k)
    assert c["holds"] and c["tail_over_line"] == pytest.approx(1.0) and c["head_over_line"] == pytest.approx(1.0)
    assert error_share(u, k) == pytest.approx((d - k) * (d - k - 1) / (d * (d - 1)))  # the derived bound, attained


def test_flat_u_fails_and_breaks_the_bound() -> None:
    d, k = 1000, 10
    c = an.line_condition(np.ones(d), k)
    assert not c["holds"] and c["tail_over_line"] == pytest.approx(2 * (d - k) / (d - k - 1))
    assert error_share(np.ones(d), k) > (1 - k / d) ** 2


@pytest.mark.parametrize("rho", [0.001, 0.01, 0.1, 0.3])
def test_holds_on_bell_shaped_samples(rho: float) -> None:
    r = np.random.default_rng(1)
    d = 20_000
    k = int(rho * d)
    for u in (r.standard_normal(d), r.laplace(size=d), r.standard_t(3, d)):
        assert an.line_condition(u, k)["holds"]


def test_condition_implies_the_bound_on_random_vectors() -> None:
    """The derivation, checked: wherever the condition holds the error share is within (1 - k/d)^2; the
    two-level vectors (a flat block then a drop) make it fail often, so both branches are exercised."""
    r = np.random.default_rng(2)
    held = failed = 0
    for _ in range(400):
        d = int(r.integers(20, 400))
        k = int(r.integers(1, d - 2))
        hi = int(r.integers(1, d))
        u = np.where(np.arange(d) < hi, 1.0, r.uniform(0, 1)) * r.uniform(0.5, 1.5, d) ** r.integers(0, 3)
        c = an.line_condition(u, k)
        if c["holds"]:
            held += 1
            assert error_share(u, k) <= (1 - k / d) ** 2 + 1e-12
        else:
            failed += 1
    assert held > 20 and failed > 20


def test_bad_k() -> None:
    with pytest.raises(ValueError, match="k must be"):
        an.line_condition(np.ones(5), 0)


def test_mostly_zero_u_holds_trivially() -> None:
    u = np.zeros(100)
    u[:5] = [3.0, -2.0, 1.0, 0.5, -0.1]
    c = an.line_condition(u, 10)  # s_k = 0: Top-k keeps every non-zero entry
    assert c["holds"] and c["tail_over_line"] == 0.0 and error_share(u, 10) == 0.0
