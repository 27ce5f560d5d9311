"""The real `lenpred route` process: a stop (SIGTERM) lets the streams in flight finish and exits 0, as
`lenpred serve` does (it was killed by the signal: exit code -15); the requests still running at the drain
limit (timeouts.drain_s) end with an OpenAI-format answer."""

from __future__ import annotations

import signal
import threading
import time

import httpx
from route_testing import RouterProcess, Stub, sse_data


def test_sigterm_drains_the_streams_in_flight_and_exits_0(tmp_path) -> None:
    with Stub("slow", log_dir=tmp_path, tokens_per_s=20) as stub:  # 20 tokens: a second of streaming
        router = RouterProcess({"backends": [{"url": stub.url, "name": "slow"}], "log_requests": False},
                               log_dir=tmp_path)
        router.start()  # returns once /healthz answers: the router is up
        try:
            body = {"model": "stub", "messages": [{"role": "user", "content": "count"}], "max_tokens": 20,
                    "stream": True}
            with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=60) as s:
                lines = s.iter_lines()
                got = [next(ln for ln in lines if ln.startswith("data:"))]  # the stream is in flight
                router.proc.send_signal(signal.SIGTERM)
                got += list(lines)
            assert router.proc.wait(timeout=60) == 0
        finally:
            router.stop()
        evs = sse_data("\n".join(got))
        assert evs[-1] == "[DONE]"
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in evs[:-1])
        assert text == "".join(f" t{i}" for i in range(20))  # the whole answer, after the signal
        assert "lenpred route: stopped" in router.log.read_text()


def test_requests_still_running_at_the_drain_limit_end_openai_shaped(tmp_path) -> None:
    """A stream far longer than the drain limit ends with an SSE error event and [DONE]; a non-streamed
    request whose backend never answers ends with a 503 JSON error (not uvicorn's 500 text/plain)."""
    with Stub("slow", log_dir=tmp_path, tokens_per_s=5) as stub:  # 1000 tokens: minutes of streaming
        router = RouterProcess({"backends": [{"url": stub.url, "name": "slow"}], "log_requests": False,
                                "timeouts": {"drain_s": 0.5}}, log_dir=tmp_path)
        router.start()
        unary: dict = {}
        try:
            body = {"model": "stub", "messages": [{"role": "user", "content": "count"}], "max_tokens": 1000}
            with httpx.stream("POST", router.url + "/v1/chat/completions", json={**body, "stream": True},
                              timeout=60) as s:
                lines = s.iter_lines()
                got = [next(ln for ln in lines if ln.startswith("data:"))]  # the stream is in flight
                stub.fault("hang", count=1)  # the next request is never answered
                t = threading.Thread(target=lambda: unary.update(r=httpx.post(
                    router.url + "/v1/chat/completions", json=body, timeout=60)))
                t.start()
                deadline = time.monotonic() + 60
                while len(stub.requests()) < 2:  # the non-streamed one reached the backend: in flight too
                    assert time.monotonic() < deadline and t.is_alive(), "the second request did not arrive"
                    time.sleep(0.02)
                router.proc.send_signal(signal.SIGTERM)
                got += list(lines)
                t.join(timeout=60)
            assert router.proc.wait(timeout=60) == 0
        finally:
            router.stop()
    evs = sse_data("\n".join(got))
    assert evs[-1] == "[DONE]" and 0 < len(evs) - 2 < 1000, evs[-3:]
    err = evs[-2]["error"]
    assert err["code"] == "shutting_down" and "drain limit of 0.5 s" in err["message"], err
    resp = unary["r"]
    assert resp.status_code == 503 and resp.headers["content-type"] == "application/json", resp.text
    assert resp.json()["error"]["code"] == "shutting_down" and resp.json()["error"]["type"] == "server_error"
    assert "lenpred route: stopped" in router.log.read_text()
