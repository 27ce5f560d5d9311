"""A policy arm's queue policies: built once per config for what a run does not change, and a fresh pair
per run (a run calibrates its boost policies in place: the kept pair must not carry one run's gamma into
the next)."""

from __future__ import annotations

import numpy as np

from lenpred.sched.boost import GAMMA, S_PER_TOKEN
from lenpred.sched.dists import LengthDist
from lenpred.sched.queue import QUEUE_POLICIES
from lenpred.sim.config import POLICY_PARAMS, ClusterConfig, PolicyConfig, SimConfig, policy_params
from lenpred.sim.engine import Simulator


def test_the_kept_pair_is_built_once_and_answers_needs_dist() -> None:
    arm = PolicyConfig(name="m", queue="mlfq", quantum=4.0)
    dec, pre = arm.queue_policies
    assert arm.queue_policies[0] is dec and arm.queue_policies[1] is pre  # cached, not rebuilt
    assert dec.params == {"quantum": 4.0, "join_ratio": 780.0} and pre.params == dec.params
    assert not arm.needs_dist
    assert PolicyConfig(queue="gittins").needs_dist
    assert PolicyConfig(queue="sjf", prefill_queue="risk").needs_dist  # a prefill queue counts too


def test_the_kept_pair_changes_neither_equality_nor_the_written_config() -> None:
    a = PolicyConfig(name="g", queue="gboost", gamma=2.0)
    a.queue_policies  # noqa: B018 - cache it on one side only
    b = PolicyConfig(name="g", queue="gboost", gamma=2.0)
    assert a == b and hash(a) == hash(b)
    assert "queue_policies" not in a.to_dict()
    cfg = SimConfig(policies=(a,))
    assert SimConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(seed=1).policies[0].queue_policies is not a.queue_policies  # a copy builds its own


def test_a_run_calibrates_its_own_pair_and_two_runs_agree(toy_profile, make_requests) -> None:
    arm = PolicyConfig(name="g", queue="gboost")
    kept = arm.queue_policies[0]

    def run() -> np.ndarray:
        reqs = make_requests(n=200, rate=60.0)
        for r in reqs:
            r.dist0 = LengthDist([max(1.0, r.pred * f) for f in (0.5, 1.0, 2.0)])
        sim = Simulator(reqs, ClusterConfig(n_decode=2), arm, profile=toy_profile)
        assert sim.decode[0].policy is not kept  # the run's own pair
        assert sim.decode[0].policy.gamma != GAMMA  # calibrated from the measured rate
        return sim.run().t_finish

    first = run()
    assert kept.gamma == GAMMA and kept.s_per_token == S_PER_TOKEN  # the kept pair was never calibrated
    np.testing.assert_array_equal(first, run())


def test_the_policy_parameters_are_those_the_queue_policies_take() -> None:
    taken = {k for name in QUEUE_POLICIES.names() for k in QUEUE_POLICIES.get(name).PARAMS}
    assert set(POLICY_PARAMS) == taken
    fields = list(PolicyConfig.model_fields)
    assert [f for f in fields if f in POLICY_PARAMS] == list(POLICY_PARAMS)  # field order (the dumped form)
    assert policy_params(PolicyConfig(queue="risk", beta=0.5)) == {"beta": 0.5}
    assert policy_params(PolicyConfig(queue="gboost", gamma=2.0, s_per_token=1e-4)) == {"gamma": 2.0,
                                                                                       "s_per_token": 1e-4}
