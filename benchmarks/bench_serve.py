"""Latency of `lenpred serve`: one request at a time (batch 1) and 64 concurrent requests.

Starts the real service (``lenpred serve --port 0``) on loopback, sends ShareGPT prompt texts of the
reference run, and measures each request's latency at the client (HTTP round trip) and at the server
(``elapsed_ms``: arrival to answer, queueing included), the throughput, and the mean micro-batch
size (from ``/metrics``). The client runs on the same machine: on a small shared CPU it competes
with the service, so the concurrent figures are an upper bound on what the service alone needs.

    python -m benchmarks.bench_serve --head data/heads/proxy-smollm2-sharegpt --out out/bench/serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks import ROOT


def _texts(run: Path, n: int) -> list[str]:
    from lenpred.data.rundir import RunDir

    p = RunDir.open(run).prompts()
    return p["text"].astype(str).tolist()[:n]


def _start(head: str, max_batch: int, max_wait_ms: float, threads: int) -> tuple[subprocess.Popen, str]:
    exe = Path(sys.executable).with_name("lenpred")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([str(exe), "serve", "--head", head, "--port", "0", "--max-batch", str(max_batch),
                             "--max-wait-ms", str(max_wait_ms), "--threads", str(threads)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"listening on (http://[\d.]+:\d+)", line)
        if m:
            return proc, m.group(1)
    raise SystemExit(f"lenpred serve did not start (rc {proc.wait()})")


async def _ready(c: httpx.AsyncClient) -> dict:
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            r = await c.get("/healthz")
            if r.status_code == 200:
                return r.json()
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("no /healthz within 120 s")


def _batch_stats(metrics: str) -> tuple[float, float]:
    def val(name: str) -> float:
        m = re.search(rf"^{name} ([\d.e+]+)$", metrics, re.M)
        return float(m.group(1)) if m else 0.0

    return val("lenpred_serve_batch_size_sum"), val("lenpred_serve_batch_size_count")


async def _phase(c: httpx.AsyncClient, texts: list[str], concurrency: int) -> dict:
    s0, n0 = _batch_stats((await c.get("/metrics")).text)
    sem = asyncio.Semaphore(concurrency)
    client_ms: list[float] = []
    server_ms: list[float] = []

    async def one(t: str) -> None:
        async with sem:
            t0 = time.perf_counter()
            r = await c.post("/v1/predict", json={"prompt": t})
            client_ms.append((time.perf_counter() - t0) * 1e3)
            r.raise_for_status()
            server_ms.append(r.json()["elapsed_ms"])

    t0 = time.perf_counter()
    await asyncio.gather(*(one(t) for t in texts))
    wall = time.perf_counter() - t0
    s1, n1 = _batch_stats((await c.get("/metrics")).text)
    cm, sm = np.array(client_ms), np.array(server_ms)
    return {"requests": len(texts), "concurrency": concurrency,
            "p50_ms": float(np.percentile(cm, 50)), "p99_ms": float(np.percentile(cm, 99)), "mean_ms": float(cm.mean()),
            "server_p50_ms": float(np.percentile(sm, 50)), "server_p99_ms": float(np.percentile(sm, 99)),
            "requests_per_s": len(texts) / wall, "model_calls": int(n1 - n0),
            "mean_batch": float((s1 - s0) / max(n1 - n0, 1))}


async def _bench(base: str, texts: list[str], n1: int, n64: int, concurrency: int) -> tuple[dict, dict]:
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as c:
        health = await _ready(c)
        await _phase(c, texts[:8], 1)  # warm-up
        single = await _phase(c, texts[:n1], 1)
        many = await _phase(c, (texts * (n64 // max(len(texts), 1) + 1))[:n64], concurrency)
    return health, {"batch1": single, f"concurrent{concurrency}": many}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--head", default=str(ROOT / "data/heads/proxy-smollm2-sharegpt"))
    ap.add_argument("--run", default=str(ROOT / "data/runs/smollm2-sharegpt"), help="prompt texts from this run")
    ap.add_argument("--n1", type=int, default=64, help="requests sent one at a time")
    ap.add_argument("--n64", type=int, default=256, help="requests sent with --concurrency in flight")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=64)
    ap.add_argument("--max-wait-ms", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "out/bench/serve.json"))
    a = ap.parse_args()
    texts = _texts(Path(a.run), max(a.n1, a.n64))
    proc, base = _start(a.head, a.max_batch, a.max_wait_ms, a.threads)
    try:
        health, phases = asyncio.run(_bench(base, texts, a.n1, a.n64, a.concurrency))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    load = os.getloadavg()
    result = {"head": health["head"], "predictor": health["predictor"], "input_kind": health["input_kind"],
              "max_batch": a.max_batch, "max_wait_ms": a.max_wait_ms, "threads": a.threads,
              "cpu": {"cores": os.cpu_count(), "load_avg_1m_after": round(load[0], 2),
                      "note": "client and service share this CPU (and with any background job)"},
              "phases": phases}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    t = Table(title=f"lenpred serve, head {result['head']} ({result['predictor']}), loopback HTTP")
    for col in ("phase", "requests", "p50 ms", "p99 ms", "server p50 ms", "req/s", "mean batch"):
        t.add_column(col, justify="right")
    for name, p in phases.items():
        t.add_row(name, str(p["requests"]), f"{p['p50_ms']:.1f}", f"{p['p99_ms']:.1f}", f"{p['server_p50_ms']:.1f}",
                  f"{p['requests_per_s']:.1f}", f"{p['mean_batch']:.1f}")
    Console().print(t)
    print(f"cpu: {os.cpu_count()} cores, load average {load[0]:.2f} after the run (shared); -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
