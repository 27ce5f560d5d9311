"""Engine properties: conservation, KV budget, determinism, preemption, rejection, bad input."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from lenpred.errors import ConfigError, DataError, UnknownKeyError
from lenpred.sim.arm import ArmPolicy
from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import Simulator, simulate
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request
from lenpred.sim.summary import summarize

MakeRequests = Callable[..., list[Request]]  # the make_requests fixture (tests/sim/conftest.py)

CLUSTERS = [
    ClusterConfig(mode="disaggregated", n_prefill=2, n_decode=3, kv_capacity_tokens=4000),
    ClusterConfig(mode="colocated", n_instances=3, kv_capacity_tokens=4000),
    ClusterConfig(mode="disaggregated", n_prefill=1, n_decode=2, kv_capacity_tokens=3000, preemption="swap"),
]
POLICIES = [
    PolicyConfig(name="fcfs"),
    PolicyConfig(name="sjf", queue="sjf", dispatch="least-predicted-tokens"),
    PolicyConfig(name="srpt-p2c", queue="srpt", dispatch="power-of-two", aging=50.0),
    PolicyConfig(name="oracle-lr", queue="oracle", dispatch="least-requests"),
]


@pytest.mark.parametrize("cluster", CLUSTERS, ids=["disagg", "colocated", "swap"])
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_conservation_and_kv_budget(cluster: ClusterConfig, policy: PolicyConfig, make_requests: MakeRequests,
                                    toy_profile: LatencyProfile) -> None:
    reqs = make_requests(n=250, rate=80.0)
    sim = Simulator(reqs, cluster, policy.policy, profile=toy_profile, check_invariants=True)
    res = sim.run()
    # every request finishes exactly once ...
    assert sim.n_done == len(reqs) and not res.rejected.any()
    assert np.isfinite(res.t_finish).all()
    # ... having generated exactly its true length: one token from prefill, the rest from decode steps
    assert all(r.gen == r.output for r in sim.requests)
    decode_tokens = sum(d["tokens"] for d in res.instances["decode"])
    assert decode_tokens == int(res.output.sum()) - len(reqs)
    # causality
    assert (res.t_first >= res.arrival).all() and (res.t_finish >= res.t_first).all()
    # the KV budget is never exceeded (also asserted at every step by check_invariants)
    cap = cluster.kv_capacity_tokens
    assert all(d["peak_kv"] <= cap for d in res.instances["decode"])
    assert all(p["peak_kv"] <= cap for p in res.instances["prefill"])
    assert max(d["peak_kv"] for d in res.instances["decode"]) > 0.5 * cap  # the budget was binding


def test_preemption_happens_and_everything_still_finishes(toy_profile: LatencyProfile) -> None:
    # 6 requests of 100 prompt + 300 output tokens at once on one instance with room for ~3 of them
    reqs = [Request(i, 0.0, 100, 300, 300) for i in range(6)]
    for mode in ("recompute", "swap"):
        cluster = ClusterConfig(mode="colocated", kv_capacity_tokens=1200, preemption=mode, watermark=0.0)
        sim = Simulator(reqs, cluster, ArmPolicy(), profile=toy_profile, check_invariants=True)
        res = sim.run()
        assert res.n_preempt.sum() > 0, mode
        assert np.isfinite(res.t_finish).all()
        assert all(r.gen == r.output for r in sim.requests)
        assert res.instances["decode"][0]["peak_kv"] <= 1200
        # FCFS preempts the newest: the first request never is
        assert res.n_preempt[0] == 0
    # recompute re-prefills prompt + generated tokens on the instance
    rec = simulate(reqs, ClusterConfig(mode="colocated", kv_capacity_tokens=1200, watermark=0.0),
                   ArmPolicy(), profile=toy_profile)
    assert rec.instances["decode"][0]["prefill_tokens"] > 6 * 100


def test_swap_costs_time(toy_profile: LatencyProfile) -> None:
    reqs = [Request(i, 0.0, 100, 300, 300) for i in range(6)]
    fast = ClusterConfig(mode="colocated", kv_capacity_tokens=1200, preemption="swap", swap_gbps=1e6)
    slow = ClusterConfig(mode="colocated", kv_capacity_tokens=1200, preemption="swap", swap_gbps=0.0001)
    t_fast = simulate(reqs, fast, ArmPolicy(), profile=toy_profile).t_finish.max()
    t_slow = simulate(reqs, slow, ArmPolicy(), profile=toy_profile).t_finish.max()
    assert t_slow > t_fast + 1.0


def test_same_seed_same_result(make_requests: MakeRequests, toy_profile: LatencyProfile) -> None:
    cluster = ClusterConfig(n_prefill=2, n_decode=3, kv_capacity_tokens=4000)
    pol = PolicyConfig(queue="srpt", dispatch="power-of-two")
    a = simulate(make_requests(seed=3), cluster, pol.policy, profile=toy_profile, seed=7)
    b = simulate(make_requests(seed=3), cluster, pol.policy, profile=toy_profile, seed=7)
    np.testing.assert_array_equal(a.t_finish, b.t_finish)
    np.testing.assert_array_equal(a.t_first, b.t_first)
    c = simulate(make_requests(seed=3), cluster, pol.policy, profile=toy_profile, seed=8)
    assert not np.array_equal(a.t_finish, c.t_finish)  # power-of-two draws differ


def test_rerunning_the_same_request_objects_is_identical(make_requests: MakeRequests,
                                                        toy_profile: LatencyProfile) -> None:
    reqs = make_requests()
    a = simulate(reqs, ClusterConfig(n_decode=2), PolicyConfig(queue="sjf").policy, profile=toy_profile)
    b = simulate(reqs, ClusterConfig(n_decode=2), PolicyConfig(queue="sjf").policy, profile=toy_profile)
    np.testing.assert_array_equal(a.t_finish, b.t_finish)


def test_too_big_request_is_rejected_and_counted(toy_profile: LatencyProfile) -> None:
    reqs = [Request(0, 0.0, 100, 50, 50), Request(1, 0.1, 900, 200, 200), Request(2, 0.2, 50, 50, 50)]
    for cluster in (ClusterConfig(kv_capacity_tokens=1000), ClusterConfig(mode="colocated", kv_capacity_tokens=1000)):
        res = simulate(reqs, cluster, ArmPolicy(), profile=toy_profile)
        assert res.rejected.tolist() == [False, True, False]
        assert np.isfinite(res.t_finish[[0, 2]]).all() and np.isnan(res.t_finish[1])
        s = summarize(res)
        assert s["n_rejected"] == 1 and s["n_completed"] == 2


def test_request_filling_the_whole_cache_alone_finishes(toy_profile: LatencyProfile) -> None:
    # prompt + output == capacity exactly: admitted despite the watermark, never a hang
    reqs = [Request(0, 0.0, 600, 400, 400), Request(1, 0.0, 10, 10, 10)]
    res = simulate(reqs, ClusterConfig(mode="colocated", kv_capacity_tokens=1000, watermark=0.2),
                   ArmPolicy(), profile=toy_profile, check_invariants=True)
    assert np.isfinite(res.t_finish).all()


@pytest.mark.parametrize(
    "req, match",
    [
        (Request(0, 0.0, 0, 10, 10), "prompt length <= 0"),
        (Request(0, 0.0, 10, 0, 0), "output length <= 0"),
        (Request(0, 0.0, -5, 10, 10), "prompt length <= 0"),
        (Request(0, -1.0, 10, 10, 10), "arrival time"),
        (Request(0, 0.0, 10, 10, pred=float("nan")), "predicted length"),
    ],
)
def test_bad_requests_raise(req: Request, match: str) -> None:
    with pytest.raises(DataError, match=match):
        Simulator([req])


def test_no_requests_raises() -> None:
    with pytest.raises(DataError, match="no requests"):
        Simulator([])


def test_unknown_names_list_valid_ones() -> None:
    reqs = [Request(0, 0.0, 10, 10, 10)]
    with pytest.raises(ConfigError, match="fcfs.*gittins.*hrrn.*las.*mlfq.*oracle.*risk.*sjf.*srpt.*trail"):
        PolicyConfig(queue="lifo")  # refused by the config, before any simulator is built
    with pytest.raises(ConfigError, match="unknown dispatch 'random' -- fix: use one of: least-kv, least-observed-load, least-predicted-time, least-predicted-tokens"):
        PolicyConfig(dispatch="random")  # refused by the config too
    with pytest.raises(ConfigError, match="unknown prefill_dispatch 'random' -- fix: use one of: least-kv, least-observed-load, least-predicted"):
        PolicyConfig(prefill_dispatch="random")
    with pytest.raises(UnknownKeyError, match="distserve-opt13b.*llama8b-h100"):
        Simulator(reqs, ClusterConfig(profile="gpt4-tpu"))


def test_cluster_config_errors() -> None:
    with pytest.raises(ConfigError, match="mode"):
        ClusterConfig(mode="both")
    with pytest.raises(ConfigError, match="n_decode"):
        ClusterConfig(n_decode=0)
    with pytest.raises(ConfigError, match="preemption"):
        ClusterConfig(preemption="drop")
    with pytest.raises(ConfigError, match="kv_capacity_tokens"):
        ClusterConfig(kv_capacity_tokens=-1)


def test_real_profiles_run(make_requests: MakeRequests) -> None:
    from lenpred.sim.profiles import get_profile

    reqs = make_requests(n=200, rate=2.0)  # sparse: most prompts are prefilled alone, at once
    for prof in ("distserve-opt13b", "llama8b-h100", "llama8b-h100-fp8"):
        res = simulate(reqs, ClusterConfig(profile=prof, n_prefill=1, n_decode=2), ArmPolicy())
        assert np.isfinite(res.t_finish).all()
        ttft = res.t_first - res.arrival
        alone = np.array([get_profile(prof).prefill_time([p]) for p in res.prompt])
        assert (ttft >= alone - 1e-12).all(), prof  # nothing is faster than its own prefill alone
        exact = np.isclose(ttft, alone, rtol=1e-9, atol=0)
        assert exact.mean() > 0.85, (prof, exact.mean())  # ... and most requests take exactly that


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
def test_repredictions_keep_the_bookkeeping_exact(mode: str, toy_profile: LatencyProfile) -> None:
    # srpt + least-predicted-tokens with re-predictions every 16 tokens and a tight KV budget:
    # check_invariants recomputes the incremental predicted-load sums at every step.
    from lenpred.sim.config import PredictionConfig, WorkloadConfig
    from lenpred.sim.workload import build_workload

    wl = build_workload(WorkloadConfig(n_requests=200), seed=5)
    reqs = wl.requests(40.0, wl.predictions(PredictionConfig(model="lognormal", rel_mae=0.5, repredict_every=16), 5))
    assert sum(len(r.repred) for r in reqs) > 1000
    cluster = ClusterConfig(mode=mode, n_prefill=1, n_decode=2, n_instances=2, kv_capacity_tokens=6000)
    sim = Simulator(reqs, cluster, PolicyConfig(queue="srpt", dispatch="least-predicted-tokens").policy,
                    profile=toy_profile, check_invariants=True)
    res = sim.run()
    assert np.isfinite(res.t_finish).all() and res.n_preempt.sum() > 0
    assert all(r.gen == r.output for r in sim.requests)
    for d in sim.decode:  # drained: nothing left in any load sum
        assert d.n_run == d.n_reserved == d.ctx == d.kv_reserved == 0
        assert abs(d.outstanding_tokens()) < 1e-6 and d.outstanding_requests() == 0
