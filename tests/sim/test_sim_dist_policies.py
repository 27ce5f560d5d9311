"""Distribution-aware and attained-service policies: the Gittins rank against brute force, hand-checkable
traces (SJF starves a wide prompt's short sample, Gittins does not; preemptions counted), the other
policies' keys, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lenpred.errors import ConfigError, DataError, LenpredError
from lenpred.predictions import Predictions
from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.dists import LengthDist, cvar, from_quantiles, other_samples_table, rescaled
from lenpred.sim.engine import Simulator
from lenpred.sim.policies import LEVEL, NEVER, make_queue_policy
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request


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


def step_profile(max_batch: int = 1) -> LatencyProfile:
    """1 ms per prefill batch and per decode step whatever their size; KV transfers ~free."""
    return LatencyProfile(name="step", prefill=(0.001, 0.0, 0.0), decode=(0.001, 0.0, 0.0), kv_bytes_per_token=1,
                          kv_capacity_tokens=100_000, max_batch=max_batch, max_prefill_tokens=4096)


def wide_and_stream(n_stream: int) -> list[Request]:
    """rid 0..n-1: a stream predicted (and truly) 100 tokens, one every 50 ms from t = 0; the last rid: a
    wide prompt's *short* sample (20 tokens) predicted 500, its distribution a third 20, two thirds 800."""
    reqs = [Request(i, 0.05 * i, 10, 100, 100.0, dist=LengthDist([100])) for i in range(n_stream)]
    reqs.append(Request(n_stream, 0.0105, 10, 20, 500.0, dist=LengthDist([20, 800, 800])))
    return reqs


def run(reqs: list[Request], queue: str, **kw: object) -> Simulator:
    sim = Simulator(reqs, ClusterConfig(n_prefill=1, n_decode=1, link_gbps=1e6), PolicyConfig(queue=queue, **kw),
                    profile=step_profile(), check_invariants=True)
    sim.run()
    return sim


def test_sjf_starves_the_wide_prompts_short_sample_and_gittins_does_not() -> None:
    n = 10  # each stream request takes ~0.1 s of a one-slot decode instance: arrivals every 0.05 s overload it
    sjf = run(wide_and_stream(n), "sjf")
    wide = next(r for r in sjf.requests if r.rid == n)
    assert all(wide.t_finish > r.t_finish for r in sjf.requests if r.rid != n)  # served after the whole stream
    git = run(wide_and_stream(n), "gittins")
    wide = next(r for r in git.requests if r.rid == n)
    # rank at 1 generated token: rem {19, 799, 799} -> min(19 + 2*19, ...) = 57 < the running request's ~89:
    # it preempts at the next step boundary and finishes its 19 decode tokens right after
    assert wide.t_finish - wide.arrival < 0.025
    assert wide.n_preempt == 0


def test_two_requests_the_preemption_is_counted() -> None:
    reqs = wide_and_stream(1)  # rid 0 runs alone; rid 1 (wide, short) arrives 10.5 ms later
    sim = run(reqs, "gittins")
    first, wide = sim.requests
    assert first.n_preempt == 1 and wide.n_preempt == 0
    assert sim.decode[0].n_policy_preempt == 1 and sim.decode[0].n_preempt == 1
    assert wide.t_finish < first.t_finish
    assert first.waited == pytest.approx(wide.t_finish - (wide.t_first + 0.001), abs=0.0025)
    sjf = run(wide_and_stream(1), "sjf")
    assert [r.n_preempt for r in sjf.requests] == [0, 0] and sjf.requests[1].t_finish > sjf.requests[0].t_finish
    # without preemption the same rank only orders the queue: the running request keeps its slot
    off = run(wide_and_stream(1), "gittins", preempt=False)
    assert [r.n_preempt for r in off.requests] == [0, 0]


def test_attained_service_keys_and_limited_preemption() -> None:
    r = Request(0, 3.0, 10, 500, 200.0)
    las = make_queue_policy("las", quantum=32)
    assert las.key(r, 31) == pytest.approx(3.0) and las.key(r, 64) == pytest.approx(2 * LEVEL + 3.0)
    assert las.beats(las.key(r, 0) + 99.0, las.key(r, 40)) and not las.beats(las.key(r, 1), las.key(r, 2))
    mlfq = make_queue_policy("mlfq", quantum=8, join_ratio=100)
    assert [int(mlfq.key(r, g) // LEVEL) for g in (1, 7, 8, 23, 24, 56)] == [0, 0, 1, 1, 2, 3]
    big = Request(1, 0.0, 2000, 50, 50.0)  # skip-join: 2000 / 100 = 20 tokens of prefill: the 32-token level
    assert int(mlfq.key(big, 0) // LEVEL) == 2
    trail = make_queue_policy("trail", preempt_fraction=0.5)
    assert trail.victim_key(r, 50) == pytest.approx(150.0) and trail.victim_key(r, 100) == NEVER


def test_hrrn_orders_by_response_ratio_at_the_time() -> None:
    pol = make_queue_policy("hrrn", tokens_per_s=100)
    short = Request(0, 9.0, 10, 10, 100.0)  # waited 1 s, size 1 s: ratio 2
    long_ = Request(1, 0.0, 10, 10, 400.0)  # waited 10 s, size 4 s: ratio 3.5
    assert pol.key(long_, 0, 10.0) < pol.key(short, 0, 10.0)
    assert pol.key(short, 0, 9.5) == pytest.approx(-1.5)


def test_other_samples_table_gives_each_sample_its_prompts_others() -> None:
    pop = pd.DataFrame({"prompt_id": ["a", "a", "a", "b", "b"], "sample_idx": [0, 1, 2, 0, 1],
                        "n_tokens": [10, 20, 90, 5, 7]})
    t = other_samples_table(pop).frame.set_index(["prompt_id", "sample_idx"])
    assert t.loc[("a", 1), "dist_tokens"] == [10.0, 90.0] and t.loc[("a", 1), "pred_tokens"] == 50.0
    assert t.loc[("b", 0), "dist_tokens"] == [7.0]
    with pytest.raises(DataError, match="one sample"):
        other_samples_table(pop.iloc[:4])


@pytest.mark.parametrize(("kw", "match"), [
    ({"queue": "gitins"}, "use one of: .*gittins"),
    ({"queue": "risk", "beta": -1.0}, "beta must be in"),
    ({"queue": "risk", "alpha": 1.0}, "alpha must be in"),
    ({"queue": "las", "quantum": 0.0}, "quantum must be in"),
    ({"queue": "sjf", "aging": -5.0}, "aging must be >= 0"),
    ({"queue": "mlfq", "aging": 10.0}, "takes no aging"),
    ({"queue": "sjf", "beta": 0.3}, "takes no parameter 'beta'"),
])
def test_bad_policy_settings_are_one_line(kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        PolicyConfig(name="arm", **kw)
    assert "\n" not in str(e.value)


def test_a_distribution_policy_refuses_a_table_without_a_distribution() -> None:
    from lenpred.sim.sweep import check_dist

    preds = Predictions.from_frame(pd.DataFrame({"prompt_id": ["0"], "sample_idx": [0], "pred_tokens": [5.0]}),
                                   made_by="lognormal")
    with pytest.raises(DataError, match="'gittins'.*lognormal.*no spread, q10/q50/q90 or dist_tokens") as e:
        check_dist(PolicyConfig(name="g", queue="gittins"), preds)
    assert "lenpred predict" in str(e.value)
    check_dist(PolicyConfig(name="s", queue="sjf"), preds)  # point policies do not care
    with pytest.raises(DataError, match="needs a predictive distribution"):
        Simulator([Request(0, 0.0, 5, 5, 5.0)], policy=PolicyConfig(queue="risk"))


def test_repredictions_must_increase_in_tokens_generated() -> None:
    with pytest.raises(LenpredError, match="strictly increasing"):
        Request(0, 0.0, 5, 50, 20.0, repred=[(10, 5.0), (10, 4.0)])
    assert math.isnan(Request(0, 0.0, 5, 50, 20.0, repred=[(10, 5.0), (11, 4.0)]).t_left)
