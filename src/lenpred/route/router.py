"""The router's state and its handling of one request: read the body (bounded), check it is an OpenAI
request of that kind and that some backend serves its model, predict its output length, compute its
priority key, take a slot on a backend chosen by the dispatch policy (or wait for one, bounded), and
forward it (:class:`lenpred.route.forward.Forwarder`), on another backend when the attempt failed before
anything reached the client. Every outcome is an OpenAI-format error with the right status code; none
hangs (every wait has a timeout) and none crashes the router. A request still unanswered at a stop's drain
limit (:class:`lenpred.route.forward.Drain`) gets a 503 ``shutting_down``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
import uuid
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from yarl import URL

from lenpred.route.backends import Flight, Pool, QueueFull, QueueTimeout
from lenpred.route.bodies import ApiError, Query, parse_request
from lenpred.route.config import RouterConfig
from lenpred.route.estimators import make_estimator
from lenpred.route.forward import Ctx, Drain, Forwarder, RelayStream, Retry, close, error_response
from lenpred.route.priority import PriorityMapper
from lenpred.route.prometheus import GcTimer, RouterMetrics, watch_loop_lag
from lenpred.route.upstream import Client, UpstreamError, UpstreamResponse

__all__ = ["PATHS", "Router"]

PATHS = {"chat": "/v1/chat/completions", "completion": "/v1/completions"}
# not forwarded: hop-by-hop headers, and those the router sets itself
_DROP = frozenset({
    "host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
    "proxy-authorization", "proxy-connection", "accept-encoding", "content-type", "x-request-id",
    "x-lenpred-predicted-tokens", "x-lenpred-priority",
})
_RID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class Router(Forwarder):
    """State and request handling; :func:`create_app` puts it behind FastAPI routes."""

    def __init__(self, cfg: RouterConfig, estimator: Any = None) -> None:
        self.cfg = cfg
        self.pool = Pool(cfg.backends, cfg.policy, cfg.seed, cfg.limits.max_queued)
        self.metrics = RouterMetrics(self.pool)
        self.gc_timer = GcTimer(self.metrics.gc_pause)
        self.estimator = estimator if estimator is not None else make_estimator(
            cfg.estimator, on_fallback=lambda reason: self.metrics.fallbacks.inc())
        self.prio = PriorityMapper(cfg.priority, cfg.default_tokens, queue=cfg.queue_policy)
        self.calib = self.prio.measuring
        if self.prio.calib is not None:
            self.metrics.watch_gboost(lambda: self.prio.gboost)
        self.client = Client(cfg.timeouts.connect_s)  # backend requests and health checks
        # each backend's endpoints, parsed once
        self.targets = [{kind: URL(b.url + path) for kind, path in PATHS.items()} for b in self.pool.backends]
        self._string_only = frozenset(b.index for b in self.pool.backends if b.cfg.flatten_content)
        self._health: asyncio.Task[None] | None = None
        self._lag: asyncio.Task[None] | None = None
        self.drain = Drain()

    async def start(self) -> None:
        await self.client.start()
        await self.estimator.start()
        # one round of checks before serving: /v1/models knows the models, a dead backend starts out
        await asyncio.gather(*(self.pool.check(self.client, b, self.cfg.health) for b in self.pool.backends))
        for b in self.pool.backends:
            if b.fails:
                b.mark_down(b.last_error or "no answer at start")
        self._health = asyncio.create_task(self.pool.health_loop(self.client, self.cfg.health))
        self._lag = asyncio.create_task(watch_loop_lag(self.metrics.loop_lag))

    async def stop(self) -> None:
        self.drain.stop()
        for task in (self._health, self._lag):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.estimator.stop()
        await self.client.close()

    # ------------------------------------------------------------------ one request
    async def handle(self, request: Request, kind: str) -> Response:
        """The answer to one completion request (a stream's answer is sent by the caller)."""
        try:
            return await self._handle(request, kind)
        except asyncio.CancelledError:
            if not self.drain.stopped():
                raise
            self.metrics.requests.labels("-", "stopped").inc()
            return error_response(self.drain.error())

    async def _handle(self, request: Request, kind: str) -> Response:
        t_in = time.monotonic()
        rid = request.headers.get("x-request-id", "")
        if not _RID.match(rid):
            rid = str(uuid.uuid4())  # a UUID: some servers (llama-cpp-python) refuse any other x-request-id
        try:
            raw = await self._read_body(request)
            body, q = parse_request(raw, kind)
            self._check_model(q.model)
            skip = self._text_only(q)
            est = await self.estimator.estimate(q)
        except ApiError as e:
            self.metrics.requests.labels("-", "rejected").inc()
            self._log(rid, f"rejected status={e.status} {e.message}")
            return error_response(e, {"x-request-id": rid})
        self.metrics.estimate.labels(est.source).observe(est.elapsed_ms / 1e3)
        tokens = est.tokens
        if tokens is not None and q.max_tokens is not None:
            tokens = min(tokens, float(q.max_tokens))
        key = self.prio.key(tokens, est.spread)
        if self.calib is not None:
            self.calib.arrival(t_in)
        n = q.n_sequences
        load = (tokens if tokens is not None else self.cfg.default_tokens) * n
        spread = (est.spread or 0.0) * math.sqrt(n)
        if tokens is not None:
            self.metrics.predicted.observe(tokens)
        headers = [(k, v) for k, v in request.headers.items() if k not in _DROP]
        prompt_tokens = q.prompt_token_ids if q.prompt_token_ids is not None else q.chars / 4.0
        flight = Flight(rid, load, spread, key, prefill=self.cfg.prompt_weight * prompt_tokens * n,
                        prompt=prompt_tokens * n)
        ctx = Ctx(rid, q, body, est, tokens, flight, t_in, t_in + self.cfg.timeouts.total_s, headers, skip)
        try:
            return await self._dispatch(ctx)
        except ApiError as e:
            self.metrics.requests.labels(ctx.backend.label if ctx.backend else "-", "failed").inc()
            self._log(rid, f"failed status={e.status} attempts={ctx.attempts} {e.message}", ctx)
            return error_response(e, self._reply_headers(ctx))

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

    def _text_only(self, q: Query) -> frozenset[int]:
        """The backends a request must not go to: for one with a part that is not text (an image), those that
        take only string content (``flatten_content``). A 400 when they are all that serve its model."""
        if q.media is None or not self._string_only:
            return frozenset()
        if not any(b.serves(q.model) for b in self.pool.backends if b.index not in self._string_only):
            raise ApiError(400, f"{q.media} is a part of type {q.media_type!r}, and every backend that serves model "
                                f"'{q.model}' takes text only (flatten_content); send text parts only", param=q.media)
        return self._string_only

    async def _dispatch(self, ctx: Ctx) -> Response:
        """Attempts on backends until one answers, or the failure that nothing can retry."""
        lim = self.cfg.limits
        exclude: set[int] = set(ctx.skip)
        last: Retry | None = None  # the failure of the last attempt; retried when another backend is found
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
            if last is not None and ctx.backend is not None:  # the last failure is retried, on b
                self.metrics.retries.labels(ctx.backend.label, last.reason).inc()
                self._log(ctx.rid, f"retry backend={ctx.backend.label} reason={last.reason}: {last.error.message} "
                                   f"(next: {b.label})", ctx)
            ctx.attempts += 1
            ctx.backend = b
            try:
                resp = await self._attempt(ctx, b)
            except Retry as r:
                self.pool.release(b, ctx.rid)
                ctx.reasons.append(f"{b.label}: {r.error.message}")
                exclude.add(b.index)
                last = r
                continue
            except BaseException:
                self.pool.release(b, ctx.rid)
                raise
            if not isinstance(resp, RelayStream):  # a stream frees its slot when it ends
                self.pool.release(b, ctx.rid)
            return resp
        assert last is not None
        raise last.error

    async def passthrough(self, request: Request) -> Response:
        """Annotate mode: forward any other request to the one upstream, unchanged (GET or POST)."""
        b = self.pool.backends[0]
        try:
            raw = await self._read_body(request)
        except ApiError as e:
            return error_response(e)
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
        except asyncio.CancelledError:
            if not self.drain.stopped():
                raise
            return error_response(self.drain.error())
        except TimeoutError:
            return error_response(ApiError(504, f"upstream {b.label} did not answer in time", "server_error", code="timeout"))
        except UpstreamError as e:
            return error_response(ApiError(502, f"upstream {b.label}: {e}", "server_error", code="backend_error"))
        finally:
            close(r)
        return Response(body, r.status, media_type=r.headers.get("content-type"))

    # ------------------------------------------------------------------ other endpoints
    def models(self) -> dict[str, Any]:
        seen: dict[str, dict[str, Any]] = {}
        for b in self.pool.backends:
            for k, v in (b.models or {}).items():
                seen.setdefault(k, v)
        return {"object": "list", "data": list(seen.values())}

    @property
    def healthy(self) -> bool:
        """At least one backend is healthy (``/health``: vLLM's readiness path)."""
        return any(b.healthy for b in self.pool.backends)

    def health(self) -> tuple[int, dict[str, Any]]:
        bs = [b.describe() for b in self.pool.backends]
        up = sum(1 for b in self.pool.backends if b.healthy)
        status = "ok" if up else "no healthy backend"
        body = {"status": status, "mode": self.cfg.mode, "policy": self.cfg.policy, "queue": self.prio.queue,
                "healthy": up, "backends": bs, "waiting": self.pool.n_waiting}
        if self.prio.gboost is not None:
            body["gboost"] = self.prio.gboost.describe()
        return (200 if up else 503), body
