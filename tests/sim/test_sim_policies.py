"""Queue orderings and dispatch choices on small, hand-made queues."""

from __future__ import annotations

import numpy as np
import pytest

from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import simulate
from lenpred.sim.policies import (
    DISPATCHERS,
    QUEUE_POLICIES,
    make_dispatcher,
    make_queue_policy,
)
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request


def queue() -> list[Request]:
    # rid: arrival, true output, predicted output
    return [
        Request(0, 0.00, 50, 400, pred=100),  # long, predicted short
        Request(1, 0.01, 50, 50, pred=300),  # short, predicted long
        Request(2, 0.02, 50, 200, pred=200),
        Request(3, 0.03, 50, 10, pred=20),
    ]


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


@pytest.mark.parametrize(
    "policy, expected",
    [("fcfs", [0, 1, 2, 3]), ("sjf", [3, 0, 2, 1]), ("oracle", [3, 1, 2, 0])],
)
def test_service_order_in_the_engine(policy: str, expected: list[int], toy_profile: LatencyProfile) -> None:
    # One colocated instance that runs one request at a time: the policy alone decides the order
    # (all four are queued while a blocker holds the instance).
    blocker = Request(9, 0.0, 10, 30, 30)
    reqs = [blocker] + [Request(r.rid, 0.001 + 0.001 * i, r.prompt, r.output, r.pred)
                        for i, r in enumerate(queue())]
    cluster = ClusterConfig(mode="colocated", max_batch=1)
    res = simulate(reqs, cluster, PolicyConfig(queue=policy), profile=toy_profile)
    got = [int(x) for x in res.rid[np.argsort(res.t_first)] if x != 9]
    assert got == expected


def test_round_robin_cycles() -> None:
    d = make_dispatcher("round-robin")
    pool = [_Fake(i, 0, 0.0) for i in range(3)]
    assert [d.choose(pool, Request(0, 0, 1, 1, 1)) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


class _Fake:
    def __init__(self, index: int, n: int, tokens: float) -> None:
        self.index, self.n, self.tokens = index, n, tokens

    def outstanding_requests(self) -> int:
        return self.n

    def outstanding_tokens(self) -> float:
        return self.tokens


def test_least_loaded_dispatchers() -> None:
    pool = [_Fake(0, 3, 900.0), _Fake(1, 5, 100.0), _Fake(2, 2, 500.0)]
    r = Request(0, 0, 1, 1, 1)
    assert make_dispatcher("least-requests").choose(pool, r) == 2
    assert make_dispatcher("least-predicted-tokens").choose(pool, r) == 1
    # ties go to the lowest index
    assert make_dispatcher("least-requests").choose([_Fake(0, 1, 0), _Fake(1, 1, 0)], r) == 0


def test_power_of_two_is_seeded_and_picks_the_lighter_of_two() -> None:
    pool = [_Fake(i, n, 0.0) for i, n in enumerate([5, 0, 7, 9])]
    r = Request(0, 0, 1, 1, 1)
    d1 = make_dispatcher("power-of-two", np.random.default_rng(1))
    d2 = make_dispatcher("power-of-two", np.random.default_rng(1))
    s1 = [d1.choose(pool, r) for _ in range(50)]
    s2 = [d2.choose(pool, r) for _ in range(50)]
    assert s1 == s2
    assert 3 not in s1  # the heaviest instance can never win a pair
    assert 1 in s1


def test_least_predicted_tokens_tracks_decode_load(toy_profile: LatencyProfile) -> None:
    # Two decode instances. A huge predicted request goes first; the next three all go to the
    # other instance under least-predicted-tokens, alternate under round robin.
    reqs = [Request(0, 0.0, 10, 500, pred=10_000)] + [Request(i, 0.3 + 0.01 * i, 10, 20, pred=20)
                                                      for i in range(1, 4)]
    lpt = simulate(reqs, ClusterConfig(n_decode=2), PolicyConfig(dispatch="least-predicted-tokens"),
                   profile=toy_profile)
    rr = simulate(reqs, ClusterConfig(n_decode=2), PolicyConfig(dispatch="round-robin"), profile=toy_profile)
    # the short requests finish sooner when they avoid the busy instance
    assert lpt.t_finish[1:].max() < rr.t_finish[1:].max()


def test_registries_list_their_members() -> None:
    assert QUEUE_POLICIES.names() == ["fcfs", "gittins", "hrrn", "las", "mlfq", "oracle", "risk", "sjf", "srpt",
                                      "trail"]
    assert DISPATCHERS.names() == ["least-predicted-tokens", "least-requests", "power-of-two", "round-robin"]
