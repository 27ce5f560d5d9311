"""Queue policies and dispatchers inside the simulator: the service order one instance gives, the decode
instance least-predicted-tokens picks (their keys and choices alone: tests/sched)."""

from __future__ import annotations

import numpy as np
import pytest

from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import simulate
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request
from sched_testing import queue


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
    res = simulate(reqs, cluster, PolicyConfig(queue=policy).policy, profile=toy_profile)
    got = [int(x) for x in res.rid[np.argsort(res.t_first)] if x != 9]
    assert got == expected


def test_least_predicted_tokens_tracks_decode_load(toy_profile: LatencyProfile) -> None:
    # Two decode instances. A huge predicted request goes first; the next three all go to the
    # other instance under least-predicted-tokens, alternate under round robin.
    reqs = [Request(0, 0.0, 10, 500, pred=10_000)] + [Request(i, 0.3 + 0.01 * i, 10, 20, pred=20)
                                                      for i in range(1, 4)]
    lpt = simulate(reqs, ClusterConfig(n_decode=2), PolicyConfig(dispatch="least-predicted-tokens").policy,
                   profile=toy_profile)
    rr = simulate(reqs, ClusterConfig(n_decode=2), PolicyConfig(dispatch="round-robin").policy, profile=toy_profile)
    # the short requests finish sooner when they avoid the busy instance
    assert lpt.t_finish[1:].max() < rr.t_finish[1:].max()

