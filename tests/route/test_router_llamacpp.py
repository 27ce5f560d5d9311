"""The router (a real ``lenpred route`` process) in front of two real llama.cpp servers (llama-cpp-python with
the embedded SmolLM2 GGUF) on loopback: greedy requests through the router give the same content as going
direct, streamed and not; a backend killed mid-run leaves no request lost (each one completes, or ends
with a clean error: an SSE error event, or an OpenAI error body), and the router goes on with the other.
Few, short requests (max_tokens 12-24): the CPU is shared."""

from __future__ import annotations

import asyncio
import importlib.util
import json

import httpx
import pytest
from route_testing import LlamaServer, RouterProcess, sse_data

pytestmark = [
    pytest.mark.slow, pytest.mark.llamacpp,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed"),
]
MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    logs = tmp_path_factory.mktemp("llama")
    a, b = LlamaServer("a", log_dir=logs), LlamaServer("b", log_dir=logs)
    a.start()
    b.start()
    router = RouterProcess({
        "backends": [{"url": a.url, "name": "a", "priority": "auto"}, {"url": b.url, "name": "b"}],
        "policy": "least-predicted-tokens",
        "health": {"interval_s": 0.5, "fail_after": 1},
        "timeouts": {"read_s": 60.0, "total_s": 120.0},
    }, log_dir=logs, log_level="info").start()
    yield a, b, router
    for p in (router, a, b):
        p.stop()


def _chat(prompt: str, stream: bool, n: int = 12) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": n, "temperature": 0.0,
            "stream": stream, "seed": 0}


def _content(resp: httpx.Response, stream: bool) -> str:
    assert resp.status_code == 200, resp.text
    if not stream:
        return resp.json()["choices"][0]["message"]["content"]
    evs = sse_data(resp.text)
    assert evs[-1] == "[DONE]"
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in evs[:-1] if e.get("choices"))


def test_greedy_through_the_router_equals_direct(fleet):
    a, b, router = fleet
    prompt = "Name three colors."
    for stream in (False, True):
        direct = _content(httpx.post(a.url + "/v1/chat/completions", json=_chat(prompt, stream), timeout=60), stream)
        via = httpx.post(router.url + "/v1/chat/completions", json=_chat(prompt, stream), timeout=60)
        assert _content(via, stream) == direct and direct.strip()
        assert via.headers["x-lenpred-backend"] in ("a", "b") and int(via.headers["x-lenpred-predicted-tokens"]) > 0
    comp = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0.0}
    d = httpx.post(b.url + "/v1/completions", json=comp, timeout=60).json()["choices"][0]["text"]
    v = httpx.post(router.url + "/v1/completions", json=comp, timeout=60).json()["choices"][0]["text"]
    assert v == d
    models = httpx.get(router.url + "/v1/models").json()["data"]
    assert [m["id"] for m in models] == [MODEL]


def test_a_backend_killed_mid_run_loses_nothing(fleet):
    """Kill backend a once one of its streams has sent a token: that stream ends with an SSE error event,
    the requests queued on a (not streaming yet) are retried on b, and none is lost."""
    a, b, router = fleet
    prompts = [f"Write one sentence about the number {i}." for i in range(6)]
    outcomes: list[str] = []
    a_streaming = asyncio.Event()

    async def one(c: httpx.AsyncClient, p: str) -> None:
        try:
            async with c.stream("POST", router.url + "/v1/chat/completions", json=_chat(p, True, 24)) as r:
                if r.status_code != 200:
                    body = json.loads(await r.aread())
                    outcomes.append("failed-clean" if "error" in body else f"lost: HTTP {r.status_code}")
                    return
                lines = []
                async for line in r.aiter_lines():
                    lines.append(line)
                    if r.headers["x-lenpred-backend"] == "a" and line.startswith("data: {"):
                        a_streaming.set()
        except httpx.HTTPError as e:
            outcomes.append(f"lost: {type(e).__name__}")
            return
        evs = sse_data("\n".join(lines))
        if evs and evs[-1] == "[DONE]" and isinstance(evs[-2], dict) and "error" in evs[-2]:
            outcomes.append("failed-clean")
        elif evs and evs[-1] == "[DONE]":
            outcomes.append(f"completed:{r.headers['x-lenpred-backend']}:{r.headers['x-lenpred-attempts']}")
        else:
            outcomes.append("lost: stream without [DONE]")

    async def go() -> None:
        async with httpx.AsyncClient(timeout=120) as c:
            tasks = [asyncio.create_task(one(c, p)) for p in prompts]
            await asyncio.wait_for(a_streaming.wait(), 60)
            a.kill()
            await asyncio.gather(*tasks)

    asyncio.run(go())
    print(json.dumps(outcomes))
    assert len(outcomes) == len(prompts) and not [o for o in outcomes if o.startswith("lost")], outcomes
    assert outcomes.count("failed-clean") == 1  # the stream that had started on a (it serves one at a time)
    assert any(o.startswith("completed:b:") and o.endswith(":2") for o in outcomes)  # queued on a: retried
    assert any(o.startswith("completed:b") for o in outcomes), outcomes
    after = httpx.post(router.url + "/v1/chat/completions", json=_chat("Say hi.", False, 4), timeout=60)
    assert after.status_code == 200 and after.headers["x-lenpred-backend"] == "b"
    h = httpx.get(router.url + "/healthz").json()
    assert h["backends"][0]["healthy"] is False and h["healthy"] == 1
