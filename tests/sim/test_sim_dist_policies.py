"""Distribution-aware policies in the simulator: hand-checkable traces (SJF starves a wide prompt's short
sample, Gittins does not; preemptions counted), the oracle distribution's table, and bad input (the ranks
and keys alone: tests/sched)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from lenpred.errors import ConfigError, DataError, LenpredError
from lenpred.predictions import Predictions
from lenpred.sched.dists import LengthDist
from lenpred.sim.config import ClusterConfig, PolicyConfig
from lenpred.sim.engine import Simulator
from lenpred.sim.predictions import other_samples_table
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import Request


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
    sim = Simulator(reqs, ClusterConfig(n_prefill=1, n_decode=1, link_gbps=1e6), PolicyConfig(queue=queue, **kw).policy,
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
    ({"queue": "sjf", "aging": -5.0}, r"aging must be in \[0, inf\)"),
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
        Simulator([Request(0, 0.0, 5, 5, 5.0)], policy=PolicyConfig(queue="risk").policy)


def test_repredictions_must_increase_in_tokens_generated() -> None:
    with pytest.raises(LenpredError, match="strictly increasing"):
        Request(0, 0.0, 5, 50, 20.0, repred=[(10, 5.0), (10, 4.0)])
    assert math.isnan(Request(0, 0.0, 5, 50, 20.0, repred=[(10, 5.0), (11, 4.0)]).t_left)
