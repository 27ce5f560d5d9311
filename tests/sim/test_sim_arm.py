"""A policy arm: its queue policy as the policy's own typed parameters (written so, read so or from flat keys,
validated by the same model), its queue policies built once per config for what a run does not change, and a
fresh pair per run (a run calibrates its boost policies in place: the kept pair must not carry one run's gamma
into the next)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from lenpred.errors import ConfigError
from lenpred.route.config import PriorityConfig
from lenpred.sched.boost import GAMMA, S_PER_TOKEN
from lenpred.sched.dists import LengthDist
from lenpred.sched.params import FLAT_KEYS, QueueParams
from lenpred.sched.queue import QUEUE_POLICIES, MLFQParams, SkipJoinMLFQ, make_queue_policy, queue_params
from lenpred.sim.config import ArmPolicy, ClusterConfig, PolicyConfig, SimConfig
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


def test_each_policy_holds_its_own_parameters_and_the_union_holds_every_policy() -> None:
    for name in QUEUE_POLICIES.names():
        cls = QUEUE_POLICIES.get(name)
        assert cls.name == name and cls.Params.model_fields["name"].default == name, name  # the union's tag
        assert queue_params(name) == cls.Params() and type(make_queue_policy(name).config) is cls.Params
    assert {m.model_fields["name"].default for m in get_args(get_args(QueueParams)[0])} == set(QUEUE_POLICIES.names())
    containers = set(PolicyConfig.model_fields) | set(PriorityConfig.model_fields)
    assert not FLAT_KEYS & containers  # a flat key beside queue is never one of the arm's or the router's own
    assert PolicyConfig(queue="risk", beta=0.5).policy.queue.own() == {"beta": 0.5, "alpha": 0.9}
    assert PolicyConfig(queue="gboost", gamma=2.0, s_per_token=1e-4).queue.own() == {"gamma": 2.0, "s_per_token": 1e-4}
    schema = PolicyConfig.json_schema()
    assert list(SimConfig.json_schema()["$defs"]["PolicyConfig"]["properties"]) == list(schema["properties"])
    assert {"mapping", "propertyName"} <= set(schema["properties"]["queue"]["discriminator"])


FORMAT = json.loads((Path(__file__).parent / "arm_format.json").read_text())


def test_the_written_config_is_the_typed_format() -> None:
    pols = {k: PolicyConfig.from_dict(c) for k, c in FORMAT["cases"].items()}
    for k, p in pols.items():
        assert p.to_json() == FORMAT["to_json"][k], k
        assert PolicyConfig.from_dict(p.to_dict()) == p  # the typed form reads back to the same arm
        assert PolicyConfig.from_dict(json.loads(FORMAT["legacy_to_json"][k])) == p, k  # and the flat one of before
    cfg = SimConfig(name="arms", policies=tuple(pols.values()))
    assert json.dumps(cfg.to_dict(), indent=2) + "\n" == FORMAT["config_json"]  # SweepResult.write's config.json


def test_a_flat_file_and_its_typed_equivalent_give_the_same_policy() -> None:
    flat = PolicyConfig.from_dict({"name": "m", "queue": "mlfq", "quantum": 4, "join_ratio": 500, "preempt": False})
    typed = PolicyConfig.from_dict({"name": "m", "queue": {"name": "mlfq", "quantum": 4, "join_ratio": 500,
                                                           "preempt": False}})
    assert flat == typed and flat.to_dict() == typed.to_dict()
    assert flat.queue == MLFQParams(quantum=4.0, join_ratio=500.0, preempt=False)
    assert PolicyConfig(name="m", queue=MLFQParams(quantum=4.0, join_ratio=500.0, preempt=False)) == flat
    a, b = (make_queue_policy(x.queue) for x in (flat, typed))
    assert (type(a), a.params, a.preempt) == (type(b), b.params, b.preempt) == (SkipJoinMLFQ, {"quantum": 4.0,
                                                                                               "join_ratio": 500.0}, False)
    assert flat.replace(quantum=2).queue.quantum == 2.0  # replace() takes flat keys too
    assert PolicyConfig(queue="sjf") == PolicyConfig(queue={"name": "sjf"})  # a name alone: its defaults
    # a flat key of null is not given, and 0 aging / quantile_z are off (every arm was written with both)
    assert PolicyConfig.from_dict({"queue": "las", "aging": 0.0, "quantile_z": 0.0, "quantum": None}) == \
        PolicyConfig(queue="las")


def test_the_prefill_queue_gets_what_it_gets_before() -> None:
    def pre(**kw: object) -> dict:
        p = PolicyConfig(**kw).policy.queue_policies[1]
        return {"cls": type(p).__name__, "aging": p.aging, "quantile_z": p.quantile_z, **p.params}

    assert pre(queue="mlfq", quantum=4.0, preempt=False) == {"cls": "SkipJoinMLFQ", "aging": 0.0, "quantile_z": 0.0,
                                                            "quantum": 4.0, "join_ratio": 780.0}
    assert PolicyConfig(queue="mlfq", preempt=False).policy.queue_policies[1].preempt  # prefill: the default
    assert pre(queue="srpt", aging=50.0, prefill_queue="sjf") == {"cls": "ShortestPredictedJobFirst", "aging": 50.0,
                                                                  "quantile_z": 0.0}
    assert pre(queue="sjf", aging=50.0, quantile_z=1.0, prefill_queue="fcfs") == {"cls": "FCFS", "aging": 0.0,
                                                                                  "quantile_z": 0.0}
    assert pre(queue="sjf", quantile_z=-1.0, prefill_queue="srpt") == {"cls": "ShortestPredictedRemaining",
                                                                       "aging": 0.0, "quantile_z": 0.0}


@pytest.mark.parametrize(("arm", "message"), [
    ({"queue": "las", "aging": 5}, "queue: policy 'las' takes no aging (got 5) -- fix: drop aging"),
    ({"queue": "fcfs", "aging": 50}, "queue: policy 'fcfs' takes no aging (got 50)"),
    ({"queue": "sjf", "quantum": 3}, "queue: policy 'sjf' takes no parameter 'quantum' -- fix: its parameters: "
                                     "preempt, aging, quantile_z"),
    ({"queue": {"name": "las", "beta": 1}}, "queue: policy 'las' takes no parameter 'beta' -- fix: its parameters: "
                                            "preempt, quantum"),
    ({"queue": "risk", "quantile_z": -1.28}, "queue: policy 'risk' takes no parameter 'quantile_z' -- fix: its "
                                             "parameters: preempt, aging, beta, alpha"),
    ({"queue": "las", "quantum": 0.1}, "queue: policy 'las': quantum must be in [1, 1e+06], got 0.1"),
    ({"queue": "sjf", "aging": -1}, "queue: policy 'sjf': aging must be in [0, inf), got -1"),
    ({"queue": "risk", "alpha": 1.0}, "queue: policy 'risk': alpha must be in (0, 1), got 1.0"),
    ({"queue": "gboost", "gamma": True}, "queue: policy 'gboost': gamma must be \"auto\" or a number in (0, inf) "
                                         "(1/s, e.g. 0.07 for two one-slot llama.cpp servers), got True"),
    ({"queue": "mlfq", "preempt": "x"}, "queue: preempt: Input should be a valid boolean"),
    ({"queue": "sjf", "aging": True}, "queue: policy 'sjf': aging must be a number, got True"),
    ({"queue": {"name": "lifo"}}, "queue: unknown queue policy 'lifo' -- fix: use one of: boost2, fcfs, gboost"),
    ({"queue": "sjf", "prefill_queue": "lifo"}, "prefill_queue: unknown queue policy 'lifo' -- fix: use one of"),
    ({"name": ""}, "name: every policy needs a non-empty name"),
    ({"victim": "newest"}, "unknown victim 'newest' -- fix: use one of: policy, latest"),
    ({"dispatch": "fastest"}, "unknown dispatch 'fastest' -- fix: use one of: least-kv, least-observed-load"),
])
def test_a_key_or_value_the_policy_does_not_take_is_one_line_naming_what_it_takes(arm: dict, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        PolicyConfig.from_dict(arm)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=re.escape(message)):  # inside a simulator config: with its path
        SimConfig.from_dict({"policies": [{"name": "a", **arm}] if "name" not in arm else [arm]})


def test_a_typed_arm_is_checked_by_its_policy_too() -> None:
    with pytest.raises(ConfigError, match="policy 'las' takes no aging"):
        ArmPolicy(queue={"name": "las", "aging": 3.0})
    with pytest.raises(ConfigError, match="unknown victim"):
        ArmPolicy(victim="newest")
    with pytest.raises(ConfigError, match="policy 'las' takes no parameter 'beta' -- fix: its parameters: preempt, "
                                          "quantum"):
        ArmPolicy(queue={"name": "las", "beta": 1.0})  # said as the policy says it, not as a union's tag error
    with pytest.raises(ConfigError, match="unknown queue policy 'lifo'"):
        ArmPolicy(queue={"name": "lifo"})
