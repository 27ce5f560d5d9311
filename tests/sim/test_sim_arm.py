"""A policy arm: typed per-policy parameters read from and written as today's flat keys (byte for byte), its
queue policies built once per config for what a run does not change, and a fresh pair per run (a run
calibrates its boost policies in place: the kept pair must not carry one run's gamma into the next)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lenpred.errors import ConfigError
from lenpred.sched.boost import GAMMA, S_PER_TOKEN
from lenpred.sched.dists import LengthDist
from lenpred.sched.params import MLFQParams, PlainParams, params_model
from lenpred.sched.queue import QUEUE_POLICIES
from lenpred.sim.config import POLICY_PARAMS, ArmPolicy, ClusterConfig, PolicyConfig, SimConfig
from lenpred.sim.engine import Simulator


def test_the_kept_pair_is_built_once_and_answers_needs_dist() -> None:
    arm = PolicyConfig(name="m", queue="mlfq", quantum=4.0)
    dec, pre = arm.policy.queue_policies
    assert arm.policy.queue_policies[0] is dec and arm.policy.queue_policies[1] is pre  # cached, not rebuilt
    assert dec.params == {"quantum": 4.0, "join_ratio": 780.0} and pre.params == dec.params
    assert not arm.needs_dist
    assert PolicyConfig(queue="gittins").needs_dist
    assert PolicyConfig(queue="sjf", prefill_queue="risk").needs_dist  # a prefill queue counts too


def test_the_kept_pair_changes_neither_equality_nor_the_written_config() -> None:
    a = PolicyConfig(name="g", queue="gboost", gamma=2.0)
    a.policy.queue_policies  # noqa: B018 - cache it on one side only
    b = PolicyConfig(name="g", queue="gboost", gamma=2.0)
    assert a == b and hash(a) == hash(b)
    assert "queue_policies" not in a.to_dict()
    cfg = SimConfig(policies=(a,))
    assert SimConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.replace(seed=1).policies[0].policy.queue_policies is not a.policy.queue_policies  # a copy builds its own


def test_a_run_calibrates_its_own_pair_and_two_runs_agree(toy_profile, make_requests) -> None:
    arm = PolicyConfig(name="g", queue="gboost")
    kept = arm.policy.queue_policies[0]

    def run() -> np.ndarray:
        reqs = make_requests(n=200, rate=60.0)
        for r in reqs:
            r.dist0 = LengthDist([max(1.0, r.pred * f) for f in (0.5, 1.0, 2.0)])
        sim = Simulator(reqs, ClusterConfig(n_decode=2), arm.policy, profile=toy_profile)
        assert sim.decode[0].policy is not kept  # the run's own pair
        assert sim.decode[0].policy.gamma != GAMMA  # calibrated from the measured rate
        return sim.run().t_finish

    first = run()
    assert kept.gamma == GAMMA and kept.s_per_token == S_PER_TOKEN  # the kept pair was never calibrated
    np.testing.assert_array_equal(first, run())


def test_the_policy_parameters_are_those_the_queue_policies_take() -> None:
    taken = {k for name in QUEUE_POLICIES.names() for k in QUEUE_POLICIES.get(name).PARAMS}
    assert set(POLICY_PARAMS) == taken
    keys = list(PolicyConfig.json_schema()["properties"])  # the flat file format, alone or in a SimConfig's
    assert list(SimConfig.json_schema()["$defs"]["PolicyConfig"]["properties"]) == keys
    assert [k for k in keys if k in POLICY_PARAMS] == list(POLICY_PARAMS)  # key order (the dumped form)
    for name in QUEUE_POLICIES.names():  # each policy's typed model holds exactly the parameters it takes
        own = set(params_model(name).model_fields) - set(PlainParams.model_fields)
        assert own == set(QUEUE_POLICIES.get(name).PARAMS), name
    assert PolicyConfig(queue="risk", beta=0.5).policy.queue.own() == {"beta": 0.5}
    assert PolicyConfig(queue="gboost", gamma=2.0, s_per_token=1e-4).policy.queue.own() == {"gamma": 2.0,
                                                                                          "s_per_token": 1e-4}


FORMAT = json.loads((Path(__file__).parent / "arm_format.json").read_text())


def test_the_written_config_is_byte_identical_to_the_flat_format_of_before() -> None:
    pols = {k: PolicyConfig.from_dict(c) for k, c in FORMAT["cases"].items()}
    for k, p in pols.items():
        assert p.to_json() == FORMAT["to_json"][k], k
        assert PolicyConfig.from_dict(p.to_dict()) == p  # the flat form reads back to the same arm
    cfg = SimConfig(name="arms", policies=tuple(pols.values()))
    assert json.dumps(cfg.to_dict(), indent=2) + "\n" == FORMAT["config_json"]  # SweepResult.write's config.json


def test_flat_keys_land_in_the_typed_parameters_of_their_policy() -> None:
    arm = PolicyConfig.from_dict({"name": "m", "queue": "mlfq", "quantum": 4, "join_ratio": 500, "preempt": False})
    assert arm.policy.queue == MLFQParams(name="mlfq", quantum=4.0, join_ratio=500.0, preempt=False)
    typed = PolicyConfig(name="m", policy=ArmPolicy(queue=MLFQParams(name="mlfq", quantum=4.0, join_ratio=500.0,
                                                                     preempt=False)))
    assert typed == arm and typed.to_dict() == arm.to_dict()
    assert arm.replace(quantum=2).policy.queue.quantum == 2.0  # replace() takes flat keys too


@pytest.mark.parametrize(("flat", "message"), [
    ({"queue": "las", "aging": 5}, "policy 'fcfs-rr': policy 'las' takes no aging (got 5.0)"),
    ({"queue": "fcfs", "aging": 50}, "policy 'fcfs-rr': policy 'fcfs' takes no aging (got 50.0)"),
    ({"queue": "sjf", "quantum": 3}, "policy 'fcfs-rr': policy 'sjf' takes no parameter 'quantum'"),
    ({"queue": "las", "beta": 1, "quantum": 0.1}, "policy 'fcfs-rr': policy 'las': quantum must be in [1, 1e+06]"),
    ({"name": "", "queue": "lifo"}, "every policy needs a non-empty name"),  # the name is checked first
    ({"queue": "lifo", "aging": -1}, "policy 'fcfs-rr': aging must be >= 0"),  # then the aging's sign
])
def test_a_parameter_the_policy_does_not_take_is_refused_as_before(flat: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        PolicyConfig.from_dict(flat)
    assert e.value.problem.startswith(message)


def test_a_typed_arm_is_checked_by_its_policy_too() -> None:
    with pytest.raises(ConfigError, match="policy 'las' takes no aging"):
        ArmPolicy(queue={"name": "las", "aging": 3.0})
    with pytest.raises(ConfigError, match="unknown victim"):
        ArmPolicy(victim="newest")
    with pytest.raises(ConfigError, match="policy 'las' takes no parameter 'beta' -- fix: its parameters: quantum"):
        ArmPolicy(queue={"name": "las", "beta": 1.0})  # said as the policy says it, not as a union's tag error
    with pytest.raises(ConfigError, match="unknown queue policy 'lifo'"):
        ArmPolicy(queue={"name": "lifo"})
