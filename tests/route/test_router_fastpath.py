"""The two completion routes bypass FastAPI's middleware stack (lenpred.route.app.RouterApp): what that
stack did for them still happens -- a crash is an OpenAI-format 500 and the router serves on, another
method or path still gets FastAPI's 404 / 405, a relayed stream arrives whole, and a client that leaves
mid-stream frees its slot and closes the backend's request."""

from __future__ import annotations

import httpx
import pytest
from route_testing import RouterThread, Stub, sse_data

from lenpred.route.config import RouterConfig
from lenpred.route.estimators import Estimate


class Boom:
    """An estimator that fails with an unexpected error for prompts containing 'boom'."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def estimate(self, query) -> Estimate:
        if "boom" in (query.messages[0]["content"] if query.messages else query.prompt or ""):
            raise RuntimeError("boom")
        return Estimate(8.0, 4.0, "test")


@pytest.fixture(scope="module")
def stub():
    s = Stub("a").start()
    yield s
    s.stop()


def _cfg(stub: Stub) -> RouterConfig:
    return RouterConfig.from_dict({
        "backends": [{"url": stub.url, "name": "a"}], "log_requests": False,
        "health": {"interval_s": 0.2, "timeout_s": 5.0},
        "timeouts": {"connect_s": 5.0, "read_s": 3.0, "total_s": 30.0},
    })


def _chat(text: str, n: int = 3, stream: bool = False) -> dict:
    return {"model": "stub", "messages": [{"role": "user", "content": text}], "max_tokens": n, "stream": stream}


def test_a_crash_is_an_openai_500_and_the_router_serves_on(stub):
    with RouterThread(_cfg(stub), estimator=Boom()) as r:
        for path, body in [("/v1/chat/completions", _chat("boom")),
                           ("/v1/completions", {"model": "stub", "prompt": "boom", "max_tokens": 2})]:
            resp = httpx.post(r.url + path, json=body, timeout=15)
            err = resp.json()["error"]
            assert resp.status_code == 500 and err["code"] == "internal_error", resp.text
            assert "RuntimeError" in err["message"] and set(err) == {"message", "type", "param", "code"}
        ok = httpx.post(r.url + "/v1/chat/completions", json=_chat("fine"), timeout=15)
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == " t0 t1 t2"
        assert r.router.pool.backends[0].outstanding_requests() == 0


def test_other_methods_and_paths_still_take_fastapis_route(stub):
    with RouterThread(_cfg(stub)) as r:
        assert httpx.get(r.url + "/v1/completions").status_code == 405
        nf = httpx.post(r.url + "/v1/chat/completions/x", json=_chat("hi"))
        assert nf.status_code == 404 and nf.json()["error"]["code"] == "not_found"
        q = httpx.post(r.url + "/v1/chat/completions?x=1", json=_chat("hi"), timeout=15)  # the query is not the path
        assert q.status_code == 200 and q.headers["x-lenpred-backend"] == "a"


def test_a_stream_arrives_whole_with_the_routers_headers(stub):
    with RouterThread(_cfg(stub)) as r:
        with httpx.stream("POST", r.url + "/v1/chat/completions", json=_chat("hi", 5, stream=True), timeout=15) as s:
            assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
            assert s.headers["x-lenpred-backend"] == "a" and s.headers["x-lenpred-attempts"] == "1"
            events = sse_data(s.read().decode())
        assert events[-1] == "[DONE]"
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events[:-1] if e.get("choices"))
        assert text == " t0 t1 t2 t3 t4"
        assert r.router.pool.backends[0].outstanding_requests() == 0


def test_an_empty_relayed_body_is_headers_then_the_end():
    """A relay whose body yields nothing still answers (headers, then the end of the body) and closes it."""
    import asyncio

    from lenpred.route.forward import RelayStream

    closed = []

    async def body():
        try:
            return
            yield b""  # an async generator that yields nothing
        finally:
            closed.append(True)

    sent = []

    async def send(msg):
        sent.append(msg)

    async def receive():
        await asyncio.Event().wait()  # the client stays

    asyncio.run(RelayStream(body(), media_type="text/event-stream")({"type": "http"}, receive, send))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert closed == [True]
