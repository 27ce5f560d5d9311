"""The prediction-free watermark admission (issue 37 part 1): a reserve of KV kept free, by hand and end to end."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lenpred.errors import ConfigError
from lenpred.sched.queue import make_queue_policy
from lenpred.sim.arm import ArmPolicy
from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import simulate
from lenpred.sim.instances import DecodeInstance
from lenpred.sim.preemption import DecodeSetup
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request

MakeRequests = Callable[..., list[Request]]


def test_watermark_keeps_the_reserve_free(toy_profile: LatencyProfile) -> None:
    # capacity 1000, 20% reserved: admission stops at 800 KV slots after the request joins
    d = DecodeInstance(0, toy_profile, make_queue_policy("fcfs"), 1000,
                       DecodeSetup(link_bw=1e9, swap_bw=1e9, admission="watermark", kv_reserve=0.2))
    r = Request(0, 0.0, 50, 10, 10.0)
    assert d._admits(r, 800, empty=False) and not d._admits(r, 801, empty=False)
    assert d._admits(r, 990, empty=True)  # an empty instance admits whatever fits now
    fits = DecodeInstance(0, toy_profile, make_queue_policy("fcfs"), 1000, DecodeSetup(link_bw=1e9, swap_bw=1e9))
    assert fits._admits(r, 1000, empty=False)  # fits-now: the whole budget (no cluster watermark here)


def test_a_reserve_cuts_kv_preemptions(make_requests: MakeRequests, toy_profile: LatencyProfile) -> None:
    reqs = make_requests(n=300, rate=80.0, seed=2)
    cluster = ClusterConfig(n_prefill=1, n_decode=2, kv_capacity_tokens=3000)
    now = simulate(reqs, cluster, ArmPolicy(), profile=toy_profile)
    held = simulate(reqs, cluster, ArmPolicy(admission="watermark", kv_reserve=0.4), profile=toy_profile,
                    check_invariants=True)
    assert now.n_preempt.sum() > 0 and held.n_preempt.sum() < now.n_preempt.sum()


@pytest.mark.parametrize(("flat", "needle"), [
    ({"admission": "watermark", "kv_reserve": 1.5}, "kv_reserve must be in [0, 0.9]"),
    ({"kv_reserve": 0.2}, "kv_reserve is read only by admission 'watermark'"),
])
def test_bad_reserve_is_one_line(flat: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        PolicyConfig(name="w", **flat)
    assert needle in str(e.value) and "-- fix" in str(e.value) and "\n" not in str(e.value)
    assert PolicyConfig(name="w", admission="watermark", kv_reserve=0.2).to_dict()["kv_reserve"] == 0.2
