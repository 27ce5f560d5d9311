"""Late binding (lenpred.sim.gate): hand-checkable traces against early binding (issue 37 part 1)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from lenpred.errors import ConfigError
from lenpred.sched.queue import SJFParams
from lenpred.sim.arm import ArmPolicy
from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import Simulator
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request

MakeRequests = Callable[..., list[Request]]
ONE_SLOT = ClusterConfig(mode="colocated", n_instances=2, max_batch=1)


def _three() -> list[Request]:
    """At t = 0, 0.001, 0.002 s: a long request (200 tokens), then two short ones (10 tokens)."""
    return [Request(0, 0.0, 10, 200, 200.0), Request(1, 0.001, 10, 10, 10.0), Request(2, 0.002, 10, 10, 10.0)]


def _run(reqs: list[Request], cluster: ClusterConfig, arm: ArmPolicy, profile: LatencyProfile) -> dict[int, Request]:
    Simulator(reqs, cluster, arm, profile=profile, check_invariants=True).run()
    return {r.rid: r for r in reqs}


def test_early_binding_queues_behind_the_long_request(toy_profile: LatencyProfile) -> None:
    # round robin: 0 -> A, 1 -> B, 2 -> A, where it waits for the long one with B free since long
    r = _run(_three(), ONE_SLOT, ArmPolicy(dispatch="round-robin"), toy_profile)
    assert r[2].prefill_inst is None and r[2].decode_inst is r[0].decode_inst
    assert r[2].t_prefill_start == r[0].t_finish
    assert r[1].t_finish < r[0].t_finish


def test_late_binding_sends_to_the_instance_that_frees_first(toy_profile: LatencyProfile) -> None:
    # one slot per instance: 2 waits in the pool's queue and goes to B the step after 1 finishes there
    r = _run(_three(), ONE_SLOT, ArmPolicy(dispatch="round-robin", max_outstanding=1), toy_profile)
    assert r[2].decode_inst is r[1].decode_inst is not r[0].decode_inst
    assert r[2].t_prefill_start == r[1].t_finish
    assert r[2].t_finish < r[0].t_finish


def test_late_binding_orders_its_queue_by_the_policy(toy_profile: LatencyProfile) -> None:
    """One instance, one slot: while the first request runs, a long and then a short one queue; FCFS
    sends the long one next, SJF (by prediction) the short one."""
    cluster = ClusterConfig(mode="colocated", n_instances=1, max_batch=1)

    def reqs() -> list[Request]:
        return [Request(0, 0.0, 10, 20, 20.0), Request(1, 0.001, 10, 100, 100.0), Request(2, 0.002, 10, 5, 5.0)]

    fcfs = _run(reqs(), cluster, ArmPolicy(max_outstanding=1), toy_profile)
    assert fcfs[1].t_prefill_start == fcfs[0].t_finish and fcfs[2].t_prefill_start == fcfs[1].t_finish
    sjf = _run(reqs(), cluster, ArmPolicy(queue=SJFParams(), max_outstanding=1), toy_profile)
    assert sjf[2].t_prefill_start == sjf[0].t_finish and sjf[1].t_prefill_start == sjf[2].t_finish


@pytest.mark.parametrize("cluster", [ClusterConfig(n_prefill=1, n_decode=3, kv_capacity_tokens=4000),
                                     ClusterConfig(mode="colocated", n_instances=2)], ids=["disagg", "colocated"])
def test_a_limit_nobody_reaches_is_early_binding(cluster: ClusterConfig, make_requests: MakeRequests,
                                                  toy_profile: LatencyProfile) -> None:
    reqs = make_requests(n=300, rate=60.0, seed=4)
    early = Simulator(reqs, cluster, ArmPolicy(dispatch="least-requests"), profile=toy_profile).run()
    late = Simulator(reqs, cluster, ArmPolicy(dispatch="least-requests", max_outstanding=10_000),
                     profile=toy_profile, check_invariants=True).run()
    assert np.array_equal(early.t_finish, late.t_finish) and np.array_equal(early.n_preempt, late.n_preempt)


@pytest.mark.parametrize("cluster", [ClusterConfig(n_prefill=2, n_decode=3, kv_capacity_tokens=3000),
                                     ClusterConfig(mode="colocated", n_instances=3, kv_capacity_tokens=3000,
                                                   preemption="swap")], ids=["disagg", "colocated-swap"])
def test_late_binding_never_holds_more_than_the_limit(cluster: ClusterConfig, make_requests: MakeRequests,
                                                      toy_profile: LatencyProfile) -> None:
    reqs = make_requests(n=400, rate=120.0, seed=5)
    sim = Simulator(reqs, cluster, ArmPolicy(dispatch="least-requests", max_outstanding=8), profile=toy_profile,
                    check_invariants=True)
    seen = []
    take = type(sim.decode[0]).take

    def spy(self, r: Request, t: float) -> None:  # every request an instance takes: count what it holds after
        take(self, r, t)
        seen.append(self.outstanding_requests())

    for d in sim.decode:
        d.take = spy.__get__(d)  # type: ignore[method-assign]
    res = sim.run()
    assert np.isfinite(res.t_finish[~res.rejected]).all()
    fresh = len(reqs) - int(res.rejected.sum())
    assert len(seen) >= fresh and sim.gate is not None and sim.gate.peak > 0  # the queue was used
    # a preempted request goes back to its own instance's queue: it was counted there all along
    assert res.n_preempt.sum() > 0 and max(seen) == 8


def test_bad_limit_is_one_line() -> None:
    with pytest.raises(ConfigError) as e:
        PolicyConfig(name="late", max_outstanding=0)
    assert "max_outstanding" in str(e.value) and "\n" not in str(e.value) and "-- fix" in str(e.value)


def test_observed_tokens_by_hand(toy_profile: LatencyProfile) -> None:
    """What a router can count on a decode instance: prompt + generated of the running batch (KV in use),
    plus what the queued requests need when they join; the predictions play no part."""
    from lenpred.sched.queue import make_queue_policy
    from lenpred.sim.instances import DecodeInstance
    from lenpred.sim.preemption import DecodeSetup
    from lenpred.sim.request import NEED_RECOMPUTE

    d = DecodeInstance(0, toy_profile, make_queue_policy("fcfs"), 10_000,
                       DecodeSetup(colocated=True, link_bw=1e9, swap_bw=1e9))
    a, b = Request(0, 0.0, 10, 100, 5.0), Request(1, 0.0, 20, 100, 900.0)
    a.gen, b.gen = 30, 4
    d._join(a, 1.0)
    d._join(b, 1.0)
    q = Request(2, 0.5, 50, 100, 1.0)
    q.gen, q.need = 7, NEED_RECOMPUTE
    d.take(q, 1.0)
    assert d.observed_tokens() == (10 + 30) + (20 + 4) + (50 + 7)
    assert d.outstanding_requests() == 3
