"""The latency half of benchmarks/bench_router_predictors.py: one router-side estimator timed per request.

Every figure is the time ``await estimator.estimate(query)`` takes as the router sees it (the router's
own estimator classes, lenpred.route.estimators), per request, in ms:

* ``b1``: one request at a time, each a distinct prompt (the idle router);
* ``c200``: bursts of 200 requests started at once on the event loop (``asyncio.gather``), each
  timed from the burst's start to its answer (200 streams arriving together: a request's time includes
  its wait behind the others); ``over_timeout`` counts the
  answers slower than the router's default 0.5 s remote timeout (they would have fallen back).

Modes: ``inline`` (kind inline: the head called on the loop; the load-time budget is lifted here so
that every head can be timed), ``head`` (kind head: a worker thread behind the micro-batcher, max wait
2 ms), ``remote`` (kind remote: ``lenpred serve`` in a child process, over HTTP, kept-alive).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks import ROOT

__all__ = ["Serve", "time_estimator", "summary"]

TIMEOUT_S = 0.5  # the router's default estimator.timeout_s: slower remote answers fall back


def summary(ms: Sequence[float]) -> dict[str, float | int]:
    a = np.asarray(ms, dtype=np.float64)
    return {"p50": round(float(np.quantile(a, 0.5)), 4), "p99": round(float(np.quantile(a, 0.99)), 4),
            "n": int(a.size), "over_timeout": int((a > TIMEOUT_S * 1e3).sum())}


def queries(texts: Sequence[str]) -> list[Any]:
    from lenpred.route.bodies import Query

    return [Query("chat", "m", False, None, ({"role": "user", "content": t},), None, 1, None) for t in texts]


async def _one(est: Any, q: Any, t0: float | None = None) -> float:
    """ms from ``t0`` (the burst's start; default now) to the answer of ``q``."""
    t0 = time.perf_counter() if t0 is None else t0
    e = await est.estimate(q)
    if e.source.endswith("+fallback") or e.tokens is None:
        raise RuntimeError(f"the estimator fell back ({e.source}): the figure would not be the head's")
    return (time.perf_counter() - t0) * 1e3


async def _measure(est: Any, qs: list[Any], b1: int, bursts: int) -> dict[str, Any]:
    await est.start()
    try:
        for q in qs[:5]:  # warm-up: first calls of a runtime, the connection pool
            await est.estimate(q)
        seq = [await _one(est, qs[i % len(qs)]) for i in range(b1)]
        burst: list[float] = []
        for b in range(bursts):
            start = (b * 200) % len(qs)
            batch = [qs[(start + i) % len(qs)] for i in range(200)]
            t0 = time.perf_counter()  # all 200 arrive now: a request's time includes the wait for the others
            burst += await asyncio.gather(*(_one(est, q, t0) for q in batch))
    finally:
        await est.stop()
    return {"b1": summary(seq), "c200": summary(burst)}


def time_estimator(cfg: Any, texts: Sequence[str], b1: int, bursts: int) -> dict[str, Any]:
    """The b1 and c200 figures of the estimator ``cfg`` (an EstimatorConfig) on prompts ``texts``."""
    from lenpred.route.estimators import make_estimator

    est = make_estimator(cfg)
    primary = getattr(est, "primary", est)
    return asyncio.run(_measure(primary, queries(texts), b1, bursts))


class Serve:
    """``lenpred serve --head HEAD --port 0`` in a child process, until the ``with`` block ends."""

    def __init__(self, head: str, runtime: str = "torch", extra: Sequence[str] = ()) -> None:
        self.cmd = [sys.executable, "-m", "lenpred", "serve", "--head", head, "--port", "0", "--runtime", runtime, *extra]
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Serve:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert self.proc.stdout is not None
        seen = []
        for line in self.proc.stdout:  # the service prints its URL once the head is loaded
            seen.append(line.rstrip())
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                break
        if not self.url:
            raise RuntimeError(f"lenpred serve did not start: {' | '.join(seen[-5:])}")
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        import httpx

        for _ in range(600):  # the port accepts once uvicorn runs: at most ~60 s
            try:
                if httpx.get(self.url + "/healthz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError(f"lenpred serve at {self.url} never answered /healthz")

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
