"""A stub OpenAI-compatible backend that streams tokens at a fixed rate, for the router's load and fault
tests and benchmarks (results that must not depend on CPU speed); not part of the lenpred package.
Plain asyncio HTTP/1.1, no framework, so that 200 concurrent streams cost it little CPU.

    python benchmarks/route_stub.py --port 8001 --name a --tokens-per-s 50 --ttft-ms 20

* ``POST /v1/chat/completions`` and ``/v1/completions``: ``max_tokens`` tokens (``--default-tokens``
  when absent), the first after ``--ttft-ms``, then one every 1/``--tokens-per-s`` s, streamed (SSE,
  one token per event, ``usage`` at the end with ``stream_options.include_usage``) or not. Each chunk
  carries ``stub_t``, the stub's ``time.monotonic()`` when it was written (the same clock in every
  process on the machine), so a client can measure the delivery latency of each chunk.
  ``--role-chunks 1`` frames a chat stream as llama.cpp and vLLM do: a role chunk first and a finish
  chunk last, neither with text. ``--slots K`` serves K requests at once (the rest queue, first come
  first served), like an engine with K sequences; 0 (the default) serves all at once. ``--cap-tokens N``
  answers at most N tokens whatever ``max_tokens`` asks (0: no cap), for a fuzzer's large values.
* ``GET /v1/models``, ``GET /health``.
* ``POST /stub/fault {"mode": M, "count": N}``: the next N completions (all, when N is null) fail as M:
  ``500``, ``502``, ``503``, ``504``, ``429``, ``400`` (an HTTP error), ``garbage`` (200 with an HTML page),
  ``hang`` (never answers), ``empty`` (a 200 stream that ends before any token), ``hang-after:K`` /
  ``close-after:K`` (K tokens, then silence / a dropped connection), ``reject-priority`` (HTTP 400
  when the body has a ``priority`` field, like vLLM without ``--scheduling-policy priority``),
  ``string-content`` (HTTP 500 with llama-cpp-python's chat-template error when a message's content is
  not a string, as its templates answer a list of parts),
  ``unhealthy`` (also /v1/models and /health answer 503), ``linger`` (a stream's ``[DONE]``, then 10 s before
  the body ends, as a server that is slow to close), ``ok``.
* ``GET /stub/requests``: the bodies (without prompts; ``content_kinds``: each message's content type,
  ``str`` or ``list``) and ``x-lenpred-*`` headers of the last 1000 completions; ``POST /stub/reset``
  clears them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import signal
import sys
import time
from typing import Any

__all__ = ["StubServer", "main"]

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


class StubServer:
    def __init__(self, name: str = "stub", model: str = "stub", tokens_per_s: float = 50.0, ttft_ms: float = 20.0,
                 default_tokens: int = 16, slots: int = 0, fault: str = "ok", role_chunks: bool = False,
                 cap_tokens: int = 0) -> None:
        self.name, self.model = name, model
        self.cap_tokens = cap_tokens
        self.role_chunks = role_chunks
        self.interval = 1.0 / tokens_per_s
        self.ttft = ttft_ms / 1e3
        self.default_tokens = default_tokens
        self.slots = asyncio.Semaphore(slots) if slots > 0 else None
        self.fault, self.fault_left = fault, None  # None: every request
        self.requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=1000)
        self.served = 0
        self.active = 0
        self._seq = 0

    # -- fault control
    def _take_fault(self) -> str:
        mode = self.fault
        if mode in ("ok", "unhealthy", "reject-priority", "string-content"):
            return mode
        if self.fault_left is not None:
            self.fault_left -= 1
            if self.fault_left <= 0:
                self.fault, self.fault_left = "ok", None
        return mode

    # -- HTTP
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
                headers = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(n) if n else b""
                keep = await self.route(method, path.split("?", 1)[0], headers, body, writer)
                if not keep or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, code: int, body: bytes, ctype: str = "application/json") -> bool:
        writer.write(f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\nContent-Type: {ctype}\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        return True

    async def _json(self, writer: asyncio.StreamWriter, code: int, obj: Any) -> bool:
        return await self._send(writer, code, json.dumps(obj).encode())

    async def route(self, method: str, path: str, headers: dict[str, str], body: bytes,
                    writer: asyncio.StreamWriter) -> bool:
        if method == "GET" and path in ("/v1/models", "/health", "/models"):
            if self.fault == "unhealthy":
                return await self._json(writer, 503, {"error": {"message": "stub is unhealthy"}})
            if path == "/health":
                return await self._send(writer, 200, b"")
            return await self._json(writer, 200, {"object": "list", "data": [
                {"id": self.model, "object": "model", "owned_by": self.name}]})
        if method == "POST" and path == "/stub/fault":
            j = json.loads(body or b"{}")
            self.fault, self.fault_left = str(j.get("mode", "ok")), j.get("count")
            return await self._json(writer, 200, {"mode": self.fault, "count": self.fault_left})
        if method == "GET" and path == "/stub/requests":
            return await self._json(writer, 200, {"name": self.name, "requests": list(self.requests)})
        if method == "POST" and path == "/stub/reset":
            self.requests.clear()
            return await self._json(writer, 200, {})
        if method == "GET" and path == "/stub/stats":
            return await self._json(writer, 200, {"name": self.name, "served": self.served, "active": self.active})
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            return await self.complete(path, headers, body, writer)
        return await self._json(writer, 404, {"error": {"message": f"no route {method} {path}"}})

    async def complete(self, path: str, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter) -> bool:
        try:
            body = json.loads(raw)
        except ValueError:
            return await self._json(writer, 400, {"error": {"message": "stub: body is not JSON"}})
        chat = path.endswith("chat/completions")
        self.requests.append({
            "path": path, "t": time.monotonic(),
            "body": {k: v for k, v in body.items() if k not in ("messages", "prompt")},
            "content_kinds": [type(m.get("content")).__name__ for m in body.get("messages") or [] if isinstance(m, dict)],
            "headers": {k: v for k, v in headers.items() if k.startswith("x-lenpred") or k == "x-request-id"},
        })
        fault = self._take_fault()
        if fault in ("500", "502", "503", "504", "429", "400"):
            return await self._json(writer, int(fault), {"error": {"message": f"stub {self.name}: scripted {fault}"}})
        if fault == "unhealthy":
            return await self._json(writer, 503, {"error": {"message": "stub is unhealthy"}})
        if fault == "reject-priority" and "priority" in body:
            return await self._json(writer, 400, {"object": "error", "message": "Got priority 3 but Priority "
                                                  "scheduling is not enabled.", "type": "BadRequestError", "code": 400})
        if fault == "string-content" and any(not isinstance(m.get("content"), str) for m in body.get("messages", [])):
            return await self._json(writer, 500, {"error": {"message": 'can only concatenate str (not "list") to str',
                                                            "type": "internal_server_error", "param": None, "code": None}})
        if fault == "garbage":
            return await self._send(writer, 200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
        if fault == "hang":
            await asyncio.sleep(3600)
            return False
        n = int(body.get("max_completion_tokens") or body.get("max_tokens") or self.default_tokens)
        if self.cap_tokens:
            n = min(n, self.cap_tokens)
        stream = bool(body.get("stream"))
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self._seq += 1
        rid = f"stub-{self.name}-{self._seq}"
        if self.slots is not None:
            await self.slots.acquire()
        self.active += 1
        try:
            if not stream:
                return await self._unary(writer, rid, chat, body, n)
            return await self._stream(writer, rid, chat, body, n, usage, fault)
        finally:
            self.active -= 1
            self.served += 1
            if self.slots is not None:
                self.slots.release()

    def _text(self, i: int) -> str:
        return f" t{i}"

    async def _unary(self, writer: asyncio.StreamWriter, rid: str, chat: bool, body: dict[str, Any], n: int) -> bool:
        await asyncio.sleep(self.ttft + (n - 1) * self.interval)
        text = "".join(self._text(i) for i in range(n))
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        obj = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
               "model": body.get("model", self.model), "choices": [choice], "stub_backend": self.name,
               "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}
        return await self._json(writer, 200, obj)

    async def _stream(self, writer: asyncio.StreamWriter, rid: str, chat: bool, body: dict[str, Any], n: int,
                      usage: bool, fault: str) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        if fault == "empty":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        stop_at = None
        if fault.startswith(("hang-after:", "close-after:")):
            stop_at = int(fault.split(":", 1)[1])
        model = body.get("model", self.model)
        obj = "chat.completion.chunk" if chat else "text_completion"
        t0 = time.monotonic() + self.ttft
        for i in range(n):
            if stop_at is not None and i >= stop_at:
                if fault.startswith("hang-after:"):
                    await asyncio.sleep(3600)
                writer.transport.abort()
                return False
            delay = t0 + i * self.interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if chat and i == 0 and self.role_chunks:  # llama.cpp and vLLM: the role alone, then the tokens
                _chunk(writer, _event(rid, obj, model, {"index": 0, "delta": {"role": "assistant", "content": ""},
                                                         "finish_reason": None}))
            if chat:
                delta: dict[str, Any] = {"content": self._text(i)}
                if i == 0 and not self.role_chunks:
                    delta["role"] = "assistant"
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
            else:
                choice = {"index": 0, "text": self._text(i), "finish_reason": None}
            if i == n - 1 and not (chat and self.role_chunks):
                choice["finish_reason"] = "length"
            ev = {"id": rid, "object": obj, "created": 0, "model": model, "choices": [choice],
                  "stub_t": time.monotonic()}
            _chunk(writer, b"data: " + json.dumps(ev).encode() + b"\n\n")
            await writer.drain()
        tail = b""
        if chat and self.role_chunks:  # the finish reason in a chunk of its own, without text
            tail = _event(rid, obj, model, {"index": 0, "delta": {}, "finish_reason": "length"})
        if usage:
            u = {"id": rid, "object": obj, "created": 0, "model": model, "choices": [],
                 "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}
            tail += b"data: " + json.dumps(u).encode() + b"\n\n"
        _chunk(writer, tail + b"data: [DONE]\n\n")
        if fault == "linger":
            await writer.drain()
            await asyncio.sleep(10)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def _event(rid: str, obj: str, model: str, choice: dict[str, Any]) -> bytes:
    ev = {"id": rid, "object": obj, "created": 0, "model": model, "choices": [choice], "stub_t": time.monotonic()}
    return b"data: " + json.dumps(ev).encode() + b"\n\n"


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


async def serve(args: argparse.Namespace) -> None:
    stub = StubServer(args.name, args.model, args.tokens_per_s, args.ttft_ms, args.default_tokens, args.slots,
                      args.fault, bool(args.role_chunks), args.cap_tokens)
    server = await asyncio.start_server(stub.handle, args.host, args.port, backlog=1024, reuse_address=True)
    port = server.sockets[0].getsockname()[1]
    print(f"stub {args.name} listening on http://{args.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="route_stub.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--name", default="stub")
    p.add_argument("--model", default="stub")
    p.add_argument("--tokens-per-s", type=float, default=50.0, help="tokens per second per stream")
    p.add_argument("--ttft-ms", type=float, default=20.0, help="time to the first token")
    p.add_argument("--default-tokens", type=int, default=16, help="tokens when the request has no max_tokens")
    p.add_argument("--slots", type=int, default=0, help="requests served at once (0: all)")
    p.add_argument("--fault", default="ok", help="initial fault mode for every request (see the module doc)")
    p.add_argument("--role-chunks", type=int, default=0,
                   help="1: chat streams open with a role chunk and end with a finish chunk, neither with text "
                        "(as llama.cpp and vLLM do); 0: the first and last tokens carry them")
    p.add_argument("--cap-tokens", type=int, default=0, help="at most this many tokens per answer (0: no cap)")
    args = p.parse_args(argv)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
