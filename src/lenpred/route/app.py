"""The router as an ASGI app (FastAPI): ``/v1/chat/completions``, ``/v1/completions`` (SSE or not),
``/v1/models``, ``/health`` (vLLM's: 200 and an empty body while a backend is healthy; route mode), ``/healthz``
(the backends' state), ``/metrics``, and in annotate mode every other path passed through.

What happens to one request is :mod:`lenpred.route.router` (predict, priority, which backend, retries)
and :mod:`lenpred.route.forward` (one attempt on one backend). A failure of the backend before the first token reaches
the client (unreachable, 429, 502, 503, 504, garbage, no first token within ``read_s``) is retried on
another backend; a failure after it ends the stream with an SSE error event and ``[DONE]``. Any other
status of the backend (a 4xx, a 500 from a chat template) is its answer to the request, passed on as it
is (:data:`lenpred.route.forward.RETRIED_STATUSES`). Every outcome, the router's own 404 / 405 / 500 included,
is an OpenAI-format error with the right status code, and so is the end of a request still running at a
stop's drain limit (:class:`lenpred.route.forward.Drain`: every HTTP request's task is registered with it).
The OpenAPI document describes the request bodies the router accepts (:mod:`lenpred.route.schema`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from lenpred.route.bodies import ApiError
from lenpred.route.config import GcConfig, RouterConfig
from lenpred.route.forward import Drain, error_response
from lenpred.route.router import PATHS, Router
from lenpred.route.schema import CHAT_REQUEST, COMPLETION_REQUEST, ERROR_RESPONSES, request_body

__all__ = ["RouterApp", "Router", "create_app"]

log = logging.getLogger("lenpred.route")

_KINDS = {path: kind for kind, path in PATHS.items()}


class RouterApp(FastAPI):
    """FastAPI, except that a POST to one of the two completion paths goes straight to the router.

    Every request and every relayed chunk through FastAPI's stack (its middlewares, routing, request
    handler, each ``send`` wrapped once per middleware) cost the router about as much CPU as its own
    work; at 200 concurrent streams that CPU is the queue a first token waits in. What the stack did for
    these two routes is done here: the route, the ``Request``, and the crash handler's OpenAI-format 500.
    Every other request (and the lifespan) takes the FastAPI path, and both routes stay declared there
    (OpenAPI schema, 405 for another method)."""

    drain: Drain | None = None  # set by create_app: the request tasks in flight are registered with it

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        task = asyncio.current_task() if scope["type"] == "http" and self.drain is not None else None
        if task is None:
            await super().__call__(scope, receive, send)
            return
        tasks = self.drain.tasks  # type: ignore[union-attr]
        tasks.add(task)
        try:
            if scope["method"] == "POST" and not scope.get("root_path"):
                kind = _KINDS.get(scope["path"])
                if kind is not None:
                    await self._complete(scope, receive, send, kind)
                    return
            await super().__call__(scope, receive, send)
        finally:
            tasks.discard(task)

    async def _complete(self, scope: Any, receive: Any, send: Any, kind: str) -> None:
        scope["app"] = self
        request = Request(scope, receive)
        try:
            response = await self.state.router.handle(request, kind)
        except Exception as exc:  # noqa: BLE001 - a server boundary: every failure becomes an answer
            response = _crash_response(request, exc)
        await response(scope, receive, send)


def create_app(cfg: RouterConfig, estimator: Any = None) -> RouterApp:
    """The FastAPI app of a router (``estimator``: any object with start / estimate / stop, for tests)."""
    router = Router(cfg, estimator=estimator)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        await router.start()
        restore = _tune_gc(cfg.gc)
        router.gc_timer.install()  # every collection from here on is timed (lenpred_route_gc_pause_seconds)
        try:
            yield
        finally:
            router.gc_timer.remove()
            restore()
            await router.stop()

    app = RouterApp(title="lenpred route", version="1", lifespan=lifespan,
                  description="A length-aware OpenAI-compatible router (docs/route.md).")
    app.state.router = router
    app.drain = router.drain

    @app.post("/v1/chat/completions", summary="OpenAI chat completions, routed", responses=ERROR_RESPONSES,
              openapi_extra=request_body(CHAT_REQUEST))
    async def chat(request: Request) -> Response:
        return await router.handle(request, "chat")

    @app.post("/v1/completions", summary="OpenAI completions, routed", responses=ERROR_RESPONSES,
              openapi_extra=request_body(COMPLETION_REQUEST))
    async def completions(request: Request) -> Response:
        return await router.handle(request, "completion")

    @app.get("/v1/models", summary="the union of the backends' models")
    async def models() -> dict[str, Any]:
        return router.models()

    if cfg.mode == "route":  # a sidecar (annotate) passes /health on to its upstream, as every other path
        @app.get("/health", summary="vLLM's health path: 200 with an empty body while at least one backend is "
                                    "healthy, else 503", responses={503: ERROR_RESPONSES[503]})
        async def health() -> Response:
            if router.healthy:
                return Response(status_code=200)
            return error_response(ApiError(503, "no healthy backend", "server_error", code="no_backend"))

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


def _tune_gc(g: GcConfig) -> Callable[[], None]:
    """Set the collector for a long-lived server; returns what puts the thresholds back. Everything loaded so
    far (FastAPI, pydantic, the head) lives as long as the process: frozen, out of the collector's sight, a
    full collection no longer walks it and stalls every stream for tens of ms."""
    before = gc.get_threshold()
    if g.freeze:
        gc.collect()
        gc.freeze()
    if g.thresholds is not None:
        gc.set_threshold(*g.thresholds)
    return lambda: gc.set_threshold(*before)


def _error_handlers(app: FastAPI) -> None:
    """Even the router's own 404 / 405 / 500 answer in OpenAI's error format."""
    from starlette.exceptions import HTTPException

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return error_response(ApiError(exc.status_code, msg, code="not_found" if exc.status_code == 404 else None))

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        return _crash_response(request, exc)


def _crash_response(request: Request, exc: Exception) -> JSONResponse:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ApiError(500, f"internal router error ({type(exc).__name__}); see the router's log",
                                   "server_error", code="internal_error"))
