"""Predictive distributions: the Gittins rank against brute force and hand-checked cases, the risk score,
the quantile fit, a re-predicted distribution."""

from __future__ import annotations

import numpy as np
import pytest

from lenpred.sched.dists import LengthDist, cvar, from_quantiles, rescaled


def brute_rank(points: np.ndarray, a: float, step: float = 0.01) -> float:
    """inf over a dense grid of D of E[min(L-a, D) | L > a] / P(L-a <= D | L > a), from the pmf."""
    r = points[points > a] - a
    grid = np.arange(step, r.max() + 1.0, step)
    p = (r[None, :] <= grid[:, None]).mean(axis=1)
    e = np.minimum(r[None, :], grid[:, None]).mean(axis=1)
    ok = p > 0
    return float((e[ok] / p[ok]).min())


def test_gittins_rank_of_a_hand_checked_wide_prompt() -> None:
    d = LengthDist([10, 500, 500])  # a third of its samples short
    assert d.rank(0) == pytest.approx(30.0)  # quantum D=10: E[min]=10, P=1/3
    assert d.rank(5) == pytest.approx(15.0)  # (5 + 2*5) / 1
    assert d.rank(10) == pytest.approx(490.0)  # survived the short mass: only 500 is left
    assert LengthDist([300]).rank(120) == pytest.approx(180.0)  # a known size: remaining = SRPT


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gittins_rank_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pts = np.round(rng.lognormal(5.0, 0.8, 12))
    d = LengthDist(pts)
    for a in (0, 7, int(np.median(pts)), int(pts.max()) - 1):
        assert d.rank(a) == pytest.approx(brute_rank(np.sort(pts), a), rel=2e-3, abs=0.02)


def test_gittins_rank_of_a_geometric_is_its_mean_at_every_age() -> None:
    # memoryless: the index of a geometric length (P(L = k) = p (1-p)^(k-1)) is constant, rank = E[L] = 1/p;
    # equal-weight points with each k repeated in proportion to its probability
    p, n = 0.1, 20000
    counts = np.round(n * p * (1 - p) ** np.arange(120)).astype(int)
    d = LengthDist(np.repeat(np.arange(1, 121), counts))
    for a in (0, 10, 20):
        assert d.rank(a) == pytest.approx(1 / p, rel=0.02)


def test_rank_past_every_point_assumes_uniform_up_to_the_cap() -> None:
    d = LengthDist([10, 20], cap=1024)
    assert d.rank(20) == pytest.approx((1024 - 20) / 2)
    assert LengthDist([10, 20]).rank(40) == 40.0  # no cap: as long again as it ran


def test_risk_is_mean_plus_beta_cvar() -> None:
    d = LengthDist(np.arange(1, 11) * 10.0)  # 10..100
    assert cvar(np.arange(1, 11) * 10.0, 0.9) == pytest.approx(100.0)
    assert cvar(np.arange(1, 11) * 10.0, 0.8) == pytest.approx(95.0)
    assert cvar(np.arange(1, 11) * 10.0, 0.85) == pytest.approx((100 + 0.5 * 90) / 1.5)
    assert d.risk(0, 0.9, 0.5) == pytest.approx(55.0 + 0.5 * 100.0)
    assert d.risk(50, 0.9, 0.0) == pytest.approx(30.0)  # remaining 10..50 given L > 50


def test_quantile_fit_reproduces_a_normal_and_a_clipped_q10() -> None:
    from scipy.stats import norm

    d = from_quantiles(100 - 1.2816 * 40, 100, 100 + 1.2816 * 40, cap=1024)
    lv = (np.arange(16) + 0.5) / 16
    u0 = norm.cdf((1 - 100) / 40)  # N(100, 40) given L >= 1
    assert d.x == pytest.approx(100 + 40 * norm.ppf(u0 + lv * (1 - u0)), abs=0.01)
    lo = from_quantiles(0.0, 50.0, 150.0, cap=120)  # q10 clipped at 0: the upper scale is used both ways
    sd = 100 / 1.2816
    u1 = norm.cdf((1 - 50) / sd)  # the mass below 1 token is conditioned away, not piled on 1
    want = np.minimum(50 + sd * norm.ppf(u1 + lv * (1 - u1)), 120)
    assert lo.x == pytest.approx(want, abs=0.01)
    assert lo.x.min() > 1.0 and lo.x.max() == 120.0


def test_a_repredicted_distribution_keeps_its_shape_from_where_it_was_made() -> None:
    base = LengthDist([50, 100, 200])
    r = rescaled(base, 40, 10.0)
    assert r.x == pytest.approx([45.0, 50.0, 60.0])
