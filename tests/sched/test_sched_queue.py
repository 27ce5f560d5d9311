"""Queue orderings on small, hand-made queues: point predictions, aging, re-predictions, attained service,
limited preemption, the response ratio; a request known only on arrival (the router's)."""

from __future__ import annotations

import pytest

from lenpred.errors import ConfigError
from lenpred.sched.job import Arrived
from lenpred.sched.queue import LEVEL, NEVER, QUEUE_POLICIES, make_queue_policy
from lenpred.sim.request import Request
from sched_testing import queue


def order(policy: str, aging: float = 0.0, gens: dict[int, int] | None = None) -> list[int]:
    pol = make_queue_policy(policy, aging=aging)
    gens = gens or {}
    return [r.rid for r in sorted(queue(), key=lambda r: pol.key(r, gens.get(r.rid, 0)))]


def test_queue_orderings() -> None:
    assert order("fcfs") == [0, 1, 2, 3]
    assert order("sjf") == [3, 0, 2, 1]  # by prediction
    assert order("oracle") == [3, 1, 2, 0]  # by truth
    assert order("srpt") == [3, 0, 2, 1]
    # srpt counts what is left: rid 2 has generated 190 of its predicted 200
    assert order("srpt", gens={2: 190}) == [2, 3, 0, 1]
    assert order("oracle", gens={0: 395}) == [0, 3, 1, 2]


def test_aging_turns_sjf_into_fcfs() -> None:
    # 1e6 tokens per second of waiting outweighs any size difference at these arrival gaps
    assert order("sjf", aging=1e6) == [0, 1, 2, 3]
    assert order("sjf", aging=1e-6) == [3, 0, 2, 1]


def test_srpt_uses_repredictions() -> None:
    r = Request(0, 0.0, 10, 500, pred=100, repred=[(50, 400.0), (100, 20.0)])
    pol = make_queue_policy("srpt")
    r.apply_repredictions(0)
    assert pol.key(r, 0) == 100
    r.apply_repredictions(60)
    assert pol.key(r, 60) == pytest.approx(50 + 400 - 60)
    r.apply_repredictions(100)
    assert pol.key(r, 100) == pytest.approx(20)


def test_sjf_quantile_uses_spread() -> None:
    a = Request(0, 0.0, 10, 10, pred=100, spread=100)
    b = Request(1, 0.0, 10, 10, pred=150, spread=0)
    assert make_queue_policy("sjf").key(a, 0) < make_queue_policy("sjf").key(b, 0)
    assert make_queue_policy("sjf", quantile_z=1.0).key(a, 0) > make_queue_policy("sjf", quantile_z=1.0).key(b, 0)


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


def test_the_registry_lists_its_members() -> None:
    assert QUEUE_POLICIES.names() == ["boost2", "fcfs", "gboost", "gittins", "hrrn", "las", "mlfq", "oracle", "risk",
                                      "sjf", "srpt", "trail", "uniboost"]


def test_a_request_on_arrival_is_keyed_as_the_simulators_request() -> None:
    # what the router orders: the same key as a simulated request with the same arrival and prediction
    live = Arrived(arrival=2.0, pred=100.0, spread=10.0)
    sim = Request(0, 2.0, 50, 400, pred=100.0, spread=10.0)
    for name, kw in (("fcfs", {}), ("sjf", {"aging": 5.0, "quantile_z": 1.0}), ("srpt", {}), ("hrrn", {})):
        pol = make_queue_policy(name, **kw)
        assert pol.key(live, 0, 3.0) == pol.key(sim, 0, 3.0)
    assert make_queue_policy("sjf", aging=5.0, quantile_z=1.0).key(live, 0) == pytest.approx(100 + 10 + 5 * 2)
    with pytest.raises(ConfigError, match="true output length .* unknown"):
        make_queue_policy("oracle").key(live, 0)
