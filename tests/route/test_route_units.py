"""The router's parts without sockets: config checks, request checks, SSE counting, the load model,
priority with aging, the dispatch pool and its wait queue, the estimators and their fallback."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from lenpred.errors import ConfigError
from lenpred.route.backends import Flight, Pool, QueueFull, QueueTimeout, expected_remaining
from lenpred.route.bodies import ApiError, SSECounter, flatten_content, parse_request
from lenpred.route.config import BackendConfig, PriorityConfig, RouterConfig, normalize_url
from lenpred.route.estimators import CharsEstimator, EstimateFailed, RemoteEstimator, WithFallback
from lenpred.route.priority import PriorityMapper
from lenpred.sched.queue import make_queue_policy

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- config
@pytest.mark.parametrize(("data", "expect"), [
    ({"backends": []}, "backends is empty"),
    ({"backends": [{"url": "ftp://x"}]}, "backends[0].url: backend url 'ftp://x' is not an http(s) URL"),
    ({"backends": [{"url": "http://a:99999"}]}, "invalid port"),
    ({"backends": [{"url": "http://a:1"}], "policy": "fastest"}, "unknown policy 'fastest' -- fix: use one of: "
                                                                 "least-kv, least-observed-load, least-predicted-time, "
                                                                 "least-predicted-tokens"),
    ({"backends": [{"url": "http://a:1"}], "polcy": "x"}, "config.polcy: unknown key -- fix: valid keys: mode"),
    ({"backends": [{"url": "http://a:1", "weight": 2}]}, "backends[0].weight: unknown key"),
    ({"backends": [{"url": "http://a:1"}, {"url": "http://a:1"}]}, "backend url 'http://a:1' is listed 2 times"),
    ({"mode": "annotate", "backends": [{"url": "http://a:1"}, {"url": "http://b:1"}]}, "forwards to one upstream"),
    ({"backends": [{"url": "http://a:1"}], "estimator": {"kind": "remote"}}, "estimator.url is required"),
    ({"backends": [{"url": "http://a:1"}], "estimator": {"kind": "head"}}, "estimator.head is required"),
    ({"backends": [{"url": "http://a:1"}], "priority": {"min": 5, "max": 1}}, "priority.min (5) is above"),
    ({"backends": [{"url": "http://a:1"}], "priority": {"queue": "fastest"}},
     "config.priority.queue: unknown queue policy 'fastest' -- fix: use one of: auto, boost2, fcfs, gboost, sjf"),
    ({"backends": [{"url": "http://a:1"}], "priority": {"queue": "gittins"}},
     "queue policy 'gittins' cannot order the router's queue"),
    ({"backends": [{"url": "http://a:1"}], "priority": {"queue": "sjf", "aging": -1}},
     "config.priority.queue: policy 'sjf': aging must be in [0, inf), got -1"),
    ({"backends": [{"url": "http://a:1"}], "priority": {"queue": "sjf", "quantile_z": float("nan")}},
     "policy 'sjf': quantile_z must be a finite number, got nan"),
    ({"backends": [{"url": "http://a:1"}], "priority": {"quantile_z": 1.0}},
     "config.priority: quantile_z is a parameter of a named queue policy, and queue 'auto' takes none -- fix: name"),
    ({"backends": [{"url": "http://a:1"}], "priority": {"queue": "sjf", "boost_s": 3}},
     "config.priority.queue: policy 'sjf' takes no parameter 'boost_s' -- fix: its parameters: preempt, aging, "
     "quantile_z"),
    ({"backends": [{"url": "http://a:1"}], "priority": {"queue": {"name": "gboost", "gamma": 0.07, "beta": 1}}},
     "config.priority.queue: policy 'gboost' takes no parameter 'beta' -- fix: its parameters: preempt, gamma, "
     "s_per_token"),
    ({"backends": [{"url": "http://a:1"}], "estimator": {"kind": "none"}, "priority": {"queue": "gboost"}},
     "priority.queue 'gboost' needs a predictive distribution (a prediction and its spread), and estimator kind "
     "'none' gives none -- fix: set estimator.kind to"),
    ({"backends": [{"url": "http://a:1"}], "estimator": {"kind": "chars", "spread": 0}, "priority": {"queue": "gboost"}},
     "priority.queue 'gboost' needs a predictive distribution, and estimator kind 'chars' with spread 0 gives a point"),
    ({"backends": [{"url": "http://a:1"}], "priority": {"queue": "sjf", "preempt": True}},
     "config.priority.queue: policy 'sjf': preempt is preemption at a decode instance, which a router does not run"),
    ({"backends": [{"url": "http://a:1"}], "estimator": {"kind": "none"}, "priority": {"queue": "sjf"}},
     "priority.queue 'sjf' needs a prediction, and estimator kind 'none' gives none"),
    ({"backends": [{"url": "http://a:1"}], "timeouts": {"read_s": 0}}, "timeouts.read_s must be a number > 0"),
])
def test_config_errors_are_one_line(data, expect):
    with pytest.raises(ConfigError) as e:
        RouterConfig.from_dict(data, "config")
    assert expect in str(e.value) and "\n" not in str(e.value)


def test_url_normalised_and_example_configs_load():
    assert normalize_url("http://h:8000/v1/") == "http://h:8000"
    assert normalize_url("https://h/prefix/v1") == "https://h/prefix"
    assert BackendConfig(url="http://10.0.0.5:8000/v1").label == "10.0.0.5:8000"
    # a backend's URL is its server's root (/v1 dropped); a gateway's path goes in prefix, said so
    assert BackendConfig(url="http://h:8000/v1/").base == "http://h:8000"
    assert BackendConfig(url="https://gw", prefix="/openai/v1").base == "https://gw/openai"
    for url, path in [("http://h:8000/v1/chat/completions", "/v1/chat/completions"), ("http://h:8000/llm", "/llm")]:
        with pytest.raises(ConfigError) as e:
            BackendConfig(url=url)
        assert f"has the path '{path}'" in str(e.value) and "-- fix: give the server's root URL, http://h:8000" in str(e.value)
    with pytest.raises(ConfigError, match="prefix 'openai' is not a URL path"):
        BackendConfig(url="http://h:1", prefix="openai")
    same = {"backends": [{"url": "http://gw", "prefix": "/a"}, {"url": "http://gw/v1", "prefix": "/a/", "name": "x"}]}
    with pytest.raises(ConfigError, match="backend url 'http://gw/a' is listed 2 times"):
        RouterConfig.from_dict(same)
    RouterConfig.from_dict({"backends": [{"url": "http://gw", "prefix": "/a"}, {"url": "http://gw", "prefix": "/b",
                                                                              "name": "b"}]})
    files = sorted((ROOT / "experiments" / "route").glob("*.json"))
    assert files
    for f in files:
        RouterConfig.load(f)


# ---------------------------------------------------------------- requests
def _bad(raw: bytes, kind: str = "chat") -> ApiError:
    with pytest.raises(ApiError) as e:
        parse_request(raw, kind)
    return e.value


def test_request_checks():
    assert "not valid JSON" in _bad(b'{"model": ').message
    assert "must be a JSON object, got list" in _bad(b"[1, 2]").message
    assert _bad(b'{"messages": [{"role": "user", "content": "x"}]}').param == "model"
    assert _bad(b'{"model": "m", "messages": []}').param == "messages"
    assert _bad(b'{"model": "m", "messages": [{"content": "x"}]}').param == "messages[0]"
    assert _bad(b'{"model": "m", "messages": [{"role": "user"}], "stream": "yes"}').param == "stream"
    assert _bad(b'{"model": "m", "messages": [{"role": "user"}], "max_tokens": 0}').param == "max_tokens"
    assert _bad(b'{"model": "m", "prompt": {"a": 1}}', "completion").param == "prompt"
    assert "not UTF-8" in _bad(b'{"model": "\xff"}').message
    body, q = parse_request(json.dumps({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {}}]}],
        "n": 2, "max_completion_tokens": 7, "stream": True}).encode(), "chat")
    assert q.chars == 4 and q.n_sequences == 2 and q.max_tokens == 7 and q.stream and body["n"] == 2
    _, q = parse_request(b'{"model": "m", "prompt": ["ab", "cde"], "n": 3}', "completion")
    assert q.prompt == "ab" and q.n_sequences == 6
    _, q = parse_request(b'{"model": "m", "prompt": [1, 2, 3]}', "completion")
    assert q.prompt is None and q.prompt_token_ids == 3


@pytest.mark.parametrize("where", ["hints.osl", "log_requests", "gc.freeze", "backends[0].flatten_content"])
def test_booleans_are_strict(where):
    """"yes", "true", 1 are not true: a typo of a boolean is refused, not read as one."""
    for bad in ("yes", "true", 1):
        data: dict = {"backends": [{"url": "http://a:1"}]}
        *path, key = where.replace("[0]", ".0").split(".")
        node = data
        for k in path:
            node = node[int(k)] if k.isdigit() else node.setdefault(k, {})
        node[key] = bad
        with pytest.raises(ConfigError) as e:
            RouterConfig.from_dict(data, "config")
        assert f"config.{where}" in str(e.value) and "boolean" in str(e.value), str(e.value)
    assert RouterConfig.from_dict({"backends": [{"url": "http://a:1"}], "hints": {"osl": True}}).hints.osl


def test_roles_and_content_parts():
    e = _bad(b'{"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]}')
    assert (e.status, e.param) == (400, "messages[1].role") and 'got "robot"' in e.message and "user" in e.message
    for role in ("system", "developer", "user", "assistant", "tool", "function"):
        parse_request(json.dumps({"model": "m", "messages": [{"role": role, "content": "x"}]}).encode(), "chat")
    text = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]
    raw = {"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]}
    body, q = parse_request(json.dumps(raw).encode(), "chat")
    assert q.parts and q.media is None and q.chars == len("be brief") + len("Hello\nworld")
    flat = flatten_content(body)
    assert flat["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Hello\nworld"}]
    assert body["messages"][1]["content"] == text  # the request's own body is unchanged
    _, q = parse_request(b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}', "chat")
    assert not q.parts and q.media is None
    raw["messages"].append({"role": "user", "content": [{"type": "text", "text": "and"},
                                                        {"type": "image_url", "image_url": {"url": "data:,"}}]})
    _, q = parse_request(json.dumps(raw).encode(), "chat")
    assert (q.media, q.media_type) == ("messages[2].content[1]", "image_url")


def test_values_no_backend_can_take_are_refused():
    m = b'{"model": "m", "messages": [{"role": "user", "content": "x"}], '
    assert _bad(m + b'"temperature": NaN}').param == "temperature"  # Python's json reads NaN and 1e400 (inf)
    assert _bad(m + b'"top_p": 1e400}').param == "top_p"
    assert _bad(m + b'"n": 100000000000000000000}').param == "n"  # past the I-JSON integer range
    assert "not valid JSON" in _bad(m + b'"seed": ' + b"9" * 5000 + b"}").message  # more digits than Python reads
    assert _bad(m + b'"logit_bias": {"5": true}}').param == "logit_bias"
    e = _bad(b'{"model": "m", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert (e.status, e.code) == (400, "json_too_deep")
    _, q = parse_request(m + b'"temperature": null, "stream": null, "top_p": 1, "seed": -9007199254740991}', "chat")
    assert not q.stream  # the I-JSON range's ends are served; one past them is refused, naming the bound
    assert "at most 9007199254740991" in _bad(m + b'"seed": 9007199254740992}').message


def test_a_lone_surrogate_anywhere_in_the_body_is_refused():
    e = _bad(b'{"model": "m", "messages": [{"role": "user", "content": "tea \\ud800"}]}')
    assert (e.status, e.code, e.param) == (400, "invalid_text", "messages[0].content")
    assert "lone surrogate (\\ud800 at character 4)" in e.message and "valid UTF-8" in e.message
    assert _bad(b'{"model": "m", "prompt": ["ok", "\\uDC00"]}', "completion").param == "prompt[1]"
    assert _bad(b'{"model": "m", "prompt": "x", "stop": ["\\udbff"]}', "completion").param == "stop[0]"
    _, q = parse_request(b'{"model": "m", "prompt": "tea \\ud83c\\udf75"}', "completion")  # a pair: text
    assert q.prompt == "tea \U0001f375"


def test_sse_counter_across_chunk_boundaries():
    ev = [b'data: {"choices": [{"text": "a"}]}\n\n', b'data: {"choices": [{"text": "b"}]}\n\n',
          b'data: {"choices": [], "usage": {"completion_tokens": 5}}\n\n', b"data: [DONE]\n\n"]
    stream = b": ping\n\n" + b"".join(ev)
    c = SSECounter()
    for i in range(0, len(stream), 7):  # chunks that cut lines anywhere
        c.feed(stream[i : i + 7])
    assert c.done and c.events == 3 and c.usage_tokens == 5 and c.tokens == 5 and c.error is None
    c2 = SSECounter()
    c2.feed(b'data: {"choices": [{"text": "a"}]}\n\ndata: {"error": {"message": "boom"}}\n\n')
    assert c2.events == 1 and c2.error == "boom" and not c2.done and c2.tokens == 1


def test_sse_counter_counts_only_events_with_text():
    """llama.cpp's framing of a chat stream: a role chunk, the tokens, a finish chunk; none of the first and
    last is a token (they were counted as two, which skewed the token and prediction-error metrics)."""
    def ev(delta: dict, finish: str | None = None) -> bytes:
        return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}).encode() + b"\n\n"

    stream = (ev({"role": "assistant"}) + ev({"content": " Red"}) + ev({"content": ","}) + ev({"content": "\"x"})
              + ev({"content": ""}) + ev({"content": None}) + ev({}, "length") + b"data: [DONE]\n\n")
    c = SSECounter()
    assert c.feed(stream) == 3
    assert c.tokens == 3 and c.events == 7 and c.done
    compact = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n' \
              b'data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}\n\n' \
              b'data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{}"}}]}}]}\n\n' \
              b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n'
    c = SSECounter()
    c.feed(compact)
    assert c.tokens == 3 and c.events == 4


# ---------------------------------------------------------------- load model and priority
def test_expected_remaining_is_the_normal_mean_residual_life():
    assert expected_remaining(100, 10, 0) == pytest.approx(100, abs=1e-6)
    assert expected_remaining(100, 10, 50) == 50  # far from the tail: the plain difference
    # at t = mu: E[L - mu | L > mu] = sigma * phi(0) / 0.5
    assert expected_remaining(100, 10, 100) == pytest.approx(10 * 2 / math.sqrt(2 * math.pi), rel=1e-9)
    vals = [expected_remaining(100, 20, t) for t in range(0, 400, 10)]
    assert all(v >= 1.0 for v in vals) and all(a > b for a, b in zip(vals[:12], vals[1:12], strict=False))
    assert expected_remaining(100, 0, 150) == 1.0  # no spread: floored, never zero while running


def test_the_default_is_the_router_default_with_no_field_sent():
    from lenpred.sched.recommended import ROUTER_DEFAULT

    cfg = RouterConfig.from_dict({"backends": [{"url": "http://a:1"}]})
    assert (cfg.priority.queue, cfg.policy) == (ROUTER_DEFAULT["queue"], ROUTER_DEFAULT["dispatch"]) == (
        "auto", "least-requests")  # issue 37: late binding FCFS, no prediction, is the yardstick's best default
    assert cfg.queue_policy.name == "fcfs"
    assert cfg.priority.sends is False  # auto sends no field (vLLM refuses it without its priority scheduling)
    assert PriorityConfig(queue="sjf").sends and PriorityConfig(enabled=True).sends
    assert not PriorityConfig(queue="sjf", enabled=False).sends and not PriorityConfig(queue="fcfs").sends
    m = PriorityMapper(cfg.priority, default_tokens=256, t0=0.0, queue=cfg.queue_policy)
    # fcfs: arrival order whatever the prediction (no aging, no size)
    assert m.key(5000, 100.0, now=1.0) < m.key(1, None, now=2.0) and m.key(1, None, now=2.0) == 2.0


def test_priority_is_the_simulator_sjf_key_with_aging():
    m = PriorityMapper(PriorityConfig(queue="sjf", aging=10.0, tokens_per_level=1.0), default_tokens=256, t0=0.0)
    long_key, short_key = m.key(1000, None, now=0.0), m.key(10, None, now=100.0)
    assert long_key < short_key  # the long request waited 100 s: 10 tokens/s made up 990 tokens
    assert m.key(10, None, now=98.0) < long_key
    sim = make_queue_policy("sjf", aging=10.0)

    class R:
        pred, spread, arrival = 300.0, None, 7.0

    assert m.key(300, None, now=7.0) == sim.key(R(), 0)  # type: ignore[arg-type]
    assert m.key(None, None, now=0.0) == 256  # no prediction: the default
    clipped = PriorityMapper(PriorityConfig(queue="sjf", tokens_per_level=10, min=0, max=50), 256, t0=0.0)
    assert clipped.value(clipped.key(123, None, now=0.0)) == 12 and clipped.value(9999) == 50


def test_boost2_priority_is_the_boosted_arrival_in_ms():
    m = PriorityMapper(PriorityConfig(queue="boost2", boost_s=3.0, short_threshold=200), default_tokens=256, t0=0.0)
    assert m.key(150, None, now=10.0) == 7.0 and m.key(250, None, now=10.0) == 10.0  # short: 3 s ahead
    assert m.value(m.key(150, None, now=10.0)) == 7000 and m.value(m.key(None, None, now=1.5)) == 1500
    assert m.key(150, None, now=12.0) < m.key(900, None, now=10.0)  # a short one overtakes a long one 2 s older
    assert m.key(150, None, now=14.0) > m.key(900, None, now=10.0)  # ... but not one 4 s older
    assert PriorityConfig(queue="boost2").sends  # not fcfs: the field goes out by default
    assert PriorityMapper(PriorityConfig(), 256, t0=0.0).value(2.0004) == 2000  # fcfs, when sent: arrival ms


def test_gboost_priority_is_gamma_boost_of_the_prediction():
    m = PriorityMapper(PriorityConfig(queue="gboost", gamma=1.0, s_per_token=0.01), default_tokens=256, t0=0.0)
    # a point mass of S = 100 x 0.01 = 1 s: b = log(1 / (1 - e^-1)) = 0.45868 s
    assert m.key(100, None, now=5.0) == pytest.approx(5.0 - math.log(1.0 / (1.0 - math.exp(-1.0))), abs=1e-9)
    assert m.value(m.key(100, None, now=5.0)) == 4541
    assert m.key(10, None, now=5.0) < m.key(100, None, now=5.0) < m.key(1000, None, now=5.0)  # shorter: boosted more
    # with a spread the boost is of a distribution; it is smaller than the point mass's at the same median
    # only if the spread adds long outcomes, so just check it is a finite number of seconds ahead of arrival
    k = m.key(100, 80.0, now=5.0)
    assert 0.0 < 5.0 - k < 5.0
    # the same boost as the simulator's gboost on from_spread's distribution, and nothing kept per request
    from lenpred.sched.boost import boost
    from lenpred.sched.dists import from_spread

    assert k == pytest.approx(5.0 - boost(from_spread(100, 80.0, None).x * 0.01, 1.0), abs=1e-12)
    for i in range(50):
        m.key(100 + i, 80.0, now=5.0)
    assert m.policy._cache == {}  # a long-lived router must not cache one distribution per request


def test_osl_hint_keeps_what_the_client_sent():
    from lenpred.route.bodies import with_osl

    body = {"model": "m", "messages": []}
    assert with_osl(body, 41.6) == {**body, "nvext": {"agent_hints": {"osl": 42}}} and "nvext" not in body
    assert with_osl(body, None) is body and with_osl(body, 0.2)["nvext"]["agent_hints"]["osl"] == 1
    for ext in ("text", {"agent_hints": {"osl": 9}}, {"agent_hints": [1]}):  # not ours to change
        assert with_osl({**body, "nvext": ext}, 100)["nvext"] == ext
    assert with_osl({**body, "nvext": {"a": 1, "agent_hints": {"priority": 3}}}, 5)["nvext"] == {
        "a": 1, "agent_hints": {"priority": 3, "osl": 5}}


@pytest.mark.parametrize("bad, what", [({"queue": "boost2", "boost_s": 0}, "policy 'boost2': boost_s"),
                                       ({"queue": "gboost", "gamma": -1}, "policy 'gboost': gamma"),
                                       ({"queue": "boost2", "short_threshold": float("nan")},
                                        "policy 'boost2': short_threshold")])
def test_bad_boost_parameters_are_one_line(bad, what):
    with pytest.raises(ConfigError, match=rf"^PriorityConfig\.queue: {what} must be (\"auto\" or a number )?in \(0, inf"):
        PriorityConfig(**bad)
    with pytest.raises(ConfigError, match=rf"^config\.priority\.queue: {what} must be (\"auto\" or a number )?in \(0, inf"):
        RouterConfig.from_dict({"backends": [{"url": "http://a:1"}], "priority": bad}, "config")


def test_the_router_and_the_simulator_read_one_policy_shape_with_one_set_of_defaults():
    """priority.queue is the simulator arm's queue (the same typed object, flat keys read into it), and a
    policy left at its defaults keys requests as the simulator's policy with the same defaults."""
    from lenpred.sim.config import PolicyConfig

    flat = PriorityConfig(queue="sjf", aging=100.0)
    typed = PriorityConfig.from_dict({"queue": {"name": "sjf", "aging": 100}})
    assert flat == typed and flat.queue == PolicyConfig(queue="sjf", aging=100.0).queue
    assert flat.to_dict()["queue"] == {"name": "sjf", "preempt": False, "aging": 100.0, "quantile_z": 0.0}
    for name in ("fcfs", "sjf", "boost2", "gboost"):
        router = PriorityMapper(PriorityConfig(queue=name), 256, t0=0.0)
        sim = make_queue_policy(PolicyConfig(queue=name).queue)
        assert router.policy.params == sim.params and router.policy.aging == sim.aging == 0.0, name
        assert router.ms == (name != "sjf") == sim.time_keyed()
    assert PriorityMapper(PriorityConfig(queue="boost2"), 256, t0=0.0).policy.params == {"boost_s": 3.0,
                                                                                        "short_threshold": 224.0}
    assert PriorityConfig(queue="GBoost".lower(), gamma="AUTO").queue.gamma == "auto"
    with pytest.raises(ConfigError, match="gamma null is not a setting .* -- fix: give gamma as \"auto\""):
        PriorityConfig(queue="gboost", gamma=None)


# ---------------------------------------------------------------- dispatch pool
def _pool(policy: str, n: int = 2, max_outstanding: int = 8, max_queued: int = 4) -> Pool:
    return Pool([BackendConfig(url=f"http://b{i}:1", max_outstanding=max_outstanding) for i in range(n)],
                policy, max_queued=max_queued)


def _acquire(pool: Pool, rid: str, tokens: float, key: float = 0.0, timeout: float = 1.0):
    return pool.acquire(Flight(rid, tokens, 0.0, key), "m", frozenset(), timeout)


def test_least_predicted_tokens_uses_the_draw_down():
    async def go():
        pool = _pool("least-predicted-tokens")
        a = await _acquire(pool, "long", 1000)
        b = await _acquire(pool, "s1", 50)
        assert (a.index, b.index) == (0, 1)
        c = await _acquire(pool, "s2", 50)
        assert c.index == 1  # 100 predicted tokens < 1000
        a.progress(a.flights["long"], 950)  # the long one has streamed 950 tokens: ~50 left
        d = await _acquire(pool, "s3", 50)
        assert d.index == 0
        pool.release(a, "long")
        assert pool.backends[0].outstanding_requests() == 1

    asyncio.run(go())


def test_prompt_weight_counts_prefill_until_the_first_token():
    f = Flight("r", 100.0, 0.0, 0.0, prefill=0.5 * 400)
    assert f.remaining() == 300.0  # 100 output + 400 prompt tokens x 0.5, before the first token
    f.gen = 1
    assert f.remaining() == 99.0


def test_round_robin_and_least_requests_and_exclusion():
    async def go():
        rr = _pool("round-robin", n=3)
        got = [(await _acquire(rr, f"r{i}", 1)).index for i in range(6)]
        assert got == [0, 1, 2, 0, 1, 2]
        lr = _pool("least-requests")
        await _acquire(lr, "x", 1000)
        assert (await _acquire(lr, "y", 1)).index == 1
        b = await lr.acquire(Flight("z", 1, 0, 0), "m", frozenset({1}), 1.0)
        assert b.index == 0
        lr.backends[0].healthy = False
        assert await lr.acquire(Flight("w", 1, 0, 0), "m", frozenset({1}), 1.0) is None  # none left

    asyncio.run(go())


def test_wait_queue_orders_by_priority_key_and_is_bounded():
    async def go():
        pool = _pool("least-requests", n=1, max_outstanding=1, max_queued=2)
        b = await _acquire(pool, "running", 10)
        order: list[str] = []

        async def wait(rid: str, key: float) -> None:
            got = await _acquire(pool, rid, 10, key=key, timeout=5.0)
            order.append(rid)
            await asyncio.sleep(0)
            pool.release(got, rid)

        t_late = asyncio.create_task(wait("big-key", 500.0))
        while pool.n_waiting < 1:  # it queued first
            await asyncio.sleep(0)
        t_small = asyncio.create_task(wait("small-key", 5.0))
        while pool.n_waiting < 2:
            await asyncio.sleep(0)
        with pytest.raises(QueueFull):
            await _acquire(pool, "third", 10, key=0.0)
        pool.release(b, "running")
        await asyncio.gather(t_late, t_small)
        assert order == ["small-key", "big-key"]
        b = await _acquire(pool, "again", 10)
        with pytest.raises(QueueTimeout):
            await _acquire(pool, "late", 10, timeout=0.05)
        assert pool.n_waiting == 0 and pool.backends[0].outstanding_requests() == 1

    asyncio.run(go())


def test_a_slow_health_check_does_not_take_out_a_busy_backend():
    from lenpred.route.config import HealthConfig

    h = HealthConfig(fail_after=1)
    pool = _pool("least-requests", n=1)
    b = pool.backends[0]
    b.admit(Flight("r", 10, 0, 0))
    b.check_result(False, "health check failed: ReadTimeout", h, slow=True)
    assert b.healthy  # busy: llama.cpp answers /v1/models only between requests
    b.check_result(False, "health check failed: ConnectError", h, slow=False)
    assert not b.healthy and "ConnectError" in b.last_error
    b.check_result(True, None, h)
    assert b.healthy and b.last_error is None
    b.finish("r")
    b.check_result(False, "health check failed: ReadTimeout", h, slow=True)
    assert not b.healthy  # idle and silent: out


# ---------------------------------------------------------------- estimators
def _query(text: str = "x" * 40):
    return parse_request(json.dumps({"model": "m", "prompt": text}).encode(), "completion")[1]


def test_chars_estimator():
    est = asyncio.run(CharsEstimator(chars_per_token=4, factor=1.5).estimate(_query("x" * 41)))
    assert est.tokens == 11 * 1.5 and est.source == "chars" and est.spread == pytest.approx(0.5 * 16.5)


def test_remote_estimator_answers_and_falls_back():
    from aiohttp import web

    calls = {"n": 0}

    async def predict(request: web.Request) -> web.Response:
        calls["n"] += 1
        body = await request.json()
        if body["prompt"] == "garbage":
            return web.Response(text="<html>")
        if body["prompt"] == "down":
            return web.json_response({"detail": "down"}, status=503)
        if body["prompt"] == "refused":
            return web.json_response({"error": {"message": "no role 'robot'"}}, status=400)
        if body["prompt"] == "slow":
            await asyncio.sleep(1.0)
        return web.json_response({"predicted_tokens": 120.0, "q10": 20.0, "q50": 100.0, "q90": 220.0,
                                  "head": "proxy", "card_hash": "abc", "elapsed_ms": 1.0})

    async def go():
        app = web.Application()
        app.router.add_post("/v1/predict", predict)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        remote = RemoteEstimator(f"http://127.0.0.1:{port}", timeout_s=0.3)
        await remote.start()
        est = await remote.estimate(_query("hello"))
        assert est.tokens == 120 and est.source == "remote:proxy" and est.spread == pytest.approx(200 / (2 * 1.2815516))
        with pytest.raises(EstimateFailed, match="not a prediction"):
            await remote.estimate(_query("garbage"))
        with pytest.raises(EstimateFailed, match="answered HTTP 503: down") as e:
            await remote.estimate(_query("down"))
        assert not e.value.this_request
        with pytest.raises(EstimateFailed, match="answered HTTP 400: no role 'robot'") as e:
            await remote.estimate(_query("refused"))
        assert e.value.this_request
        with pytest.raises(EstimateFailed, match="no prediction within 0.3 s"):
            await remote.estimate(_query("slow"))
        falls: list[str] = []
        wf = WithFallback(remote, CharsEstimator(), retry_after_s=60.0, on_fallback=falls.append)
        est = await wf.estimate(_query("refused"))  # this request's problem: the next one asks the service again
        assert est.source == "chars+fallback" and len(falls) == 1
        assert (await wf.estimate(_query("hello"))).source == "remote:proxy"
        falls.clear()
        est = await wf.estimate(_query("down"))
        assert est.source == "chars+fallback" and len(falls) == 1
        n = calls["n"]
        est = await wf.estimate(_query("hello"))  # within retry_after_s: the service is not asked
        assert est.source == "chars+fallback" and calls["n"] == n
        await remote.stop()
        await runner.cleanup()
        dead = RemoteEstimator(f"http://127.0.0.1:{port}", timeout_s=0.3)  # nothing listens there now
        await dead.start()
        with pytest.raises(EstimateFailed, match="Connection"):
            await dead.estimate(_query("hello"))
        await dead.stop()

    asyncio.run(go())
