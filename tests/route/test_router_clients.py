"""Clients nobody here wrote, and what they need from the router (issue 39): vLLM's ``/health``, chat content
as a list of parts (flattened for a backend that takes only strings, ``flatten_content``), an unknown role
refused at the door, a backend's answer about the request (a 4xx, a chat template's 500) passed on and not
retried, and the official ``openai`` Python client end to end (chat with string and list content,
completions, streaming, errors) against stub backends through a router on loopback."""

from __future__ import annotations

import time

import httpx
import pytest
from route_testing import RouterThread

from lenpred.route.config import RouterConfig

PARTS = [{"type": "text", "text": "say"}, {"type": "text", "text": "a few words"}]



def _cfg(stubs, string_only=(), **kw) -> RouterConfig:
    return RouterConfig.from_dict({
        "backends": [{"url": s.url, "name": s.name, "flatten_content": s.name in string_only} for s in stubs],
        "policy": "least-requests", "log_requests": False,
        "health": {"interval_s": 0.2, "fail_after": 1, "timeout_s": 5.0},
        "timeouts": {"connect_s": 5.0, "read_s": 3.0, "total_s": 30.0}, **kw,
    })


def _chat(content, n: int = 3, **extra) -> dict:
    return {"model": "stub", "messages": [{"role": "user", "content": content}], "max_tokens": n, **extra}


def _until(cond, what: str) -> None:
    """Wait for state the router's health loop changes (its checks run every 0.2 s); fail after a minute."""
    deadline = time.monotonic() + 60
    while not cond():
        assert time.monotonic() < deadline, f"{what} did not happen within 60 s"
        time.sleep(0.02)


def _outcomes(r: RouterThread) -> dict[tuple[str, ...], float]:
    """lenpred_route_requests_total by (backend, outcome)."""
    from prometheus_client.parser import text_string_to_metric_families

    fams = text_string_to_metric_families(httpx.get(r.url + "/metrics").text)
    return {tuple(s.labels.values()): s.value for f in fams for s in f.samples if s.name == "lenpred_route_requests_total"}


def _post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=15)


def test_health_is_vllms_path(two):
    a, b = two
    with RouterThread(_cfg(two)) as r:
        ok = httpx.get(r.url + "/health")
        assert ok.status_code == 200 and ok.content == b""
        assert httpx.get(r.url + "/healthz").json()["healthy"] == 2  # beside the detailed one
        a.fault("unhealthy")
        b.fault("unhealthy")
        _until(lambda: not r.router.healthy, "both backends taken out")  # the health loop: checks every 0.2 s
        down = httpx.get(r.url + "/health")
        assert down.status_code == 503 and down.json()["error"]["code"] == "no_backend"
        a.reset()
        _until(lambda: r.router.healthy, "a brought back")
        assert httpx.get(r.url + "/health").status_code == 200


def test_list_content_is_flattened_for_a_string_only_backend(two):
    a, b = two
    a.fault("string-content")  # llama-cpp-python: a list of parts is a 500 from its chat template
    with RouterThread(_cfg([a], string_only={"a"})) as r:
        for stream in (False, True):
            resp = _post(r.url, _chat(PARTS, stream=stream))
            assert resp.status_code == 200, resp.text
        plain = _post(r.url, _chat("say a few words"))
        assert plain.status_code == 200
    assert [q["content_kinds"] for q in a.requests()] == [["str"]] * 3
    # a backend without the flag gets the parts as they came
    with RouterThread(_cfg([b])) as r:
        assert _post(r.url, _chat(PARTS)).status_code == 200
    assert [q["content_kinds"] for q in b.requests()] == [["list"]]


def test_a_part_that_is_not_text_never_goes_to_a_string_only_backend(two):
    a, b = two
    media = [{"type": "text", "text": "what is it?"}, {"type": "image_url", "image_url": {"url": "data:,"}}]
    with RouterThread(_cfg(two, string_only={"a"})) as r:  # least-requests would pick a first
        for _ in range(3):
            resp = _post(r.url, _chat(media))
            assert resp.status_code == 200 and resp.headers["x-lenpred-backend"] == "b", resp.text
    assert a.requests() == [] and len(b.requests()) == 3
    b.reset()
    with RouterThread(_cfg(two, string_only={"a", "b"})) as r:
        resp = _post(r.url, _chat(media))
        err = resp.json()["error"]
        assert resp.status_code == 400 and err["param"] == "messages[0].content[1]", resp.text
        assert "part of type 'image_url'" in err["message"] and "takes text only (flatten_content)" in err["message"]
        assert _post(r.url, _chat(PARTS)).status_code == 200  # text parts are fine
    assert [q["content_kinds"] for q in a.requests() + b.requests()] == [["str"]]


def test_an_unknown_role_is_400_before_any_backend(two):
    a, b = two
    with RouterThread(_cfg(two)) as r:
        resp = _post(r.url, {"model": "stub", "messages": [{"role": "robot", "content": "beep"}]})
        err = resp.json()["error"]
        assert resp.status_code == 400 and err["param"] == "messages[0].role" and 'got "robot"' in err["message"]
        assert err["type"] == "invalid_request_error"
    assert a.requests() == [] and b.requests() == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_backend_answer_about_the_request_is_passed_on_not_retried(two, stream):
    """A chat template's 500 (llama-cpp-python) and a 400 would be the same on every backend: one attempt,
    the backend's status and body to the client. A 503 is the backend's state: retried elsewhere."""
    a, b = two
    a.fault("string-content")
    b.fault("string-content")
    with RouterThread(_cfg(two)) as r:  # no flatten_content: the parts reach the backend
        resp = _post(r.url, _chat(PARTS, stream=stream))
        assert resp.status_code == 500 and resp.headers["x-lenpred-attempts"] == "1", resp.text
        assert resp.json()["error"] == {"message": 'can only concatenate str (not "list") to str',
                                        "type": "internal_server_error", "param": None, "code": None}
        a.fault("400", count=1)
        resp = _post(r.url, _chat("hi", stream=stream))
        assert resp.status_code == 400 and resp.json()["error"]["message"] == "stub a: scripted 400"
        a.fault("503", count=1)
        resp = _post(r.url, _chat("hi", stream=stream))
        assert resp.status_code == 200 and resp.headers["x-lenpred-attempts"] == "2"
        assert resp.headers["x-lenpred-backend"] == "b"
    assert len(a.requests()) == 3 and len(b.requests()) == 1


def test_the_openai_client_through_the_router(two):
    openai = pytest.importorskip("openai")  # the dev extra
    a, b = two
    a.fault("string-content")  # a llama.cpp-like backend, flattened for; b takes lists
    with RouterThread(_cfg(two, string_only={"a"}, policy="round-robin")) as r:
        client = openai.OpenAI(base_url=r.url + "/v1", api_key="none", max_retries=0, timeout=15)
        for content in ("say a few words", PARTS, PARTS):  # round robin: a list goes to both backends
            chat = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": content}],
                                                  max_tokens=3)
            assert chat.choices[0].message.content == " t0 t1 t2" and chat.usage.completion_tokens == 3
        raw = client.chat.completions.with_raw_response.create(
            model="stub", messages=[{"role": "user", "content": PARTS}], max_tokens=2)
        assert raw.headers["x-lenpred-estimator"] == "chars" and raw.parse().choices[0].message.content == " t0 t1"
        for s in (a, b):  # [DONE], then a body that stays open 10 s: the client leaves at [DONE]
            s.fault("linger", count=1)
        text = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
            model="stub", messages=[{"role": "user", "content": PARTS}], max_tokens=4, stream=True) if ch.choices)
        assert text == " t0 t1 t2 t3"
        done = client.completions.create(model="stub", prompt="once upon", max_tokens=3)
        assert done.choices[0].text == " t0 t1 t2"
        streamed = client.completions.create(model="stub", prompt=["once", "upon"], max_tokens=2, stream=True,
                                             stream_options={"include_usage": True})
        chunks = list(streamed)
        assert "".join(c.choices[0].text for c in chunks if c.choices) == " t0 t1"
        assert chunks[-1].usage.completion_tokens == 2
        assert [m.id for m in client.models.list()] == ["stub"]
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="stub", messages=[{"role": "robot", "content": "x"}])
        assert e.value.status_code == 400 and e.value.body["param"] == "messages[0].role"
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
        # the client closes a stream as soon as it has read [DONE]: a whole answer, counted as ok (not client_gone)
        _until(lambda: sum(v for k, v in _outcomes(r).items() if k[0] != "-") == 7, "7 requests accounted for")
        assert {k[1] for k in _outcomes(r) if k[0] != "-"} == {"ok"}, _outcomes(r)
    assert {tuple(q["content_kinds"]) for q in a.requests() if q["path"].endswith("chat/completions")} == {("str",)}
    assert ("list",) in {tuple(q["content_kinds"]) for q in b.requests()}
