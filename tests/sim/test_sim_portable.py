"""The simulator gives the same result on every CPU (issue 39 part 1).

On an AMD EPYC (AVX2) and an Intel Xeon (AVX-512) the same config gave different preemption counts:
numpy's float64 ``exp`` runs a different kernel under AVX-512, so synthetic predictions differed in
the last bit, and the decode instances' running float sums of predicted tokens (added and taken away
in different orders) turned those bits into different dispatch choices. These tests hold the
property that makes results CPU-independent on whatever machine runs them: a last-bit change in
every prediction changes nothing, and the running sums are exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import Simulator
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import PRED_GRID, Request, on_grid
from lenpred.stats import portable

MakeRequests = Callable[..., list[Request]]

CLUSTERS = [ClusterConfig(n_prefill=1, n_decode=2, kv_capacity_tokens=3000),
            ClusterConfig(n_prefill=1, n_decode=3),
            ClusterConfig(mode="colocated", n_instances=2, kv_capacity_tokens=3000, preemption="swap")]
POLICIES = [PolicyConfig(name="sjf", queue="sjf", dispatch="least-predicted-tokens"),
            PolicyConfig(name="fcfs-lpt", dispatch="least-predicted-tokens")]


def _nudged(reqs: list[Request], direction: float) -> list[Request]:
    """The same requests with every prediction moved by one unit in the last place."""
    return [Request(r.rid, r.arrival, r.prompt, r.output, float(np.nextafter(r.pred, direction)))
            for r in reqs]


@pytest.mark.parametrize("cluster", CLUSTERS, ids=["disagg-kv", "disagg-3", "colocated-swap"])
@pytest.mark.parametrize("pol", POLICIES, ids=[p.name for p in POLICIES])
def test_a_last_bit_in_the_predictions_changes_nothing(cluster: ClusterConfig, pol: PolicyConfig,
                                                       make_requests: MakeRequests,
                                                       toy_profile: LatencyProfile) -> None:
    base = make_requests(n=400, rate=90.0, seed=3)
    runs = [Simulator(reqs, cluster, pol.policy, profile=toy_profile, check_invariants=True).run()
            for reqs in (base, _nudged(base, math.inf), _nudged(base, -math.inf))]
    for res in runs[1:]:
        assert np.array_equal(res.t_finish, runs[0].t_finish)
        assert np.array_equal(res.n_preempt, runs[0].n_preempt)


def test_predictions_lie_on_the_grid() -> None:
    r = Request(0, 0.0, 10, 50, 12.3456789, repred=[(4, 7.123456789)])
    assert r.pred * PRED_GRID == int(r.pred * PRED_GRID)
    assert abs(r.pred - 12.3456789) <= 0.5 / PRED_GRID
    assert r.repred[0][1] == on_grid(7.123456789)
    assert on_grid(math.inf) == math.inf and math.isnan(on_grid(math.nan))
    # sums of grid values are exact whatever the order: the load of an emptied instance is 0.0
    xs = [on_grid(v) for v in np.random.default_rng(0).lognormal(5.0, 1.0, 1000)]
    total = 0.0
    for v in xs:
        total += v
    for v in reversed(xs):
        total -= v
    assert total == 0.0


def test_portable_exp_is_the_c_library() -> None:
    x = np.random.default_rng(1).normal(0.0, 3.0, 2000)
    assert portable.exp(x).tolist() == [math.exp(v) for v in x]
    assert portable.expm1(x).tolist() == [math.expm1(v) for v in x]
    assert portable.exp(np.array([1e6, -1e6, math.nan])).tolist()[:2] == [math.inf, 0.0]
    assert portable.expm1(np.array([[800.0]])).shape == (1, 1)
