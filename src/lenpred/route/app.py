"""The router as an ASGI app (FastAPI): ``/v1/chat/completions``, ``/v1/completions`` (SSE or not),
``/v1/models``, ``/healthz``, ``/metrics``.

One request, in order: read the body (bounded), check it is an OpenAI request of that kind and that
some backend serves its model, predict its output length, compute its priority key, take a slot on
a backend chosen by the dispatch policy (or wait for one, bounded), forward it with the priority
field and the ``x-lenpred-*`` headers, relay the answer. A failure before the first token reaches
the client (unreachable, 5xx, 429, garbage, no first token within ``read_s``) is retried on another
backend; a failure after it ends the stream with an SSE error event and ``[DONE]``. The backend's own
4xx (a bad parameter) is passed on as it is. Every outcome is an OpenAI-format error with the right
status code; none hangs (every wait has a timeout) and none crashes the router.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from yarl import URL

from lenpred.route.backends import Backend, Flight, Pool, QueueFull, QueueTimeout
from lenpred.route.config import RouterConfig
from lenpred.route.estimators import Estimate, make_estimator
from lenpred.route.metrics import RouterMetrics
from lenpred.route.openai import ApiError, Query, SSECounter, backend_message, parse_request, sse_error_event
from lenpred.route.priority import PriorityMapper
from lenpred.route.upstream import Client, UpstreamError, UpstreamResponse

__all__ = ["Router", "create_app"]

log = logging.getLogger("lenpred.route")

PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
# not forwarded: hop-by-hop headers, and those the router sets itself
_DROP = frozenset({
    "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
    "proxy-authorization", "proxy-connection", "accept-encoding", "content-type", "x-request-id",
    "x-lenpred-predicted-tokens", "x-lenpred-priority",
})
_RID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class _Retry(Exception):
    """This backend failed before anything reached the client: try another."""

    def __init__(self, error: ApiError, reason: str) -> None:
        super().__init__(error.message)
        self.error, self.reason = error, reason


@dataclass
class _Ctx:
    """One request on its way through the router."""

    rid: str
    query: Query
    body: dict[str, Any]
    est: Estimate
    tokens: float | None  # per sequence, capped at max_tokens
    flight: Flight
    t_in: float
    deadline: float
    in_headers: list[tuple[str, str]]
    attempts: int = 0
    priority: int | None = None
    backend: Backend | None = None
    reasons: list[str] = field(default_factory=list)


class _Stream(StreamingResponse):
    """A StreamingResponse that always watches for the client going away (so the backend's request is
    closed at once, not at the next write) and always closes its body iterator (which frees the slot)."""

    async def stream_response(self, send: Any) -> None:
        try:
            await super().stream_response(send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async with anyio.create_task_group() as tg:
            async def wrap(func: Any) -> None:
                with contextlib.suppress(OSError):
                    await func()
                tg.cancel_scope.cancel()

            tg.start_soon(wrap, partial(self.stream_response, send))
            await wrap(partial(self.listen_for_disconnect, receive))


def _error(e: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


class Router:
    """State and request handling; :func:`create_app` puts it behind FastAPI routes."""

    def __init__(self, cfg: RouterConfig, estimator: Any = None) -> None:
        self.cfg = cfg
        self.pool = Pool(cfg.backends, cfg.policy, cfg.seed, cfg.limits.max_queued)
        self.metrics = RouterMetrics(self.pool)
        self.estimator = estimator if estimator is not None else make_estimator(
            cfg.estimator, on_fallback=lambda reason: self.metrics.fallbacks.inc())
        self.prio = PriorityMapper(cfg.priority, cfg.default_tokens)
        self.client = Client(cfg.timeouts.connect_s)  # backend requests and health checks
        # each backend's endpoints, parsed once
        self.targets = [{kind: URL(b.url + path) for kind, path in PATHS.items()} for b in self.pool.backends]
        self._health: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.client.start()
        await self.estimator.start()
        # one round of checks before serving: /v1/models knows the models, a dead backend starts out
        await asyncio.gather(*(self.pool.check(self.client, b, self.cfg.health) for b in self.pool.backends))
        for b in self.pool.backends:
            if b.fails:
                b.mark_down(b.last_error or "no answer at start")
        self._health = asyncio.create_task(self.pool.health_loop(self.client, self.cfg.health))

    async def stop(self) -> None:
        if self._health is not None:
            self._health.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health
        await self.estimator.stop()
        await self.client.close()

    # ------------------------------------------------------------------ one request
    async def handle(self, request: Request, kind: str) -> Response:
        t_in = time.monotonic()
        rid = request.headers.get("x-request-id", "")
        if not _RID.match(rid):
            rid = str(uuid.uuid4())  # a UUID: some servers (llama-cpp-python) refuse any other x-request-id
        try:
            raw = await self._read_body(request)
            body, q = parse_request(raw, kind)
            self._check_model(q.model)
            est = await self.estimator.estimate(q)
        except ApiError as e:
            self.metrics.requests.labels("-", "rejected").inc()
            self._log(rid, f"rejected status={e.status} {e.message}")
            return _error(e, {"x-request-id": rid})
        self.metrics.estimate.labels(est.source).observe(est.elapsed_ms / 1e3)
        tokens = est.tokens
        if tokens is not None and q.max_tokens is not None:
            tokens = min(tokens, float(q.max_tokens))
        key = self.prio.key(tokens, est.spread)
        n = q.n_sequences
        load = (tokens if tokens is not None else self.cfg.default_tokens) * n
        spread = (est.spread or 0.0) * math.sqrt(n)
        if tokens is not None:
            self.metrics.predicted.observe(tokens)
        headers = [(k, v) for k, v in request.headers.items() if k not in _DROP]
        prompt_tokens = q.prompt_token_ids if q.prompt_token_ids is not None else q.chars / 4.0
        flight = Flight(rid, load, spread, key, prefill=self.cfg.prompt_weight * prompt_tokens * n)
        ctx = _Ctx(rid, q, body, est, tokens, flight, t_in, t_in + self.cfg.timeouts.total_s, headers)
        try:
            return await self._dispatch(ctx)
        except ApiError as e:
            self.metrics.requests.labels(ctx.backend.label if ctx.backend else "-", "failed").inc()
            self._log(rid, f"failed status={e.status} attempts={ctx.attempts} {e.message}", ctx)
            return _error(e, self._reply_headers(ctx))

    async def _read_body(self, request: Request) -> bytes:
        limit = self.cfg.limits.max_body_bytes
        too_big = ApiError(413, f"the request body is larger than the router's limit of {limit} bytes",
                           code="request_too_large")
        cl = request.headers.get("content-length")
        if cl is not None and cl.isdigit() and int(cl) > limit:
            raise too_big
        buf = bytearray()
        async for chunk in request.stream():
            buf += chunk
            if len(buf) > limit:
                raise too_big
        return bytes(buf)

    def _check_model(self, model: str) -> None:
        known = self.pool.known_models()
        if known is not None and model not in known:
            served = ", ".join(sorted(known)) or "(none)"
            raise ApiError(404, f"The model '{model}' does not exist on any backend (served: {served})",
                           code="model_not_found", param="model")

    async def _dispatch(self, ctx: _Ctx) -> Response:
        lim = self.cfg.limits
        exclude: set[int] = set()
        last: _Retry | None = None
        while ctx.attempts < lim.max_attempts:
            wait = min(lim.queue_timeout_s, max(0.001, ctx.deadline - time.monotonic()))
            try:
                b = await self.pool.acquire(ctx.flight, ctx.query.model, frozenset(exclude), wait)
            except QueueFull:
                raise ApiError(429, "all backends are busy and the router's queue is full; retry later",
                               "rate_limit_error", code="queue_full") from None
            except QueueTimeout:
                raise ApiError(503, f"no backend slot became free within {wait:g} s; retry later",
                               "server_error", code="queue_timeout") from None
            if b is None:
                if last is not None:
                    raise last.error
                raise ApiError(503, f"no healthy backend serves model '{ctx.query.model}'", "server_error",
                               code="no_backend")
            ctx.attempts += 1
            ctx.backend = b
            try:
                resp = await self._attempt(ctx, b)
            except _Retry as r:
                self.pool.release(b, ctx.rid)
                self.metrics.retries.labels(b.label, r.reason).inc()
                ctx.reasons.append(f"{b.label}: {r.error.message}")
                self._log(ctx.rid, f"retry backend={b.label} reason={r.reason}: {r.error.message}", ctx)
                exclude.add(b.index)
                last = r
                continue
            except BaseException:
                self.pool.release(b, ctx.rid)
                raise
            if not isinstance(resp, _Stream):  # a stream frees its slot when it ends
                self.pool.release(b, ctx.rid)
            return resp
        assert last is not None
        raise last.error

    def _payload(self, ctx: _Ctx, b: Backend) -> bytes:
        if self.cfg.priority.enabled and b.priority_on:
            ctx.priority = self.prio.value(ctx.flight.key)
            return json.dumps({**ctx.body, self.cfg.priority.field: ctx.priority}).encode()
        ctx.priority = None
        return json.dumps(ctx.body).encode()

    def _out_headers(self, ctx: _Ctx) -> list[tuple[str, str]]:
        h = [*ctx.in_headers, ("content-type", "application/json"), ("accept-encoding", "identity"),
             ("x-request-id", ctx.rid)]
        if ctx.tokens is not None:
            h.append(("x-lenpred-predicted-tokens", f"{ctx.tokens:.0f}"))
        if ctx.priority is not None:
            h.append(("x-lenpred-priority", str(ctx.priority)))
        return h

    def _reply_headers(self, ctx: _Ctx) -> dict[str, str]:
        h = {"x-request-id": ctx.rid, "x-lenpred-estimator": ctx.est.source, "x-lenpred-attempts": str(ctx.attempts)}
        if ctx.tokens is not None:
            h["x-lenpred-predicted-tokens"] = f"{ctx.tokens:.0f}"
        if ctx.backend is not None:
            h["x-lenpred-backend"] = ctx.backend.label
        if ctx.priority is not None:
            h["x-lenpred-priority"] = str(ctx.priority)
        return h

    def _rejects_priority(self, b: Backend, status: int, content: bytes, sent: bool) -> bool:
        """A backend in 'auto' that refuses the priority field (vLLM without --scheduling-policy priority):
        turn the field off for it and resend at once."""
        if sent and b.cfg.priority == "auto" and status in (400, 422) and b"priority" in content.lower():
            b.priority_on = False
            log.warning("backend %s refuses the priority field (%s): not sent to it from now on", b.label,
                        backend_message(content, 120))
            return True
        return False

    def _status_error(self, b: Backend, status: int, content: bytes, ctx: _Ctx) -> Response:
        """A non-200 answer: raise _Retry for 429 / 5xx, return the backend's own 4xx as it is."""
        msg = backend_message(content)
        if status == 429 or status >= 500:
            code = status if status in (429, 503) else 502
            raise _Retry(ApiError(code, f"backend {b.label} answered HTTP {status}: {msg}", "server_error",
                                  code="backend_error"), f"http_{status}")
        try:
            j = json.loads(content)
            ok = isinstance(j, dict) and isinstance(j.get("error"), dict)
        except ValueError:
            ok = False
        if ok:
            return Response(content, status, headers=self._reply_headers(ctx), media_type="application/json")
        return _error(ApiError(status, f"backend {b.label} answered HTTP {status}: {msg}", code="backend_error"),
                      self._reply_headers(ctx))

    def _upstream_error(self, b: Backend, e: UpstreamError, what: str) -> _Retry:
        if e.kind == "connect":
            b.mark_down(str(e))
            return _Retry(ApiError(502, f"backend {b.label} is unreachable ({e})", "server_error",
                                   code="backend_unreachable"), "connect")
        if e.kind == "timeout":
            return _Retry(ApiError(504, f"backend {b.label} sent nothing {what} within "
                                        f"{self.cfg.timeouts.read_s:g} s", "server_error", code="backend_timeout"),
                          "timeout")
        return _Retry(ApiError(502, f"backend {b.label} broke the connection ({e})", "server_error",
                               code="backend_error"), "broken")

    async def _attempt(self, ctx: _Ctx, b: Backend) -> Response:
        url = self.targets[b.index][ctx.query.kind]
        while True:
            content = self._payload(ctx, b)
            headers = self._out_headers(ctx)
            if ctx.attempts == 1:
                self.metrics.overhead.observe(time.monotonic() - ctx.t_in)
            if ctx.query.stream:
                resp = await self._stream(ctx, b, url, content, headers)
            else:
                resp = await self._unary(ctx, b, url, content, headers)
            if not isinstance(resp, tuple):
                return resp
            status, body = resp  # a refusal; resent once if it is about the priority field
            if not self._rejects_priority(b, status, body, ctx.priority is not None):
                self.metrics.requests.labels(b.label, f"backend_{status}").inc()
                self._log(ctx.rid, f"backend answered HTTP {status}: {backend_message(body, 120)}", ctx)
                return self._status_error(b, status, body, ctx)

    def _remaining(self, ctx: _Ctx) -> float:
        left = ctx.deadline - time.monotonic()
        if left <= 0:
            raise ApiError(504, f"the request took longer than the router's total timeout of "
                                f"{self.cfg.timeouts.total_s:g} s", "server_error", code="timeout")
        return left

    async def _unary(self, ctx: _Ctx, b: Backend, url: URL, content: bytes,
                     headers: list[tuple[str, str]]) -> Response | tuple[int, bytes]:
        left = self._remaining(ctx)
        r: UpstreamResponse | None = None
        try:
            async with asyncio.timeout(left):  # a non-streamed answer may be silent until it is complete
                r = await self.client.post(url, headers, content, read_s=None)
                raw = await r.read()
        except TimeoutError:
            raise ApiError(504, f"backend {b.label} did not answer within the router's total timeout of "
                                f"{self.cfg.timeouts.total_s:g} s", "server_error", code="timeout") from None
        except UpstreamError as e:
            raise self._upstream_error(b, e, "back") from None
        finally:
            if r is not None:
                r.close()
        if r.status != 200:
            return r.status, raw
        try:
            j = json.loads(raw)
            if not isinstance(j, dict) or "choices" not in j:
                raise ValueError("no choices")
        except (ValueError, UnicodeDecodeError):
            raise _Retry(ApiError(502, f"backend {b.label} answered something that is not an OpenAI response: "
                                       f"{backend_message(raw, 80)}", "server_error", code="backend_garbage"),
                         "garbage") from None
        b.last_progress = time.monotonic()
        produced = (j.get("usage") or {}).get("completion_tokens") if isinstance(j.get("usage"), dict) else None
        self._finish(ctx, b, produced, "ok")
        self.metrics.ttfb.observe(time.monotonic() - ctx.t_in)
        return Response(raw, 200, headers=self._reply_headers(ctx), media_type="application/json")

    async def _stream(self, ctx: _Ctx, b: Backend, url: URL, content: bytes,
                      headers: list[tuple[str, str]]) -> Response | tuple[int, bytes]:
        left = self._remaining(ctx)
        r: UpstreamResponse | None = None
        counter = SSECounter()
        first = bytearray()
        try:
            async with asyncio.timeout(left):
                r = await self.client.post(url, headers, content, read_s=self.cfg.timeouts.read_s)
                if r.status != 200:
                    raw = await r.read(1 << 20)
                    r.close()
                    return r.status, raw
                it = r.chunks().__aiter__()
                # hold the client's answer until the first data event: until then a failure is retried
                while not (counter.events or counter.done or counter.error):
                    try:
                        chunk = await it.__anext__()
                    except StopAsyncIteration:
                        raise _Retry(ApiError(502, f"backend {b.label} closed the stream before the first token",
                                              "server_error", code="backend_error"), "empty") from None
                    first += chunk
                    counter.feed(chunk)
                    if len(first) > 65536 or (len(first) >= 5 and not _looks_like_sse(first)):
                        raise _Retry(ApiError(502, f"backend {b.label} answered something that is not an SSE "
                                                   f"stream: {backend_message(bytes(first[:200]), 80)}",
                                              "server_error", code="backend_garbage"), "garbage")
                if counter.error and not counter.events:
                    raise _Retry(ApiError(502, f"backend {b.label} sent an error event first: {counter.error}",
                                          "server_error", code="backend_error"), "error_event")
        except TimeoutError:
            _close(r)
            raise ApiError(504, f"backend {b.label} sent no token within the router's total timeout of "
                                f"{self.cfg.timeouts.total_s:g} s", "server_error", code="timeout") from None
        except UpstreamError as e:
            _close(r)
            raise self._upstream_error(b, e, "(first token)") from None
        except BaseException:
            _close(r)
            raise
        ctx.flight.gen = counter.tokens
        b.last_progress = time.monotonic()
        self.metrics.ttfb.observe(time.monotonic() - ctx.t_in)
        return _Stream(self._relay(ctx, b, r, it, bytes(first), counter), 200, headers=self._reply_headers(ctx),
                       media_type="text/event-stream")

    async def _relay(self, ctx: _Ctx, b: Backend, r: UpstreamResponse, it: Any, first: bytes,
                     counter: SSECounter) -> Any:
        err: str | None = None
        outcome = "ok"
        try:
            yield first
            try:
                async for chunk in it:
                    counter.feed(chunk)
                    ctx.flight.gen = counter.tokens
                    b.last_progress = now = time.monotonic()  # a busy backend is not a dead one
                    yield chunk
                    if now > ctx.deadline:
                        err = f"the stream took longer than the router's total timeout of {self.cfg.timeouts.total_s:g} s"
                        break
            except UpstreamError as e:
                err = (f"backend {b.label} sent nothing for {self.cfg.timeouts.read_s:g} s" if e.kind == "timeout"
                       else f"backend {b.label} broke the stream ({e})")
            if err is None and not counter.done and counter.error is None:
                err = f"backend {b.label} closed the stream before it ended"
            if counter.error is not None:
                outcome = "backend_error_event"
            if err is not None:
                outcome = "stream_error"
                yield sse_error_event(err)
        except BaseException:
            outcome = "client_gone"
            raise
        finally:
            r.close()
            self.pool.release(b, ctx.rid)
            self._finish(ctx, b, counter.tokens if outcome == "ok" else None, outcome, err)

    def _finish(self, ctx: _Ctx, b: Backend, produced: int | None, outcome: str, err: str | None = None) -> None:
        self.metrics.requests.labels(b.label, outcome).inc()
        if produced is not None:
            per_seq = produced / max(1, ctx.query.n_sequences)
            self.metrics.completion.observe(per_seq)
            if ctx.tokens is not None:
                self.metrics.abs_error.observe(abs(per_seq - ctx.tokens))
        ms = (time.monotonic() - ctx.t_in) * 1e3
        self._log(ctx.rid, f"{outcome} tokens={produced if produced is not None else '-'} ms={ms:.0f}"
                           + (f" error={err}" if err else ""), ctx)

    def _log(self, rid: str, what: str, ctx: _Ctx | None = None) -> None:
        if not self.cfg.log_requests:
            return
        if ctx is None:
            log.info("rid=%s %s", rid, what)
            return
        pred = "-" if ctx.tokens is None else f"{ctx.tokens:.0f}"
        log.info("rid=%s model=%s stream=%s pred=%s est=%s prio=%s backend=%s attempt=%d %s", rid, ctx.query.model,
                 int(ctx.query.stream), pred, ctx.est.source, ctx.priority if ctx.priority is not None else "-",
                 ctx.backend.label if ctx.backend else "-", ctx.attempts, what)

    async def passthrough(self, request: Request) -> Response:
        """Annotate mode: forward any other request to the one upstream, unchanged (GET or POST)."""
        b = self.pool.backends[0]
        try:
            raw = await self._read_body(request)
        except ApiError as e:
            return _error(e)
        raw_path = request.scope.get("raw_path") or request.url.path.encode()  # as the client wrote it
        path = raw_path.decode("latin-1") + (f"?{request.url.query}" if request.url.query else "")
        headers = [(k, v) for k, v in request.headers.items() if k not in _DROP]
        headers.append(("accept-encoding", "identity"))
        if "content-type" in request.headers:
            headers.append(("content-type", request.headers["content-type"]))
        r: UpstreamResponse | None = None
        try:
            async with asyncio.timeout(self.cfg.timeouts.total_s):
                r = await self.client.request(request.method, URL(b.url + path, encoded=True), headers, raw,
                                              self.cfg.timeouts.read_s)
                body = await r.read()
        except TimeoutError:
            return _error(ApiError(504, f"upstream {b.label} did not answer in time", "server_error", code="timeout"))
        except UpstreamError as e:
            return _error(ApiError(502, f"upstream {b.label}: {e}", "server_error", code="backend_error"))
        finally:
            _close(r)
        return Response(body, r.status, media_type=r.headers.get("content-type"))

    # ------------------------------------------------------------------ other endpoints
    def models(self) -> dict[str, Any]:
        seen: dict[str, dict[str, Any]] = {}
        for b in self.pool.backends:
            for k, v in (b.models or {}).items():
                seen.setdefault(k, v)
        return {"object": "list", "data": list(seen.values())}

    def health(self) -> tuple[int, dict[str, Any]]:
        bs = [b.describe() for b in self.pool.backends]
        up = sum(1 for b in self.pool.backends if b.healthy)
        status = "ok" if up else "no healthy backend"
        return (200 if up else 503), {"status": status, "mode": self.cfg.mode, "policy": self.cfg.policy,
                                      "healthy": up, "backends": bs, "waiting": self.pool.n_waiting}


def _looks_like_sse(buf: bytearray) -> bool:
    head = bytes(buf[:16]).lstrip()
    return head[:1] in (b"", b":") or head.startswith((b"data", b"event", b"id", b"retry"))


def _close(r: UpstreamResponse | None) -> None:
    if r is not None:
        r.close()


def create_app(cfg: RouterConfig, estimator: Any = None) -> FastAPI:
    """The FastAPI app of a router (``estimator``: any object with start / estimate / stop, for tests)."""
    router = Router(cfg, estimator=estimator)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        await router.start()
        # everything loaded so far (FastAPI, pydantic, the head) lives as long as the process: out of the
        # collector's sight, a full collection no longer walks it and stalls every stream for tens of ms
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            await router.stop()

    app = FastAPI(title="lenpred route", version="1", lifespan=lifespan,
                  description="A length-aware OpenAI-compatible router (docs/route.md).")
    app.state.router = router

    @app.post("/v1/chat/completions", summary="OpenAI chat completions, routed")
    async def chat(request: Request) -> Response:
        return await router.handle(request, "chat")

    @app.post("/v1/completions", summary="OpenAI completions, routed")
    async def completions(request: Request) -> Response:
        return await router.handle(request, "completion")

    @app.get("/v1/models", summary="the union of the backends' models")
    async def models() -> dict[str, Any]:
        return router.models()

    @app.get("/healthz", summary="200 while at least one backend is healthy; the backends' state")
    async def healthz() -> JSONResponse:
        code, body = router.health()
        return JSONResponse(body, status_code=code)

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(router.metrics.render(), media_type="text/plain; version=0.0.4")

    if cfg.mode == "annotate":
        @app.api_route("/{path:path}", methods=["GET", "POST"], include_in_schema=False)
        async def passthrough(path: str, request: Request) -> Response:
            """A sidecar answers for its upstream: every other path is forwarded as it is (not predicted)."""
            return await router.passthrough(request)

    _error_handlers(app)
    return app


def _error_handlers(app: FastAPI) -> None:
    """Even the router's own 404 / 405 / 500 answer in OpenAI's error format."""
    from starlette.exceptions import HTTPException

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return _error(ApiError(exc.status_code, msg, code="not_found" if exc.status_code == 404 else None))

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(ApiError(500, f"internal router error ({type(exc).__name__}); see the router's log",
                               "server_error", code="internal_error"))
