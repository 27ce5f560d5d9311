"""Boost policies (lenpred.sched.boost): gamma and the boosts against a hand-computed two-label M/G/1,
FCFS order when every label is equal, the overload rule, the two-class boost's label refresh by
re-predictions, bad input; and each policy run end to end by the simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lenpred.errors import ConfigError, DataError
from lenpred.sched import QUEUE_POLICIES
from lenpred.sched.boost import OVERLOAD_RHO, Calibration, boost, solve_gamma
from lenpred.sched.dists import LengthDist
from lenpred.sched.job import Arrived
from lenpred.sched.queue import make_queue_policy
from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import Simulator
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request

LN2 = math.log(2.0)
# Two labels, equally likely, sizes in seconds (s_per_token = 1): A is always 1 s, B is 1 s or 3 s with
# probability 1/2 each. At gamma = ln 2: e^{gamma S} is 2 for S = 1 and 8 for S = 3, so
# E[e^{gamma S} | A] = 2, E[e^{gamma S} | B] = (2 + 8) / 2 = 5, E[e^{gamma S}] = (2 + 5) / 2 = 7/2, and
# gamma = lambda (E[e^{gamma S}] - 1) holds at lambda = ln 2 / (5/2) (rho = lambda * E[S] = 0.277 * 1.5 < 1).
LAMBDA = LN2 / 2.5
MIXTURE = [1.0, 1.0, 1.0, 3.0]  # the unconditional size distribution, as equal-weight points
B_A = math.log(2.0 / 1.0) / LN2  # = 1 s
B_B = math.log(5.0 / 4.0) / LN2  # = 0.3219... s


def test_gamma_and_the_boosts_of_a_hand_computed_two_label_case() -> None:
    assert solve_gamma(LAMBDA, MIXTURE) == pytest.approx(LN2, abs=1e-12)
    assert boost([1.0], LN2) == pytest.approx(B_A, abs=1e-12) and B_A == pytest.approx(1.0)
    assert boost([1.0, 3.0], LN2) == pytest.approx(B_B, abs=1e-12)
    # the policy, calibrated from the rate and the workload (gamma solved), keys arrival - b(label)
    pol = make_queue_policy("gboost", s_per_token=1.0)
    a = Request(0, 5.0, 10, 1, 1.0, dist=LengthDist([1.0]))
    b = Request(1, 4.5, 10, 3, 2.0, dist=LengthDist([1.0, 3.0]))
    assert pol.key(a, 0) == pytest.approx(5.0 - math.log(math.e**2.5 / math.expm1(2.5)) / 2.5)  # gamma 2.5
    pol.calibrate(Calibration(rate=LAMBDA, service_tokens=np.array(MIXTURE)))
    assert pol.gamma == pytest.approx(LN2, abs=1e-12)
    assert pol.key(a, 0) == pytest.approx(5.0 - B_A, abs=1e-9)
    assert pol.key(b, 0) == pytest.approx(4.5 - B_B, abs=1e-9)
    assert pol.key(a, 0) < pol.key(b, 0)  # A arrived 0.5 s later but is boosted 0.68 s more
    # conditioned on what was generated: B past 1 s has 2 s left for sure, b = log(4 / 3) / ln 2
    assert pol.key(b, 1) == pytest.approx(4.5 - math.log(4.0 / 3.0) / LN2, abs=1e-9)
    assert pol.key(b, 0) == pytest.approx(4.5 - B_B, abs=1e-9)  # the same key again (cached per age)
    # the router's request (a point prediction, no distribution): a point mass at the predicted remaining
    assert pol.key(Arrived(arrival=5.0, pred=1.0), 0) == pytest.approx(5.0 - B_A, abs=1e-9)


def test_a_re_prediction_refreshes_the_gboost_key() -> None:
    pol = make_queue_policy("gboost", gamma=LN2, s_per_token=1.0)
    # at arrival: label B (1 or 3 s); after 2 tokens the re-prediction says exactly 1 more (total 3): label A
    r = Request(0, 5.0, 10, 3, 2.0, repred=[(2, 1.0)], dist=LengthDist([1.0, 3.0]), repred_dists=(LengthDist([3.0]),))
    assert pol.key(r, 0) == pytest.approx(5.0 - B_B, abs=1e-9)
    # before the re-prediction, at age 2 the prefill distribution says: past its 1 s point, 1 s left for sure
    assert pol.key(r, 2) == pytest.approx(5.0 - B_A, abs=1e-9)
    assert r.apply_repredictions(2)
    assert pol.key(r, 2) == pytest.approx(5.0 - B_A, abs=1e-9)  # the new distribution: 3 - 2 = 1 s left
    r2 = Request(1, 5.0, 10, 9, 2.0, repred=[(1, 8.0)], dist=LengthDist([1.0, 3.0]),
                 repred_dists=(LengthDist([9.0]),))
    before = pol.key(r2, 1)  # the prefill distribution given L > 1: 2 s left (M = 4)
    assert before == pytest.approx(5.0 - math.log(4.0 / 3.0) / LN2, abs=1e-9)
    r2.apply_repredictions(1)
    assert pol.key(r2, 1) == pytest.approx(5.0 - math.log(256.0 / 255.0) / LN2, abs=1e-9)  # 8 s left: M = 2^8


def test_a_given_gamma_and_s_per_token_win_over_the_calibration() -> None:
    pol = make_queue_policy("gboost", gamma=LN2, s_per_token=0.5)
    pol.calibrate(Calibration(rate=LAMBDA, service_tokens=np.array(MIXTURE), s_per_token=1.0))
    assert pol.gamma == LN2 and pol.s_per_token == 0.5
    a = Request(0, 5.0, 10, 2, 2.0, dist=LengthDist([2.0]))  # 2 tokens x 0.5 s = 1 s: label A
    assert pol.key(a, 0) == pytest.approx(5.0 - B_A, abs=1e-9)


def test_gboost_orders_as_fcfs_when_every_label_is_equal() -> None:
    rng = np.random.default_rng(0)
    same = LengthDist(rng.integers(1, 2000, 16))
    reqs = [Request(i, float(t), 10, 100, 100.0, dist=same) for i, t in enumerate(rng.uniform(0, 100, 200))]
    for name in ("gboost", "uniboost"):
        pol = make_queue_policy(name)
        if name == "uniboost":
            pol.calibrate(Calibration.from_requests([r.arrival for r in reqs], rng.integers(1, 2000, 500), 1))
        fcfs = make_queue_policy("fcfs")
        assert sorted(reqs, key=lambda r: pol.key(r, 0)) == sorted(reqs, key=lambda r: fcfs.key(r, 0))


def test_uniboost_boosts_by_attained_service_on_the_workloads_distribution() -> None:
    pol = make_queue_policy("uniboost", gamma=LN2, s_per_token=1.0)
    r = Request(0, 3.0, 10, 3, 3.0)
    assert pol.key(r, 0) == 3.0  # uncalibrated: no distribution known, FCFS
    pol.calibrate(Calibration(rate=LAMBDA, service_tokens=np.array(MIXTURE)))
    # age 0: E[e^{gamma S}] = 7/2 for everyone; age 1: only the 3 s job survives, 2 s left (M = 4)
    assert pol.key(r, 0) == pytest.approx(3.0 - math.log(3.5 / 2.5) / LN2, abs=1e-9)
    assert pol.key(r, 1) == pytest.approx(3.0 - math.log(4.0 / 3.0) / LN2, abs=1e-9)


def test_solve_gamma_finds_the_root_and_applies_the_overload_rule() -> None:
    rng = np.random.default_rng(1)
    s = rng.lognormal(math.log(0.02), 0.9, 5000)  # seconds
    for rho in (0.3, 0.8, 0.95, 0.99):
        lam = rho / s.mean()
        g = solve_gamma(lam, s)
        assert g > 0
        assert g == pytest.approx(lam * float(np.expm1(g * s).mean()), rel=1e-9)
    at_095 = solve_gamma(OVERLOAD_RHO / s.mean(), s)
    for rho in (1.0, 1.3):  # no positive root: the root at rho = 0.95
        assert solve_gamma(rho / s.mean(), s) == at_095
    assert solve_gamma(math.inf, s) == at_095  # a rate that cannot be measured (all at once)
    assert Calibration.from_requests([0.0, 0.0, 0.0], [5, 6, 7], 2).rate == math.inf
    assert Calibration.from_requests([0.0, 1.0, 2.0], [5, 6, 7], 2).rate == pytest.approx(0.5)
    with pytest.raises(ConfigError, match=r"rate must be in \(0, inf\] requests/s, got 0"):
        solve_gamma(0.0, s)


def test_boost2_relabels_a_request_once_its_predicted_remaining_drops_under_the_threshold() -> None:
    pol = make_queue_policy("boost2", boost_s=4.0, short_threshold=100)
    # predicted 300 at arrival; the trajectory head says 40 left after 50 tokens (total 90 < 100)
    r = Request(0, 10.0, 20, 80, 300.0, repred=[(50, 40.0)])
    assert pol.key(r, 0) == 10.0  # long
    assert pol.key(r, 50) == 10.0  # the re-prediction is not applied yet
    assert r.apply_repredictions(50)
    assert pol.key(r, 50) == 6.0  # short now: boosted by 4 s
    short = Request(1, 7.0, 20, 30, 30.0)
    assert pol.key(short, 0) == 3.0
    assert make_queue_policy("boost2").params == {"boost_s": 3.0, "short_threshold": 224.0}  # one default: 3 s / 224


@pytest.mark.parametrize(("name", "kw", "match"), [
    ("gboost", {"gamma": 0.0}, r"policy 'gboost': gamma must be \"auto\" or a number in \(0, inf\).*, got 0.0 -- fix"),
    ("gboost", {"gamma": -2.0}, r"gamma must be \"auto\" or a number in \(0, inf\).*, got -2.0"),
    ("uniboost", {"gamma": 0.0}, r"policy 'uniboost': gamma must be \"auto\" or a number in \(0, inf\).*, got 0.0"),
    ("gboost", {"s_per_token": 0.0}, r"s_per_token must be \"auto\" or a number in \(0, inf\).*, got 0.0"),
    ("boost2", {"boost_s": 0.0}, r"policy 'boost2': boost_s must be in \(0, inf\), got 0.0"),
    ("boost2", {"boost_s": -1.0}, r"boost_s must be in \(0, inf\), got -1.0"),
    ("boost2", {"short_threshold": 0.0}, r"short_threshold must be in \(0, inf\), got 0.0"),
    ("gboost", {"aging": 5.0}, r"policy 'gboost' takes no aging"),
])
def test_bad_parameters_are_one_line(name: str, kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        make_queue_policy(name, **kw)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=match.split(": ", 1)[-1]):  # and through the simulator's config
        PolicyConfig(name="arm", queue=name, **kw)


def test_a_distribution_with_no_mass_is_one_line() -> None:
    for pts, match in (([], r"no mass \(0 support points\)"), ([math.nan, math.nan], "2 of 2 support points"),
                       ([1.0, -3.0], "1 of 2 support points .* -3.0")):
        with pytest.raises(DataError, match=match) as e:
            boost(pts, 1.0)
        assert "\n" not in str(e.value) and "[0, inf)" in str(e.value)
        with pytest.raises(DataError):
            solve_gamma(1.0, pts)
    with pytest.raises(DataError, match="at least one finite support point"):
        LengthDist([])
    with pytest.raises(ConfigError, match=r"gamma must be in \(0, inf\) per second, got 0"):
        boost([1.0], 0)


def tiny_requests(n: int = 60) -> list[Request]:
    rng = np.random.default_rng(3)
    t = np.cumsum(rng.exponential(0.02, n))
    out = rng.integers(5, 200, n)
    return [Request(i, float(t[i]), 50, int(o), float(o) * 1.2, repred=[(3, float(o) - 3.0)],
                    dist=LengthDist([max(o / 2, 1), o, 2 * o]), repred_dists=(LengthDist([o, o + 1]),))
            for i, o in enumerate(out)]


@pytest.mark.parametrize("queue", ["gboost", "uniboost", "boost2"])
def test_the_simulator_runs_each_boost_end_to_end(queue: str) -> None:
    assert queue in QUEUE_POLICIES.names()
    reqs = tiny_requests()
    sim = Simulator(reqs, ClusterConfig(n_prefill=1, n_decode=2, max_batch=4), PolicyConfig(queue=queue).policy,
                    check_invariants=True)
    res = sim.run()
    assert np.isfinite(res.t_finish).all() and res.n == len(reqs)
    qpol = sim.decode[0].policy
    if queue != "boost2":  # calibrated: gamma solved from the measured rate, s from the profile's batch of 4
        assert qpol.gamma != make_queue_policy(queue).gamma
        assert qpol.s_per_token == pytest.approx(sim.profile.decode_time(4, int(4 * (50 + np.mean(
            [r.output for r in reqs]) / 2))) / 4)
    pre = Simulator(tiny_requests(), ClusterConfig(n_prefill=1, n_decode=1, max_batch=4),
                    PolicyConfig(queue=queue, preempt=True).policy, check_invariants=True).run()
    assert np.isfinite(pre.t_finish).all()


def test_in_the_simulator_a_boosted_short_request_overtakes_a_long_one() -> None:
    """One decode slot, 1 ms a step: rid 0 (100 tokens) runs; rid 1 (100 tokens) and rid 2 (5 tokens, 1 ms
    later) wait. gamma 1/s, 1 ms a token: b(100 tokens) = log(e^0.1 / (e^0.1 - 1)) = 2.35 s, b(5 tokens) =
    log(e^0.005 / (e^0.005 - 1)) = 5.30 s: rid 2 goes first under gboost and boost2, after rid 1 under FCFS
    and under uniboost (every fresh request gets the same boost)."""
    step = LatencyProfile(name="step", prefill=(0.001, 0.0, 0.0), decode=(0.001, 0.0, 0.0), kv_bytes_per_token=1,
                          kv_capacity_tokens=100_000, max_batch=1, max_prefill_tokens=4096)

    def finish_order(queue: str, **kw: float) -> list[int]:
        reqs = [Request(0, 0.0, 10, 100, 100.0, dist=LengthDist([100])),
                Request(1, 0.010, 10, 100, 100.0, dist=LengthDist([100])),
                Request(2, 0.011, 10, 5, 5.0, dist=LengthDist([5]))]
        sim = Simulator(reqs, ClusterConfig(n_prefill=1, n_decode=1, link_gbps=1e6),
                        PolicyConfig(queue=queue, **kw).policy, profile=step, check_invariants=True)
        res = sim.run()
        return [int(i) for i in res.rid[np.argsort(res.t_finish)]]

    assert finish_order("fcfs") == [0, 1, 2]
    assert finish_order("gboost", gamma=1.0, s_per_token=1e-3) == [0, 2, 1]
    assert finish_order("boost2", short_threshold=50.0) == [0, 2, 1]
    assert finish_order("uniboost") == [0, 1, 2]


def test_use_drops_the_boosts_computed_with_the_old_numbers() -> None:
    """The router's online calibration sets gamma and s_per_token with ``use``: a distribution keyed
    before it (cached) is keyed afterwards exactly as a policy built with the new numbers keys it."""
    d = LengthDist(np.array([20.0, 200.0, 2000.0]), None)
    req = Arrived(arrival=10.0, pred=200.0, dist=d)
    pol = make_queue_policy("gboost", gamma=0.5, s_per_token=0.01)
    before = pol.key(req, 0)
    pol.use(0.05, 0.02)
    fresh = make_queue_policy("gboost", gamma=0.05, s_per_token=0.02)
    assert pol.key(req, 0) == fresh.key(req, 0) != before
    uni = make_queue_policy("uniboost")
    uni.calibrate(Calibration(1.0, np.array([20.0, 200.0, 2000.0]), 0.01))
    old = uni.key(Arrived(arrival=0.0, pred=1.0), 50)
    uni.use(uni.gamma / 10, 0.01)
    assert uni.key(Arrived(arrival=0.0, pred=1.0), 50) != old  # not the cached boost of the old gamma
