"""The router's priority keys and field values on a fixed request list, for a set of router configs,
exactly as they were before the policy config took one shape (issue 39 part 4): ``priority_keys.jsonl``
was written by the router of 70b661e, except the ``sjf-default`` rows, whose default aging is now the
simulator's 0 (it was 1,000 tokens per second in the router): they equal the ``sjf-aging0`` rows; and the
``default-remote`` rows, whose queue is now FCFS (issue 37 part 5: the router's default is the best arm that needs no
prediction, late-binding FCFS): they equal the ``default-none`` rows."""

from __future__ import annotations

import json
from pathlib import Path

from lenpred.route.config import RouterConfig
from lenpred.route.priority import PriorityMapper

CONFIGS = [
    ("default-none", "none", {}),
    ("default-chars", "chars", {}),
    ("default-remote", "remote", {}),
    ("fcfs", "remote", {"queue": "fcfs", "enabled": True}),
    ("sjf-aging1000", "remote", {"queue": "sjf", "aging": 1000}),
    ("sjf-aging10-z1-tpl10", "remote", {"queue": "sjf", "aging": 10, "quantile_z": 1.0, "tokens_per_level": 10}),
    ("sjf-aging0", "remote", {"queue": "sjf", "aging": 0}),
    ("sjf-default", "remote", {"queue": "sjf"}),
    ("boost2-default", "remote", {"queue": "boost2"}),
    ("boost2-10-200", "remote", {"queue": "boost2", "boost_s": 10, "short_threshold": 200}),
    ("gboost-pinned", "remote", {"queue": "gboost", "gamma": 0.07, "s_per_token": 0.0125}),
    ("gboost-auto", "remote", {"queue": "gboost"}),
    ("gboost-clip", "remote", {"queue": "gboost", "gamma": 1.0, "s_per_token": 0.01, "min": 0, "max": 100000}),
]
# (predicted tokens, spread, arrival in seconds since the router started)
REQUESTS = [(None, None, 0.0), (10.0, None, 0.5), (100.0, 50.0, 1.0), (224.0, 0.0, 1.5), (223.0, 10.0, 1.75),
            (199.0, 99.5, 2.0), (1000.0, 500.0, 2.5), (3.0, 1.5, 3.0), (512.0, None, 10.0), (50.0, 25.0, 3600.0)]


def _rows(typed: bool) -> list[dict]:
    out = []
    for name, kind, prio in CONFIGS:
        if typed and "queue" in prio:  # the same config with the policy as its typed object
            own = {k: v for k, v in prio.items() if k not in ("queue", "enabled", "tokens_per_level", "min", "max")}
            rest = {k: v for k, v in prio.items() if k not in own and k != "queue"}
            prio = {**rest, "queue": {"name": prio["queue"], **own}}
        est = {"kind": kind, "url": "http://127.0.0.1:8100"} if kind == "remote" else {"kind": kind}
        cfg = RouterConfig.from_dict({"backends": [{"url": "http://127.0.0.1:9"}], "estimator": est, "priority": prio})
        m = PriorityMapper(cfg.priority, cfg.default_tokens, t0=0.0, queue=cfg.queue_policy)
        for tokens, spread, now in REQUESTS:
            k = m.key(tokens, spread, now)
            out.append({"config": name, "queue": m.queue, "sends": cfg.priority.sends, "req": [tokens, spread, now],
                        "key": repr(k), "value": m.value(k)})
    return out


def test_the_priority_keys_of_a_fixed_request_list_are_those_of_before() -> None:
    want = [json.loads(line) for line in (Path(__file__).parent / "priority_keys.jsonl").read_text().splitlines()]
    assert _rows(typed=False) == want
    assert _rows(typed=True) == want  # flat keys and the typed object: the same policy, the same keys
    by = {(r["config"], tuple(r["req"])): r for r in want}
    assert all(by["sjf-default", tuple(q)]["key"] == by["sjf-aging0", tuple(q)]["key"] for q in REQUESTS)
    assert all(by["default-remote", tuple(q)]["key"] == by["default-none", tuple(q)]["key"] for q in REQUESTS)
