"""The HTTP face of :class:`~lenpred.serve.service.PredictionService` (FastAPI).

* ``POST /v1/predict`` -- :class:`~lenpred.serve.schema.PredictRequest` in,
  :class:`~lenpred.serve.schema.PredictResponse` out;
* ``GET /healthz`` -- 200 with the head's identity while the batcher runs, 503 otherwise;
* ``GET /metrics`` -- Prometheus text (requests, errors, latency, batch sizes, model calls, queue).

Every error is OpenAI's body ``{"error": {"message", "type", "param", "code"}}`` with its status:
400 for a request that is not valid JSON or not a valid predict request (FastAPI's default would
be 422; OpenAI-compatible servers answer 400), 404 / 405 for an unknown route or method, 413 for a
body over ``max_body_bytes`` (checked before the body is parsed), 400 for a body nested deeper than
:data:`lenpred.serve.wire.MAX_JSON_DEPTH` levels (checked before it is parsed, as the router does), 503
for a full queue or a stopped service, 504 for a timeout, 500 for anything else -- never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lenpred import __version__
from lenpred.errors import LenpredError
from lenpred.serve.errors import ServeError
from lenpred.serve.prometheus import CONTENT_TYPE, ServeMetrics
from lenpred.serve.schema import ErrorResponse, HealthResponse, PredictRequest, PredictResponse
from lenpred.serve.service import PredictionService
from lenpred.serve.wire import InvalidText, error_body, too_deep

__all__ = ["create_app", "DEFAULT_MAX_BODY_BYTES"]

log = logging.getLogger("lenpred.serve")
DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB: ~250k tokens of text, far beyond any context here
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "not valid JSON, or not a valid predict request"},
    413: {"model": ErrorResponse, "description": "request body over the size limit"},
    503: {"model": ErrorResponse, "description": "queue full, or the service is stopping"},
    504: {"model": ErrorResponse, "description": "the prediction timed out"},
}


def _error(status: int, message: str, type_: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, type_, code, param), status_code=status)


class BodyLimit:
    """Pure ASGI middleware: a request body over ``limit`` bytes gets 413 before the app reads it, and one
    nested too deep (:func:`lenpred.serve.wire.too_deep`) gets 400 before it is parsed.

    A declared ``Content-Length`` over the limit is refused at once; otherwise the body is read
    (at most ``limit + 1`` bytes are kept) and replayed to the app, so chunked bodies are bounded too.
    """

    def __init__(self, app: ASGIApp, limit: int, metrics: ServeMetrics | None = None) -> None:
        self.app, self.limit, self.metrics = app, int(limit), metrics

    async def _refuse(self, scope: Scope, send: Send, size: str) -> None:
        resp = _error(413, f"request body is {size}, over this service's limit of {self.limit} bytes",
                      "invalid_request_error", None, "request_too_large")
        if self.metrics is not None:
            self.metrics.observe_request(scope.get("path", "?"), 413, None, "invalid_request_error")
        await resp(scope, _drain_receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    n = -1
                if n > self.limit:
                    await self._refuse(scope, send, f"{n} bytes")
                    return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body = msg.get("body", b"")
            size += len(body)
            if size > self.limit:
                await self._refuse(scope, send, f"more than {self.limit} bytes")
                return
            chunks.append(body)
            more = bool(msg.get("more_body", False))
        raw = b"".join(chunks)
        deep = too_deep(raw)
        if deep is not None:
            if self.metrics is not None:
                self.metrics.observe_request(scope.get("path", "?"), 400, None, "invalid_request_error")
            await _error(400, deep, "invalid_request_error", None, "json_too_deep")(scope, _drain_receive, send)
            return
        replay: list[Message] = [{"type": "http.request", "body": raw, "more_body": False}]

        async def receive_again() -> Message:
            return replay.pop() if replay else await receive()

        await self.app(scope, receive_again, send)


async def _drain_receive() -> Message:
    return {"type": "http.disconnect"}


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict"})


def _param(loc: Any) -> str | None:
    """``messages[0].content`` from pydantic's loc (without "body" and the union members' type tags)."""
    parts = [str(x) for x in loc if x != "body" and not (isinstance(x, str) and ("[" in x or x in _TYPE_TAGS))]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else ("." if out else "") + p
    return out or None


def _validation_message(exc: RequestValidationError, content_type: str | None = None) -> tuple[str, str | None, str]:
    """(message, param, code) of the first problem FastAPI found in a request (``content_type``: the
    request's header; a body that is not sent as JSON reaches validation as a string)."""
    errs = exc.errors()
    if not errs:
        return "invalid request", None, "invalid_request"
    e = errs[0]
    ctx = (e.get("ctx") or {}).get("error")
    if e.get("type") == "json_invalid":
        return f"request body is not valid JSON ({ctx or e.get('msg')})", None, "invalid_json"
    if isinstance(ctx, InvalidText):
        return str(ctx), ctx.param, "invalid_text"
    param = _param(e.get("loc", ()))
    msg = str(e.get("msg", "invalid value"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if e.get("type") == "missing" and param is None:
        msg = "request body is missing: send a JSON object with 'prompt' or 'messages'"
    elif e.get("type") == "model_attributes_type" and param is None:
        if isinstance(e.get("input"), str | bytes) and (not content_type or not _is_json(content_type)):
            return _not_sent_as_json(content_type), None, "unsupported_content_type"
        got = type(e.get("input")).__name__
        msg = f"request body must be a JSON object with 'prompt' or 'messages', got a JSON {_json_kind(got)}"
    elif e.get("type") == "extra_forbidden":
        msg = f"unknown field {param!r}: a predict request has prompt, messages and model"
    elif param is not None:
        same = [str(x.get("msg", "")) for x in errs if _param(x.get("loc", ())) == param]
        if len(same) > 1:  # a union (string or list of parts, ...): each member's complaint, once
            msg = "; ".join(dict.fromkeys(same))
            errs = [x for x in errs if _param(x.get("loc", ())) != param] + [e]
        msg = f"{param}: {msg}"
    more = len(errs) - 1
    if more:
        msg += f" (and {more} more problem(s))"
    return msg, param, str(e.get("type", "invalid_request"))


def _is_json(content_type: str | None) -> bool:
    """What FastAPI parses as JSON: no content type, application/json, or application/*+json."""
    if not content_type:
        return True
    main = content_type.split(";", 1)[0].strip().lower()
    return main == "application/json" or (main.startswith("application/") and main.endswith("+json"))


def _not_sent_as_json(content_type: str | None) -> str:
    main = (content_type or "").split(";", 1)[0].strip().lower()
    how = " (what curl -d sends)" if main == "application/x-www-form-urlencoded" else ""
    sent = f"sent as {main}{how}" if main else "sent without a Content-Type"
    return (f"request body was {sent}, not as JSON -- fix: send it with the header "
            "'Content-Type: application/json' (curl --json '{\"prompt\": ...}', or -H 'Content-Type: application/json')")


def _not_utf8(body: bytes) -> str | None:
    """The message for a body that is not UTF-8 (JSON is UTF-8), or None when it is."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as u:
        return (f"request body is not UTF-8 (byte 0x{body[u.start]:02x} at offset {u.start}) -- fix: send the JSON "
                "encoded as UTF-8 (re-encode the text, e.g. iconv -t UTF-8, or json.dumps(...).encode())")
    return None


def _json_kind(pytype: str) -> str:
    return {"list": "array", "str": "string", "int": "number", "float": "number", "bool": "boolean",
            "NoneType": "null", "bytes": "string"}.get(pytype, pytype)


def _add_error_handlers(app: FastAPI, metrics: ServeMetrics) -> None:
    """Every error the app answers, OpenAI-shaped and counted in ``metrics``."""

    def _failed(request: Request, status: int, type_: str) -> None:
        metrics.observe_request(request.url.path, status, None, type_)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        msg, param, code = _validation_message(exc, request.headers.get("content-type"))
        _failed(request, 400, "invalid_request_error")
        return _error(400, msg, "invalid_request_error", param, code)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        if exc.status_code == 400 and (bad := _not_utf8(await request.body())) is not None:
            _failed(request, 400, type_)  # FastAPI's own "There was an error parsing the body"
            return _error(400, bad, type_, None, "invalid_json")
        msg = {404: f"no route {request.url.path}: the service has POST /v1/predict, GET /healthz, GET /metrics",
               405: f"method {request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        _failed(request, exc.status_code, type_)
        return _error(exc.status_code, msg, type_, None, None)

    @app.exception_handler(ServeError)
    async def _serve_error(request: Request, exc: ServeError) -> JSONResponse:
        _failed(request, exc.status, exc.type)
        return _error(exc.status, str(exc), exc.type, exc.param, exc.code)

    @app.exception_handler(LenpredError)
    async def _lenpred_error(request: Request, exc: LenpredError) -> JSONResponse:
        _failed(request, 400, "invalid_request_error")
        return _error(400, str(exc), "invalid_request_error")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        _failed(request, 500, "server_error")
        return _error(500, f"internal error ({type(exc).__name__}); see the service's log", "server_error",
                      None, "internal_error")


def create_app(service: PredictionService, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               metrics: ServeMetrics | None = None) -> FastAPI:
    """A FastAPI app serving ``service``; its lifespan starts and stops the service's batcher."""
    metrics = metrics or service.metrics or ServeMetrics()
    service.metrics = metrics

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="lenpred prediction service", version=__version__, lifespan=lifespan,
                  description="Predicted output length (tokens) of an LLM request, from a lenpred head. "
                              f"Serving head {service.head_name} ({service.predictor}).")
    app.state.service = service
    app.state.metrics = metrics
    app.add_middleware(BodyLimit, limit=max_body_bytes, metrics=metrics)

    _add_error_handlers(app, metrics)

    @app.post("/v1/predict", response_model=PredictResponse, responses=_ERRORS,
              summary="Predict the output length of one request")
    async def predict(req: PredictRequest) -> PredictResponse:
        t0 = time.perf_counter()
        out = await service.predict(req)
        metrics.observe_request("/v1/predict", 200, time.perf_counter() - t0)
        metrics.predictions.inc()
        return out

    @app.get("/healthz", response_model=HealthResponse, responses={503: {"model": HealthResponse}},
             summary="Liveness and the served head's identity")
    async def healthz() -> JSONResponse:
        ok = service.running
        body = HealthResponse(
            status="ok" if ok else "stopped", head=service.head_name, predictor=service.predictor,
            input_kind=service.input_kind, card_hash=service.card_hash, model=service.model_id,
            max_batch=service.max_batch, max_wait_ms=service.max_wait_ms, queue_depth=service.queue_depth,
            model_calls=service.batches, uptime_s=round(service.uptime_s, 3))
        return JSONResponse(json.loads(body.model_dump_json()), status_code=200 if ok else 503)

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def prom() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return app
