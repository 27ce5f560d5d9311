"""The router against real backend processes on loopback: two stub backends (fixed token rate, scripted
faults), the router served by uvicorn from a thread (so its state can be checked), real sockets and
real SSE in between. Covers dispatch, headers and priority, retries, mid-stream failures, health
checks, bounded queues, client disconnects and every bad input the router answers itself."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import httpx
from route_testing import RouterThread, Stub, sse_data

from lenpred.route.config import RouterConfig
from lenpred.route.estimators import Estimate


def _cfg(stubs, **kw) -> RouterConfig:
    base = {
        "backends": [{"url": s.url, "name": s.name} for s in stubs],
        "policy": "round-robin",
        "priority": {"queue": "sjf"},  # send the field (the default fcfs sends none): the tests below check it
        # timeouts far above what a busy machine needs for a stub's answer: only a scripted hang reaches them
        "health": {"interval_s": 0.2, "fail_after": 1, "timeout_s": 5.0},
        "timeouts": {"connect_s": 5.0, "read_s": 3.0, "total_s": 30.0},
        "log_requests": False,
    }
    for k, v in kw.items():
        base[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return RouterConfig.from_dict(base)


def _chat(n: int = 4, stream: bool = False, **extra) -> dict:
    return {"model": "stub", "messages": [{"role": "user", "content": "say a few words"}], "max_tokens": n,
            "stream": stream, **extra}


def _post(url: str, body: dict | bytes, path: str = "/v1/chat/completions", **kw) -> httpx.Response:
    if isinstance(body, dict):
        return httpx.post(url + path, json=body, timeout=15, **kw)
    return httpx.post(url + path, content=body, timeout=15, **kw)


def _text(resp: httpx.Response) -> str:
    """The generated text of a chat response, streamed or not."""
    if resp.headers["content-type"].startswith("text/event-stream"):
        evs = sse_data(resp.text)
        assert evs[-1] == "[DONE]", evs[-3:]
        return "".join(e["choices"][0]["delta"].get("content", "") for e in evs[:-1] if e.get("choices"))
    return resp.json()["choices"][0]["message"]["content"]


def test_stream_and_unary_pass_through_with_headers_and_priority(two):
    a, b = two
    with RouterThread(_cfg(two)) as r:
        direct = _post(a.url, _chat(5))
        via = _post(r.url, _chat(5))
        assert via.status_code == 200 and _text(via) == _text(direct) == " t0 t1 t2 t3 t4"
        s = _post(r.url, _chat(5, stream=True))
        assert s.status_code == 200 and _text(s) == " t0 t1 t2 t3 t4"
        assert {via.headers["x-lenpred-backend"], s.headers["x-lenpred-backend"]} == {"a", "b"}  # round robin
        for h in (via.headers, s.headers):
            assert h["x-lenpred-predicted-tokens"] == "4"  # chars: 15 characters / 4, under max_tokens
            assert h["x-lenpred-estimator"] == "chars" and h["x-lenpred-attempts"] == "1" and h["x-request-id"]
        seen = [q for q in a.requests() + b.requests() if "x-lenpred-predicted-tokens" in q["headers"]]
        assert len(seen) == 2 and all(isinstance(q["body"]["priority"], int) for q in seen)
        assert {q["headers"]["x-request-id"] for q in seen} == {via.headers["x-request-id"], s.headers["x-request-id"]}
        # completions too, and the client's own request id travels through
        c = _post(r.url, {"model": "stub", "prompt": "hi", "max_tokens": 3}, "/v1/completions",
                  headers={"x-request-id": "client-42"})
        assert c.json()["choices"][0]["text"] == " t0 t1 t2" and c.headers["x-request-id"] == "client-42"
        m = httpx.get(r.url + "/v1/models").json()
        assert [x["id"] for x in m["data"]] == ["stub"]
        assert r.router.pool.backends[0].outstanding_requests() == r.router.pool.backends[1].outstanding_requests() == 0


def test_least_predicted_tokens_sends_short_requests_away_from_a_long_one(two):
    class Fixed:  # the prediction is the request's max_tokens: a perfect predictor for the stub
        async def start(self): pass
        async def stop(self): pass
        async def estimate(self, q):
            return Estimate(float(q.max_tokens), 0.0, "fixed")

    with RouterThread(_cfg(two, policy="least-predicted-tokens"), estimator=Fixed()) as r:
        async def go():
            async with httpx.AsyncClient(timeout=15) as c:
                long = asyncio.create_task(c.post(r.url + "/v1/chat/completions", json=_chat(150)))
                while r.router.pool.backends[0].outstanding_requests() == 0:  # the long one is on a
                    await asyncio.sleep(0.01)
                shorts = await asyncio.gather(*(c.post(r.url + "/v1/chat/completions", json=_chat(5))
                                                for _ in range(4)))
                return await long, shorts

        long, shorts = asyncio.run(go())
        assert long.status_code == 200
        assert {s.headers["x-lenpred-backend"] for s in shorts} == {"b"} and long.headers["x-lenpred-backend"] == "a"


def test_failures_before_the_first_token_are_retried_elsewhere(two):
    a, b = two
    # least-requests on idle backends always tries a first (ties go to the lowest index)
    with RouterThread(_cfg(two, policy="least-requests")) as r:
        for mode, stream in [("503", False), ("503", True), ("502", False), ("504", True), ("429", False),
                             ("429", True), ("garbage", False), ("garbage", True), ("empty", True), ("hang", True)]:
            a.fault(mode, count=1)
            resp = _post(r.url, _chat(3, stream=stream))  # a hang costs read_s (3 s), then b answers
            assert resp.status_code == 200, (mode, stream, resp.text)
            assert _text(resp) == " t0 t1 t2"
            assert (resp.headers["x-lenpred-attempts"], resp.headers["x-lenpred-backend"]) == ("2", "b"), mode
        retried = {k[1]: v for k, v in _counter(r, "lenpred_route_retries_total").items()}
        assert retried == {"http_503": 2, "http_502": 1, "http_504": 1, "http_429": 2, "garbage": 2, "empty": 1,
                           "timeout": 1}, retried
        assert r.router.pool.backends[0].outstanding_requests() == 0
    # a non-streamed request to a silent backend ends at the total timeout with a 504
    with RouterThread(_cfg(two, backends=[{"url": a.url, "name": "a"}], timeouts={"total_s": 1.5})) as r:
        a.fault("hang", count=1)
        t0 = time.perf_counter()
        resp = _post(r.url, _chat(3))
        assert resp.status_code == 504 and resp.json()["error"]["code"] == "timeout"
        assert time.perf_counter() - t0 > 1.4  # not before the total timeout (1.5 s; the client would wait 15 s)
        assert _post(r.url, _chat(3)).status_code == 200


def _until(cond, what: str = "the condition") -> None:
    """Wait for ``cond()`` (state that a background thread or process changes); fail after a minute."""
    deadline = time.monotonic() + 60
    while not cond():
        assert time.monotonic() < deadline, f"{what} did not hold within 60 s"
        time.sleep(0.02)


def _counter(r: RouterThread, name: str) -> dict[tuple[str, ...], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(httpx.get(r.url + "/metrics").text):
        for s in fam.samples:
            if s.name == name:
                out[tuple(s.labels.values())] = s.value
    return out


def test_backend_errors_after_retries_and_client_errors_are_openai_errors(two, caplog):
    a, b = two
    caplog.set_level(logging.INFO, logger="lenpred.route")
    with RouterThread(_cfg(two, policy="least-requests", log_requests=True)) as r:
        a.fault("503")
        b.fault("502")
        for stream in (False, True):
            resp = _post(r.url, _chat(3, stream=stream))
            assert resp.status_code == 502 and resp.json()["error"]["code"] == "backend_error"  # the last one's
            assert "backend b answered HTTP 502: stub b: scripted 502" == resp.json()["error"]["message"]
            assert resp.headers["x-lenpred-attempts"] == "2"
        # a's failures were retried on b; b's, the last attempts, were not retried
        assert _counter(r, "lenpred_route_retries_total") == {("a", "http_503"): 2}
        retries = [m for m in caplog.messages if "retry backend=" in m]
        assert len(retries) == 2 and all("retry backend=a reason=http_503" in m for m in retries), retries
        a.fault("400", count=1)  # the backend's own 4xx is passed on as it is, not retried
        resp = _post(r.url, _chat(3))
        assert resp.status_code == 400 and resp.json()["error"]["message"] == "stub a: scripted 400"
        assert len(a.requests()) == 3 and len(b.requests()) == 2
        assert r.router.pool.backends[0].healthy  # a 4xx or 5xx answer is not a dead backend


def test_mid_stream_failure_ends_with_a_clean_error_event(two):
    a, b = two
    with RouterThread(_cfg(two, policy="least-requests")) as r:
        for mode in ("close-after:3", "hang-after:3"):
            a.fault(mode, count=1)
            resp = _post(r.url, _chat(8, stream=True))  # a hang ends after read_s (3 s), not never
            evs = sse_data(resp.text)
            assert resp.status_code == 200 and resp.headers["x-lenpred-backend"] == "a"
            tokens = [e for e in evs if isinstance(e, dict) and "choices" in e]
            assert len(tokens) == 3 and evs[-1] == "[DONE]"
            err = evs[-2]["error"]
            assert err["type"] == "server_error" and "backend a" in err["message"], err
            assert r.router.pool.backends[0].outstanding_requests() == 0
        out = _counter(r, "lenpred_route_requests_total")
        assert out[("a", "stream_error")] == 2


def test_a_killed_backend_is_taken_out_and_brought_back(two):
    a, b = two
    with RouterThread(_cfg(two)) as r:
        a.kill()
        got = [_post(r.url, _chat(2)) for _ in range(4)]
        assert all(x.status_code == 200 for x in got)
        assert all(x.headers["x-lenpred-backend"] == "b" for x in got[1:])
        assert not r.router.pool.backends[0].healthy
        h = httpx.get(r.url + "/healthz").json()
        assert h["healthy"] == 1 and h["backends"][0]["last_error"]
        a.start()
        _until(lambda: r.router.pool.backends[0].healthy)
        assert {_post(r.url, _chat(2)).headers["x-lenpred-backend"] for _ in range(2)} == {"a", "b"}
        a.fault("unhealthy")
        b.fault("unhealthy")
        _until(lambda: not any(x.healthy for x in r.router.pool.backends))
        resp = _post(r.url, _chat(2))
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "no_backend"
        assert httpx.get(r.url + "/healthz").status_code == 503


def test_priority_field_turned_off_for_a_backend_that_rejects_it(two):
    a, b = two
    a.fault("reject-priority")
    cfg = _cfg(two, backends=[{"url": a.url, "name": "a"}])
    with RouterThread(cfg) as r:
        for _ in range(2):
            resp = _post(r.url, _chat(2))
            assert resp.status_code == 200 and "x-lenpred-priority" not in resp.headers
        bodies = [q["body"] for q in a.requests()]
        assert "priority" in bodies[0] and all("priority" not in x for x in bodies[1:]) and len(bodies) == 3
        assert r.router.pool.backends[0].priority_on is False


def test_bounded_queue_429_and_queue_timeout_503(two):
    cfg = _cfg(two, backends=[{"url": s.url, "name": s.name, "max_outstanding": 1} for s in two],
               limits={"max_queued": 1, "queue_timeout_s": 0.4})

    async def go(url: str):
        async with httpx.AsyncClient(timeout=15) as c:
            return await asyncio.gather(*(c.post(url + "/v1/chat/completions", json=_chat(200))
                                          for _ in range(4)))

    with RouterThread(cfg) as r:
        codes = sorted(x.status_code for x in asyncio.run(go(r.url)))
        assert codes == [200, 200, 429, 503], codes
        assert r.router.pool.n_waiting == 0


def test_client_disconnect_frees_the_slot_and_the_backend(two):
    a, b = two
    with RouterThread(_cfg(two, backends=[{"url": a.url, "name": "a"}])) as r:
        with httpx.stream("POST", r.url + "/v1/chat/completions", json=_chat(400, stream=True), timeout=10) as s:
            it = s.iter_lines()
            assert next(it).startswith("data:")
            assert r.router.pool.backends[0].outstanding_requests() == 1
        _until(lambda: r.router.pool.backends[0].outstanding_requests() == 0 and a.stats()["active"] == 0)


def test_bad_requests_get_openai_errors(two):
    with RouterThread(_cfg(two, limits={"max_body_bytes": 2048})) as r:
        cases = [
            (b'{"model": "stub", "messages": ', 400, "not valid JSON"),
            (b'"just a string"', 400, "must be a JSON object"),
            (json.dumps({"model": "stub", "messages": [{"role": "user", "content": "x" * 5000}]}).encode(), 413,
             "larger than the router's limit of 2048 bytes"),
            (json.dumps({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}).encode(), 404,
             "The model 'gpt-9' does not exist"),
            (json.dumps({"model": "stub", "input": "embeddings?"}).encode(), 400, "'messages' must be"),
        ]
        for raw, status, text in cases:
            resp = _post(r.url, raw)
            assert resp.status_code == status and text in resp.json()["error"]["message"], resp.text
            assert set(resp.json()["error"]) == {"message", "type", "param", "code"}
        nf = httpx.get(r.url + "/v1/embeddings")
        assert nf.status_code == 404 and "error" in nf.json()
        assert httpx.get(r.url + "/v1/chat/completions").status_code == 405
        out = _counter(r, "lenpred_route_requests_total")
        assert out[("-", "rejected")] == len(cases)
        assert _post(r.url, _chat(2)).status_code == 200  # and the router is still fine


def test_a_lone_surrogate_is_refused_at_the_door(two):
    a, b = two
    with RouterThread(_cfg(two)) as r:
        for path, raw, param in [
            ("/v1/chat/completions", b'{"model": "stub", "messages": [{"role": "user", "content": "\\ud800"}]}',
             "messages[0].content"),
            ("/v1/completions", b'{"model": "stub", "prompt": "hi", "stop": ["\\udfff"]}', "stop[0]"),
        ]:
            resp = _post(r.url, raw, path)
            err = resp.json()["error"]
            assert resp.status_code == 400 and err["code"] == "invalid_text" and err["param"] == param, resp.text
            assert "lone surrogate" in err["message"] and resp.headers["x-request-id"]
        assert a.requests() == [] and b.requests() == []  # no backend saw it (llama.cpp answers it with 500)
        ok = _post(r.url, b'{"model": "stub", "messages": [{"role": "user", "content": "\\ud83c\\udf75"}], '
                          b'"max_tokens": 2}')
        assert ok.status_code == 200 and _text(ok) == " t0 t1"  # a surrogate pair is text


def test_streamed_tokens_are_counted_without_the_role_and_finish_chunks(tmp_path):
    with Stub("framed", log_dir=tmp_path, role_chunks=1) as c, RouterThread(_cfg([c])) as r:
        resp = _post(r.url, _chat(5, stream=True))
        evs = sse_data(resp.text)
        assert _text(resp) == " t0 t1 t2 t3 t4" and len(evs) == 8  # role, 5 tokens, finish, [DONE]
        assert evs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert _counter(r, "lenpred_route_completion_tokens_sum") == {(): 5.0}
        # |predicted - produced|: the chars estimate is 4 tokens ("say a few words": 15 characters / 4)
        assert _counter(r, "lenpred_route_prediction_abs_error_tokens_sum") == {(): 1.0}


def test_annotate_mode_forwards_to_its_one_upstream(two):
    a, _ = two
    cfg = _cfg(two, mode="annotate", backends=[{"url": a.url, "name": "llm-d"}])
    with RouterThread(cfg) as r:
        resp = _post(r.url, _chat(3, stream=True))
        assert _text(resp) == " t0 t1 t2" and resp.headers["x-lenpred-backend"] == "llm-d"
        (q,) = a.requests()
        assert q["headers"]["x-lenpred-predicted-tokens"] == resp.headers["x-lenpred-predicted-tokens"]
        assert str(q["body"]["priority"]) == resp.headers["x-lenpred-priority"]
        # every other path is the upstream's own (a sidecar stands in for it)
        assert httpx.get(r.url + "/stub/stats").json()["name"] == "a"
        assert httpx.get(r.url + "/health").status_code == 200
        assert httpx.post(r.url + "/v1/nothing").json()["error"]["message"] == "no route POST /v1/nothing"


def test_remote_estimator_down_falls_back_to_chars(two):
    from route_testing import free_port

    cfg = _cfg(two, estimator={"kind": "remote", "url": f"http://127.0.0.1:{free_port()}", "timeout_s": 0.3})
    with RouterThread(cfg) as r:
        resp = _post(r.url, _chat(3))
        assert resp.status_code == 200 and resp.headers["x-lenpred-estimator"] == "chars+fallback"
        assert _counter(r, "lenpred_route_estimator_fallbacks_total")[()] == 1


def test_the_event_loop_lag_is_a_metric(two):
    """The probe samples the loop while the router runs (a stall of the loop delays every relayed stream)."""
    with RouterThread(_cfg(two)) as r:
        _until(lambda: _counter(r, "lenpred_route_loop_lag_seconds_count").get((), 0) >= 3, "three lag samples")
        lag = _counter(r, "lenpred_route_loop_lag_seconds_sum")[()]
        assert 0 <= lag < 60
    assert r.router._lag is not None and r.router._lag.done()  # stopped with the router


def test_boost2_and_osl_reach_the_backend(two):
    """priority.queue boost2 sends the boosted arrival in ms (a request predicted short 3 s ahead of a
    long one sent at the same moment), and hints.osl puts the prediction in nvext.agent_hints.osl
    without touching a client's own osl or other nvext fields."""
    a, _ = two
    cfg = _cfg([a], priority={"queue": "boost2", "boost_s": 3.0, "short_threshold": 100}, hints={"osl": True},
               estimator={"kind": "chars"})
    with RouterThread(cfg) as r:
        short = _post(r.url, _chat(3))  # "say a few words": 4 characters' tokens, capped at max_tokens 3
        long = _post(r.url, _chat(600, messages=[{"role": "user", "content": "x" * 2000}]))
        own = _post(r.url, _chat(3, nvext={"agent_hints": {"osl": 7, "priority": 2}, "other": 1}))
        assert short.status_code == long.status_code == own.status_code == 200
        qs, ql, qo = a.requests()
        assert [int(x.headers["x-lenpred-predicted-tokens"]) for x in (short, long)] == [3, 500]
        assert qs["body"]["nvext"] == {"agent_hints": {"osl": 3}} and ql["body"]["nvext"]["agent_hints"]["osl"] == 500
        assert qo["body"]["nvext"] == {"agent_hints": {"osl": 7, "priority": 2}, "other": 1}  # the client's own
        # the long one was sent later but unboosted: its value exceeds the short one's by ~3,000 ms
        assert 3000 <= ql["body"]["priority"] - qs["body"]["priority"] < 3000 + 10_000
        assert str(qs["body"]["priority"]) == short.headers["x-lenpred-priority"]
