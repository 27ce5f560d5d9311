"""Bad inputs of `lenpred route` (rows for tests/test_bad_input.py): the router's config is checked before
anything starts, so each of these exits 1 with one line naming the problem and the fix, and listens on
nothing. (Bad *requests* to a running router are tested in tests/route/test_router_stub.py and
tests/route/test_router_door.py.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from bad_input_harness import BadInput

_OK_BACKENDS = [{"url": "http://127.0.0.1:9"}]
_HEADS = Path(__file__).resolve().parents[2] / "data" / "heads"
_held: list[socket.socket] = []  # a listening socket kept open while its row runs


def _cfg(data: object, name: str = "router.json"):  # a setup callable
    def setup(tmp: Path) -> dict[str, Path]:
        p = tmp / name
        p.write_text(data if isinstance(data, str) else json.dumps(data))
        return {"cfg": p}

    return setup


def _port_taken(tmp: Path) -> dict[str, Path]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    _held.append(s)
    return _cfg({"backends": _OK_BACKENDS, "port": s.getsockname()[1]})(tmp)


def _route(expect: str, setup=None, argv: list[str] | None = None) -> tuple:
    return argv or ["route", "--config", "{cfg}"], setup, expect


_ROWS = {
    "route-no-config": (["route"], None, "no config given -- fix: pass --config FILE"),
    "route-config-missing": (["route", "--config", "{tmp}/nope.json"], None, "config file"),
    "route-config-not-json": _route("is not valid JSON (line 1", _cfg('{"backends": [')),
    "route-unknown-key": _route("config.backend: unknown key -- fix: valid keys: mode, host",
                                _cfg({"backend": _OK_BACKENDS})),
    "route-no-backends": _route("backends is empty -- fix: list at least one backend", _cfg({"backends": []})),
    "route-bad-url": _route("backends[0].url: backend url 'localhost:8000' is not an http(s) URL",
                            _cfg({"backends": [{"url": "localhost:8000"}]})),
    "route-bad-policy": _route("config.policy: unknown policy 'shortest' -- fix: use one of: least-kv, least-observed-load",
                               _cfg({"backends": _OK_BACKENDS, "policy": "shortest"})),
    "route-bad-priority-mode": _route("backends[0].priority", _cfg({"backends": [{"url": "http://h:1",
                                                                                 "priority": "yes"}]})),
    "route-unknown-queue": _route("config.priority.queue: unknown queue policy 'shortest' -- fix: use one of: auto, boost2, fcfs, gboost, sjf",
                                  _cfg({"backends": _OK_BACKENDS, "priority": {"queue": "shortest"}})),
    # issue 37: a dispatcher that reads predictions, with no estimator to make them
    "route-dispatch-needs-prediction": _route(
        "policy 'least-predicted-tokens' dispatches by predicted tokens, and estimator kind 'none' gives no prediction",
        _cfg({"backends": _OK_BACKENDS, "policy": "least-predicted-tokens", "estimator": {"kind": "none"}})),
    "route-queue-needs-engine": _route("queue policy 'gittins' cannot order the router's queue",
                                       _cfg({"backends": _OK_BACKENDS, "priority": {"queue": "gittins"}})),
    "route-negative-aging": _route("config.priority.queue: policy 'sjf': aging must be in [0, inf), got -5",
                                   _cfg({"backends": _OK_BACKENDS, "priority": {"queue": "sjf", "aging": -5}})),
    "route-negative-drain": _route("timeouts.drain_s must be >= 0",
                                   _cfg({"backends": _OK_BACKENDS, "timeouts": {"drain_s": -1}})),
    "route-annotate-two": _route("mode 'annotate' forwards to one upstream",
                                 _cfg({"mode": "annotate", "backends": [{"url": "http://a:1"}, {"url": "http://b:1"}]})),
    "route-remote-no-url": _route("estimator.url is required for kind 'remote'",
                                  _cfg({"backends": _OK_BACKENDS, "estimator": {"kind": "remote"}})),
    "route-head-missing": _route("estimator.head: no head directory at",
                                 _cfg({"backends": _OK_BACKENDS,
                                       "estimator": {"kind": "head", "head": "/nonexistent/head"}})),
    "route-two-backends-one-url": _route("backend url 'http://127.0.0.1:8001' is listed 2 times",
                                         _cfg({"backends": [{"url": "http://127.0.0.1:8001", "name": "a"},
                                                            {"url": "http://127.0.0.1:8001/v1", "name": "b"}]})),
    "route-check-two-backends-one-url": _route(
        "backend url 'http://127.0.0.1:8001' is listed 2 times",
        _cfg({"backends": [{"url": "http://127.0.0.1:8001", "name": "a"}, {"url": "http://127.0.0.1:8001", "name": "b"}]}),
        ["route", "--config", "{cfg}", "--check"]),
    "route-port-taken": _route("cannot listen on 127.0.0.1:", _port_taken),
    # issue 31: an inline head over its latency budget (1 ns: too slow on any machine), a proxy runtime on a
    # head that is not a proxy
    "route-inline-too-slow": _route("over the inline budget of 1e-06 ms p50 / 5 ms p99 -- fix: use estimator kind "
                                    "'head'", _cfg({"backends": _OK_BACKENDS, "estimator": {
                                        "kind": "inline", "head": str(_HEADS / "gbdt-smollm2-sharegpt"),
                                        "inline_p50_ms": 1e-6, "inline_check_calls": 3}})),
    "route-inline-runtime-not-proxy": _route("runtime 'onnx' applies to the proxy head's encoder",
                                             _cfg({"backends": _OK_BACKENDS, "estimator": {
                                                 "kind": "inline", "head": str(_HEADS / "ngram-smollm2-sharegpt"),
                                                 "runtime": "onnx"}})),
    # issue 39: a backend URL with a path was kept without a word (every request a 404 at .../v1/chat/completions/v1/
    # chat/completions); a boolean written as a word was read as true. With --check: today's code would print the
    # config and exit 0
    "route-backend-url-with-path": _route(
        "backends[0].url: backend url 'http://127.0.0.1:8000/v1/chat/completions' has the path '/v1/chat/completions'; "
        "the router adds /v1/chat/completions and the other endpoints itself -- fix: give the server's root URL, "
        "http://127.0.0.1:8000", _cfg({"backends": [{"url": "http://127.0.0.1:8000/v1/chat/completions"}]}),
        ["route", "--config", "{cfg}", "--check"]),
    "route-backend-url-prefix": _route(
        "backend url 'http://gw:80/llm' has the path '/llm'", _cfg({"backends": [{"url": "http://gw:80/llm"}]}),
        ["route", "--config", "{cfg}", "--check"]),
    "route-hints-osl-word": _route("config.hints.osl: input should be a valid boolean",
                                   _cfg({"backends": _OK_BACKENDS, "hints": {"osl": "yes"}}),
                                   ["route", "--config", "{cfg}", "--check"]),
    "route-flatten-content-word": _route("config.backends[0].flatten_content: input should be a valid boolean",
                                         _cfg({"backends": [{"url": "http://h:1", "flatten_content": "true"}]}),
                                         ["route", "--config", "{cfg}", "--check"]),
}

CASES: list[BadInput] = [BadInput(k, argv, setup, expect=expect) for k, (argv, setup, expect) in _ROWS.items()]
