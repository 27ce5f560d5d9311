"""The load generators of benchmarks/bench_router.py: one streamed or unary request measured from the
client's side (time to the first token, each chunk's delivery lag against the stub's stamp, the text,
usage and headers), the overhead mode's keep-alive waves of concurrent streams, and the figures' small
statistics helpers.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np

__all__ = ["Conn", "chat_body", "client", "measure_stream", "measure_unary", "ms_summary", "quantile", "rounded",
           "summary", "waves"]


def quantile(xs: list[float], q: float) -> float | None:
    return float(np.quantile(np.asarray(xs), q)) if xs else None


def ms_summary(xs: list[float]) -> dict[str, float | None]:
    return {"p50": rounded(quantile(xs, 0.5), 1e3), "p99": rounded(quantile(xs, 0.99), 1e3), "n": len(xs)}


def rounded(x: float | None, scale: float = 1.0, nd: int = 3) -> float | None:
    return None if x is None else round(x * scale, nd)


# ---------------------------------------------------------------- one streamed request, measured
async def measure_stream(c: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    rec: dict[str, Any] = {"t_send": t0, "first": None, "lags": [], "n": 0, "done": False, "error": None,
                           "text": [], "status": None, "headers": {}, "usage": None}
    try:
        async with c.stream("POST", url, json=body) as r:
            rec["status"], rec["headers"] = r.status_code, dict(r.headers)
            if r.status_code != 200:
                raw = await r.aread()
                try:
                    rec["error"] = json.loads(raw)["error"]["message"]
                except (ValueError, KeyError, TypeError):
                    rec["error"] = f"HTTP {r.status_code} without an OpenAI error body"
                    rec["lost"] = True
                return rec
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    rec["done"] = True
                    continue
                now = time.monotonic()
                ev = json.loads(payload)
                if "error" in ev:
                    rec["error"] = ev["error"].get("message")
                    continue
                if ev.get("usage"):
                    rec["usage"] = ev["usage"]
                if not ev.get("choices"):
                    continue
                if "stub_t" in ev:
                    rec["lags"].append(now - ev["stub_t"])
                ch = ev["choices"][0]
                piece = ch.get("text") or (ch.get("delta") or {}).get("content") or ""
                if rec["first"] is None and piece:
                    rec["first"] = now - t0
                rec["text"].append(piece)
                rec["n"] += bool(piece)  # a role-only first chunk or an empty last one is not a token
    except (httpx.HTTPError, ValueError) as e:
        rec["error"], rec["lost"] = f"{type(e).__name__}: {e}", True
    rec["e2e"] = time.monotonic() - t0
    return rec


async def measure_unary(c: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    rec: dict[str, Any] = {"t_send": t0, "error": None, "status": None, "headers": {}, "text": []}
    try:
        r = await c.post(url, json=body)
        rec["status"], rec["headers"] = r.status_code, dict(r.headers)
        j = r.json()
        if r.status_code == 200:
            rec["text"] = [j["choices"][0]["message"]["content"]]
            rec["done"] = True
        else:
            rec["error"] = j["error"]["message"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
        rec["error"], rec["lost"] = f"{type(e).__name__}: {e}", True
    rec["e2e"] = time.monotonic() - t0
    return rec


def chat_body(n: int, stream: bool, model: str = "stub", prompt: str = "Count for me, please.") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": n, "stream": stream}


def client(n: int, timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8))


class Conn:
    """A minimal keep-alive HTTP/1.1 client connection for the overhead waves: httpx's pool scans all its
    connections on every event, so a client holding hundreds of them measures itself, not the router."""

    def __init__(self, url: str) -> None:
        from urllib.parse import urlsplit

        u = urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    async def stream(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.w is None:
            self.r, self.w = await asyncio.open_connection(self.host, self.port)
        assert self.r is not None
        data = json.dumps(body).encode()
        rec: dict[str, Any] = {"first": None, "lags": [], "n": 0, "done": False, "error": None, "status": None}
        t0 = time.monotonic()
        self.w.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await self.w.drain()
        head = (await self.r.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
        rec["status"] = int(head.split(" ", 2)[1])
        if "transfer-encoding: chunked" not in head:
            n = int(head.split("content-length:", 1)[1].split("\r\n", 1)[0]) if "content-length:" in head else 0
            await self.r.readexactly(n)
            rec["error"] = f"HTTP {rec['status']}"
            return rec
        buf = b""
        while True:
            size = int((await self.r.readuntil(b"\r\n")).strip(), 16)
            chunk = await self.r.readexactly(size + 2)
            if size == 0:
                break
            now = time.monotonic()
            buf += chunk[:-2]
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.startswith(b"data: "):
                    continue
                if line[6:] == b"[DONE]":
                    rec["done"] = True
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    rec["error"] = ev["error"]["message"]
                    continue
                if rec["first"] is None:
                    rec["first"] = now - t0
                rec["lags"].append(now - ev["stub_t"])
                rec["n"] += 1
        return rec

    def close(self) -> None:
        if self.w is not None:
            self.w.close()


async def waves(urls: list[str], streams: int, rounds: int, tokens: int, ramp_s: float = 1.0,
                prompts: list[str] | None = None) -> list[dict[str, Any]]:
    """``rounds`` waves of ``streams`` concurrent streams (plus a first, uncounted wave that opens the
    connections); each stream has a connection of its own, kept alive from wave to wave. The streams of
    a wave start evenly over ``ramp_s`` (all at once, every stub would emit its tokens at the same instants:
    a burst that measures queueing in the client, not the path). ``prompts``: the user messages, one per
    request in turn (distinct prompts, as a router's predictor sees them); default one short prompt."""
    conns = [Conn(urls[i % len(urls)]) for i in range(streams)]
    out: list[dict[str, Any]] = []

    async def one(i: int, c: Conn, k: int) -> dict[str, Any]:
        await asyncio.sleep(ramp_s * i / streams)
        body = chat_body(tokens, True) if not prompts else chat_body(tokens, True, prompt=prompts[k % len(prompts)])
        return await c.stream("/v1/chat/completions", body)

    with quiet_gc():
        try:
            for w in range(rounds + 1):
                recs = await asyncio.gather(*(one(i, c, w * streams + i) for i, c in enumerate(conns)))
                if w:
                    out.extend(recs)
        finally:
            for c in conns:
                c.close()
    return out


@contextlib.contextmanager
def quiet_gc() -> Iterator[None]:
    """No garbage collection in the load generator while it measures: its heap (pyarrow, httpx, the records)
    made a full collection take ~30 ms, and one that fell on a wave's first tokens added ~30 ms to every
    stream waiting for one -- to whichever path was being measured (the +25 ms p99 "added by the router" at
    200 streams with --prompts, which imports pyarrow: docs/route.md). Frozen first, enabled again after."""
    gc.collect()
    gc.freeze()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
        gc.unfreeze()


def summary(recs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in recs if r.get("done") and r["error"] is None]
    return {"requests": len(recs), "ok": len(ok), "first_token_ms": ms_summary([r["first"] for r in ok]),
            "per_chunk_ms": ms_summary([x for r in ok for x in r["lags"][1:]]),  # chunks after the first
            "first_chunk_lag_ms": ms_summary([r["lags"][0] for r in ok if r["lags"]])}
