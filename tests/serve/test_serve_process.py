"""The real `lenpred serve` process on a free loopback port: start, /healthz, predictions, errors, SIGTERM."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from serve.serve_testing import LONG, SHORT


def _lines(stream, q: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        q.put(line)
    q.put(None)


def _wait_for_port(proc: subprocess.Popen, q: queue.Queue, timeout: float) -> int:
    end = time.monotonic() + timeout
    seen = []
    while time.monotonic() < end:
        try:
            line = q.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        if line is None:
            break
        seen.append(line)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return int(m.group(1))
    raise AssertionError(f"lenpred serve did not start (rc {proc.poll()}): {''.join(seen)}")


def test_lenpred_serve_process(proxy_head: Path) -> None:
    exe = Path(sys.executable).with_name("lenpred")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([str(exe), "serve", "--head", str(proxy_head), "--port", "0", "--max-wait-ms", "5",
                             "--max-body-bytes", "2048"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    q: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, q), daemon=True).start()
    try:
        port = _wait_for_port(proc, q, timeout=120)
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as c:
            end = time.monotonic() + 60
            while True:  # the line is printed before uvicorn listens: wait for /healthz
                try:
                    h = c.get("/healthz")
                    if h.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < end, "no /healthz within 60 s"
                time.sleep(0.1)
            assert h.json()["head"] == "proxy-test" and h.json()["predictor"] == "proxy"

            texts = SHORT[:8] + LONG[:8]
            with ThreadPoolExecutor(16) as ex:
                out = list(ex.map(lambda t: c.post("/v1/predict", json={"prompt": t}), texts))
            assert all(r.status_code == 200 for r in out), [r.text for r in out]
            preds = [r.json()["predicted_tokens"] for r in out]
            assert max(preds[:8]) < 100 < 400 < min(preds[8:])  # the head's planted answers, over HTTP

            r = c.post("/v1/predict", content=b'{"prompt": ', headers={"content-type": "application/json"})
            assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
            r = c.post("/v1/predict", json={"prompt": "x" * 4000})
            assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
            m = c.get("/metrics").text
            assert 'lenpred_serve_requests_total{endpoint="/v1/predict",status="200"} 16.0' in m
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
