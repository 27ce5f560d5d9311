"""Dispatch choices on hand-made pools: round robin, the least loaded, power of two choices."""

from __future__ import annotations

import numpy as np

from lenpred.sched.dispatch import DISPATCHERS, make_dispatcher
from lenpred.sim.request import Request


def test_round_robin_cycles() -> None:
    d = make_dispatcher("round-robin")
    pool = [_Fake(i, 0, 0.0) for i in range(3)]
    assert [d.choose(pool, Request(0, 0, 1, 1, 1)) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


class _Fake:
    def __init__(self, index: int, n: int, tokens: float, observed: float = 0.0) -> None:
        self.index, self.n, self.tokens, self.observed = index, n, tokens, observed

    def outstanding_requests(self) -> int:
        return self.n

    def outstanding_tokens(self) -> float:
        return self.tokens

    def observed_tokens(self) -> float:
        return self.observed


def test_least_loaded_dispatchers() -> None:
    pool = [_Fake(0, 3, 900.0), _Fake(1, 5, 100.0), _Fake(2, 2, 500.0)]
    r = Request(0, 0, 1, 1, 1)
    assert make_dispatcher("least-requests").choose(pool, r) == 2
    assert make_dispatcher("least-predicted-tokens").choose(pool, r) == 1
    # ties go to the lowest index
    assert make_dispatcher("least-requests").choose([_Fake(0, 1, 0), _Fake(1, 1, 0)], r) == 0


def test_observed_load_dispatchers_read_no_prediction() -> None:
    # (requests, predicted tokens, observed tokens)
    pool = [_Fake(0, 2, 10.0, 5000.0), _Fake(1, 2, 9000.0, 300.0), _Fake(2, 3, 0.0, 100.0)]
    r = Request(0, 0, 1, 1, 1)
    assert make_dispatcher("least-observed-load").choose(pool, r) == 1  # 2 requests each: fewer tokens held
    assert make_dispatcher("least-kv").choose(pool, r) == 2
    assert make_dispatcher("least-predicted-tokens").choose(pool, r) == 2
    tie = [_Fake(0, 1, 0.0, 7.0), _Fake(1, 1, 0.0, 7.0)]
    assert make_dispatcher("least-observed-load").choose(tie, r) == 0 and make_dispatcher("least-kv").choose(tie, r) == 0
    needs = sorted(n for n in DISPATCHERS.names() if DISPATCHERS.get(n).needs_prediction)
    assert needs == ["least-predicted-time", "least-predicted-tokens", "least-requests-predicted"]


def test_the_hybrid_breaks_jsq_ties_by_prediction_only() -> None:
    # (requests, predicted tokens): the count decides; the prediction only among the fewest
    pool = [_Fake(0, 3, 10.0), _Fake(1, 2, 900.0), _Fake(2, 2, 400.0), _Fake(3, 4, 0.0)]
    assert make_dispatcher("least-requests-predicted").choose(pool) == 2
    assert make_dispatcher("least-requests").choose(pool) == 1
    assert make_dispatcher("least-predicted-tokens").choose(pool) == 3


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


def test_the_registry_lists_its_members() -> None:
    assert DISPATCHERS.names() == ["least-kv", "least-observed-load", "least-predicted-time", "least-predicted-tokens",
                                   "least-requests", "least-requests-per-speed", "least-requests-predicted",
                                   "power-of-two", "round-robin"]


def test_the_request_is_optional() -> None:
    # the router dispatches on load alone: the same choice without a request
    pool = [_Fake(0, 3, 900.0), _Fake(1, 5, 100.0), _Fake(2, 2, 500.0)]
    for name in DISPATCHERS.names():
        with_req = make_dispatcher(name, np.random.default_rng(3))
        without = make_dispatcher(name, np.random.default_rng(3))
        assert [with_req.choose(pool, Request(0, 0, 1, 1, 1)) for _ in range(5)] == [without.choose(pool) for _ in range(5)]


class _Fast(_Fake):
    def __init__(self, index: int, n: int, tokens: float, speed: float) -> None:
        super().__init__(index, n, tokens)
        self.speed = speed


def test_speed_aware_dispatchers_count_in_each_instance_s_own_time() -> None:
    # (requests, predicted tokens, speed): instance 1 is twice as fast
    pool = [_Fast(0, 2, 400.0, 1.0), _Fast(1, 4, 700.0, 2.0)]
    assert make_dispatcher("least-requests").choose(pool) == 0
    assert make_dispatcher("least-requests-per-speed").choose(pool) == 1  # 5 / 2 < 3 / 1
    assert make_dispatcher("least-requests-per-speed").choose([_Fast(0, 1, 0, 1.0), _Fast(1, 4, 0, 2.0)]) == 0  # 2 < 5 / 2
    assert make_dispatcher("least-predicted-tokens").choose(pool) == 0
    assert make_dispatcher("least-predicted-time").choose(pool) == 1  # 400 / 1 > 700 / 2
    # an instance without a speed counts as 1: equal to least-requests / least-predicted-tokens
    plain = [_Fake(0, 3, 900.0), _Fake(1, 5, 100.0), _Fake(2, 2, 500.0)]
    assert make_dispatcher("least-requests-per-speed").choose(plain) == make_dispatcher("least-requests").choose(plain)
    assert make_dispatcher("least-predicted-time").choose(plain) == make_dispatcher("least-predicted-tokens").choose(plain)
