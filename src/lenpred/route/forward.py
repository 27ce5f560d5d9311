"""Forwarding one request to one backend: the payload (with the priority field, its content parts
flattened for a backend that takes only strings) and headers, the answer relayed (JSON, or SSE as it
streams), the load drawn down as tokens arrive, and which failures are retried on another backend
(:class:`Retry`: nothing has reached the client yet) and which are the client's answer.

The rule (:data:`RETRIED_STATUSES`, docs/route.md "Retries"): what says the backend, not the request, is
at fault is retried: no connection, a timeout, a broken or garbled answer, and the statuses 429, 502, 503
and 504 (Envoy's ``gateway-error`` plus 429). Every other status, a 500 included, is the backend's answer
to this request (a bad parameter, a chat template that cannot render the messages): another backend would
answer it the same, so it goes to the client as it is, the backend's status and error body. :class:`Forwarder` is the half of :class:`lenpred.route.router.Router` that talks to a
backend; the router decides which backend, and how often to try. :class:`Drain` ends the requests still
running when a stop's drain limit passes, each with an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse
from yarl import URL

from lenpred.route.backends import Backend, Flight, Pool
from lenpred.route.bodies import (
    ApiError,
    Query,
    SSECounter,
    backend_message,
    flatten_content,
    sse_error_event,
    with_osl,
)
from lenpred.route.calibrate import OnlineCalibrator
from lenpred.route.config import RouterConfig
from lenpred.route.estimators import Estimate
from lenpred.route.priority import PriorityMapper
from lenpred.route.prometheus import RouterMetrics
from lenpred.route.upstream import Client, UpstreamError, UpstreamResponse

__all__ = ["RETRIED_STATUSES", "Ctx", "Drain", "Forwarder", "RelayStream", "Retry", "close", "error_response"]

log = logging.getLogger("lenpred.route")

# a backend's statuses that another backend may not repeat: it is busy (429), down (503), or a gateway in front
# of it failed (502, 504). Any other (4xx, 500, 501, ...) is about the request, and passed on as it is
RETRIED_STATUSES = frozenset({429, 502, 503, 504})


class Retry(Exception):
    """This backend failed before anything reached the client: try another."""

    def __init__(self, error: ApiError, reason: str) -> None:
        super().__init__(error.message)
        self.error, self.reason = error, reason


@dataclass
class Ctx:
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
    skip: frozenset[int] = frozenset()  # backends never tried for it (string-only ones for a non-text part)
    attempts: int = 0
    priority: int | None = None
    backend: Backend | None = None
    reasons: list[str] = field(default_factory=list)
    # gboost's calibration (lenpred.route.calibrate): when the tokens were first timed, how many had come,
    # and the backend's busy_area then
    t_first: float = 0.0
    gen_first: int = 0
    area_first: float = 0.0


class Drain:
    """A stop of the router. :meth:`begin` (the server is stopping: it listens no more) gives the requests in
    flight ``limit_s`` to finish; then :meth:`end` cancels the request tasks still running, and each ends with
    an answer instead of a cut connection: a stream with an SSE error event and ``[DONE]``
    (:class:`RelayStream`), a request not yet answered with :meth:`error` as a 503 JSON body (the router's
    ``handle``). A task tells this cancellation from a client that left by :attr:`over`."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()  # the request tasks in flight
        self.over = False  # the drain limit has passed: the tasks still running are being ended
        self.limit_s = 0.0
        self._timer: asyncio.TimerHandle | None = None

    def begin(self, limit_s: float) -> None:
        """Start the drain (on the server's event loop); once only."""
        if self._timer is None and not self.over:
            self.limit_s = limit_s
            self._timer = asyncio.get_running_loop().call_later(limit_s, self.end)

    def end(self) -> None:
        self.over = True
        for task in list(self.tasks):
            task.cancel()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def error(self) -> ApiError:
        return ApiError(503, f"the router is stopping, and this request did not finish within its drain limit of "
                             f"{self.limit_s:g} s (timeouts.drain_s); retry it", "server_error", code="shutting_down")

    def stopped(self) -> bool:
        """Whether the current task's cancellation is this drain's; if so, the cancellation is taken back (the
        task goes on to answer)."""
        if not self.over:
            return False
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True


class RelayStream(StreamingResponse):
    """A relayed SSE answer. It always watches for the client going away (so the backend's request is
    closed at once, not at the next write) and always closes its body iterator (which frees the slot).

    The answer is written by the request's own task and the watcher is a plain asyncio task: the headers
    and the first chunk (already in hand) go out at once, not one turn of a busy event loop later, when
    a new task would first run. Measured at 200 concurrent streams, that turn was most of the first
    token's added tail (docs/route.md). Starlette's own ``__call__`` (an anyio task group, a send through
    every middleware per chunk) cost the router more CPU per chunk than the relay itself.

    At a stop's drain limit (``drain``) the stream ends with ``closing()``: an SSE error event and ``[DONE]``."""

    def __init__(self, content: Any, status_code: int = 200, headers: dict[str, str] | None = None,
                 media_type: str | None = None, *, drain: Drain | None = None,
                 closing: Callable[[], bytes] | None = None) -> None:
        super().__init__(content, status_code, headers, media_type)
        self.drain, self.closing = drain, closing

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        task = asyncio.current_task()
        assert task is not None
        gone = started = False

        async def watch() -> None:
            nonlocal gone
            try:
                while (await receive())["type"] != "http.disconnect":
                    pass
            except Exception:  # noqa: BLE001 - a server whose receive fails once the client is gone
                pass
            gone = True
            task.cancel()

        body = self.body_iterator
        watcher: asyncio.Task[None] | None = None
        try:
            try:
                try:  # in hand already: this starts the generator
                    first: bytes | None = await body.__anext__()  # type: ignore[attr-defined]
                except StopAsyncIteration:  # an empty body: headers, then the end
                    first = None
                watcher = asyncio.create_task(watch())
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                started = True
                if first is not None:
                    await send({"type": "http.response.body", "body": first, "more_body": True})
                async for chunk in body:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                if watcher is not None:
                    watcher.cancel()
        except asyncio.CancelledError:
            if gone:
                task.uncancel()  # our own cancellation: the client left
            elif self.drain is not None and self.drain.stopped():
                with contextlib.suppress(OSError):
                    await self._close(send, started)
            else:
                raise
        except OSError:  # a server that reports a write to a closed connection
            pass
        finally:
            # the relay's own cleanup is synchronous (no await): a cancellation cannot cut it short
            await body.aclose()  # type: ignore[attr-defined]

    async def _close(self, send: Any, started: bool) -> None:
        """End the stream at a stop's drain limit: the error event and ``[DONE]``, then the end of the body."""
        if not started:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        end = self.closing() if self.closing is not None else b""
        await send({"type": "http.response.body", "body": end, "more_body": False})


def error_response(e: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


class Forwarder:
    """Sends a request to a backend and relays its answer. The router sets these attributes."""

    cfg: RouterConfig
    pool: Pool
    metrics: RouterMetrics
    prio: PriorityMapper
    client: Client
    targets: list[dict[str, URL]]  # each backend's endpoints by request kind
    drain: Drain
    calib: OnlineCalibrator | None  # gboost's calibrator when it measures (PriorityMapper.measuring)
    _recal_pending = False  # a recalibration of gboost is scheduled

    def _payload(self, ctx: Ctx, b: Backend) -> bytes:
        body = with_osl(ctx.body, ctx.tokens) if self.cfg.hints.osl else ctx.body
        if ctx.query.parts and b.cfg.flatten_content:
            body = flatten_content(body)
        if self.cfg.priority.sends and b.priority_on:
            ctx.priority = self.prio.value(ctx.flight.key)
            return json.dumps({**body, self.cfg.priority.field: ctx.priority}).encode()
        ctx.priority = None
        return json.dumps(body).encode()

    def _out_headers(self, ctx: Ctx) -> list[tuple[str, str]]:
        h = [*ctx.in_headers, ("content-type", "application/json"), ("accept-encoding", "identity"),
             ("x-request-id", ctx.rid)]
        if ctx.tokens is not None:
            h.append(("x-lenpred-predicted-tokens", f"{ctx.tokens:.0f}"))
        if ctx.priority is not None:
            h.append(("x-lenpred-priority", str(ctx.priority)))
        return h

    def _reply_headers(self, ctx: Ctx) -> dict[str, str]:
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

    def _status_error(self, b: Backend, status: int, content: bytes, ctx: Ctx) -> Response:
        """A non-200 answer: raise Retry for :data:`RETRIED_STATUSES`; return any other (the backend's answer to
        this request: a 4xx, a 500 from a chat template) with the backend's status and error body."""
        msg = backend_message(content)
        if status in RETRIED_STATUSES:
            code = status if status in (429, 503) else 502
            raise Retry(ApiError(code, f"backend {b.label} answered HTTP {status}: {msg}", "server_error",
                                  code="backend_error"), f"http_{status}")
        try:
            j = json.loads(content)
            ok = isinstance(j, dict) and isinstance(j.get("error"), dict)
        except ValueError:
            ok = False
        if ok:
            return Response(content, status, headers=self._reply_headers(ctx), media_type="application/json")
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return error_response(ApiError(status, f"backend {b.label} answered HTTP {status}: {msg}", kind,
                                       code="backend_error"), self._reply_headers(ctx))

    def _upstream_error(self, b: Backend, e: UpstreamError, what: str) -> Retry:
        if e.kind == "connect":
            b.mark_down(str(e))
            return Retry(ApiError(502, f"backend {b.label} is unreachable ({e})", "server_error",
                                   code="backend_unreachable"), "connect")
        if e.kind == "timeout":
            return Retry(ApiError(504, f"backend {b.label} sent nothing {what} within "
                                        f"{self.cfg.timeouts.read_s:g} s", "server_error", code="backend_timeout"),
                          "timeout")
        return Retry(ApiError(502, f"backend {b.label} broke the connection ({e})", "server_error",
                               code="backend_error"), "broken")

    async def _attempt(self, ctx: Ctx, b: Backend) -> Response:
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

    def _remaining(self, ctx: Ctx) -> float:
        left = ctx.deadline - time.monotonic()
        if left <= 0:
            raise ApiError(504, f"the request took longer than the router's total timeout of "
                                f"{self.cfg.timeouts.total_s:g} s", "server_error", code="timeout")
        return left

    async def _unary(self, ctx: Ctx, b: Backend, url: URL, content: bytes,
                     headers: list[tuple[str, str]]) -> Response | tuple[int, bytes]:
        left = self._remaining(ctx)
        r: UpstreamResponse | None = None
        ctx.t_first = time.monotonic()  # not streamed: the whole answer is timed (prefill included)
        ctx.gen_first, ctx.area_first = 0, b.busy_area(ctx.t_first)
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
            raise Retry(ApiError(502, f"backend {b.label} answered something that is not an OpenAI response: "
                                       f"{backend_message(raw, 80)}", "server_error", code="backend_garbage"),
                         "garbage") from None
        b.last_progress = time.monotonic()
        produced = (j.get("usage") or {}).get("completion_tokens") if isinstance(j.get("usage"), dict) else None
        self._measured(ctx, b, produced if isinstance(produced, int) else None)
        self._finish(ctx, b, produced, "ok")
        self.metrics.ttfb.observe(time.monotonic() - ctx.t_in)
        return Response(raw, 200, headers=self._reply_headers(ctx), media_type="application/json")

    async def _stream(self, ctx: Ctx, b: Backend, url: URL, content: bytes,
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
                # hold the client's answer until the first data event: until then a failure is retried
                while not (counter.events or counter.done or counter.error):
                    chunk = await r.next_chunk()
                    if not chunk:
                        raise Retry(ApiError(502, f"backend {b.label} closed the stream before the first token",
                                              "server_error", code="backend_error"), "empty")
                    first += chunk
                    counter.feed(chunk)
                    if len(first) > 65536 or (len(first) >= 5 and not _looks_like_sse(first)):
                        raise Retry(ApiError(502, f"backend {b.label} answered something that is not an SSE "
                                                   f"stream: {backend_message(bytes(first[:200]), 80)}",
                                              "server_error", code="backend_garbage"), "garbage")
                if counter.error and not counter.events:
                    raise Retry(ApiError(502, f"backend {b.label} sent an error event first: {counter.error}",
                                          "server_error", code="backend_error"), "error_event")
        except TimeoutError:
            close(r)
            raise ApiError(504, f"backend {b.label} sent no token within the router's total timeout of "
                                f"{self.cfg.timeouts.total_s:g} s", "server_error", code="timeout") from None
        except UpstreamError as e:
            close(r)
            raise self._upstream_error(b, e, "(first token)") from None
        except BaseException:
            close(r)
            raise
        b.progress(ctx.flight, counter.tokens)
        b.last_progress = ctx.t_first = time.monotonic()
        ctx.gen_first, ctx.area_first = counter.tokens, b.busy_area(ctx.t_first)
        self.metrics.ttfb.observe(ctx.t_first - ctx.t_in)
        def closing() -> bytes:  # the end of a stream that the drain limit cuts: after a blank line, which ends
            # an event left open (a backend's chunk may end between an event's line and the blank line after it)
            return b"" if counter.done else b"\n\n" + sse_error_event(self.drain.error().message, code="shutting_down")

        return RelayStream(self._relay(ctx, b, r, bytes(first), counter), 200, headers=self._reply_headers(ctx),
                           media_type="text/event-stream", drain=self.drain, closing=closing)

    async def _relay(self, ctx: Ctx, b: Backend, r: UpstreamResponse, first: bytes, counter: SSECounter) -> Any:
        """The stream after its first data event. Per chunk: one read (no async generator between it and the
        upstream's reader), the SSE accounting (in place), the backend's running total drawn down, one yield."""
        err: str | None = None
        outcome = "ok"
        flight, deadline = ctx.flight, ctx.deadline
        try:
            yield first
            try:
                while chunk := await r.next_chunk():
                    counter.feed(chunk)
                    b.progress(flight, counter.tokens)
                    b.last_progress = now = time.monotonic()  # a busy backend is not a dead one
                    yield chunk
                    if now > deadline:
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
            # a client that leaves once it has read [DONE] (openai-python closes the response there, before the
            # end of the chunked body) got the whole answer
            outcome = "stopped" if self.drain.over else "ok" if counter.done else "client_gone"
            raise
        finally:
            r.close()
            if outcome == "ok":
                self._measured(ctx, b, counter.tokens)
            self.pool.release(b, ctx.rid)
            self._finish(ctx, b, counter.tokens if outcome == "ok" else None, outcome, err)

    def _measured(self, ctx: Ctx, b: Backend, produced: int | None) -> None:
        """A completed request's tokens, per-token interval and mean in-flight count on ``b``, for gboost's
        calibration (O(1); the recomputation, when due, runs in a later event-loop turn)."""
        cal = self.calib
        if cal is None or produced is None:
            return
        now = time.monotonic()
        dt = now - ctx.t_first
        steps = produced - ctx.gen_first
        per_token = dt / steps if steps >= 1 and dt > 0 and ctx.query.n_sequences == 1 else None
        inflight = (b.busy_area(now) - ctx.area_first) / dt if dt > 0 else 1.0
        if cal.completion(produced, per_token, inflight, now) and not self._recal_pending:
            self._recal_pending = True
            asyncio.get_running_loop().call_soon(self._recalibrate)

    def _recalibrate(self) -> None:
        self._recal_pending = False
        self.prio.recalibrate(time.monotonic(), sum(1 for b in self.pool.backends if b.healthy))

    def _finish(self, ctx: Ctx, b: Backend, produced: int | None, outcome: str, err: str | None = None) -> None:
        self.metrics.requests.labels(b.label, outcome).inc()
        if produced is not None:
            per_seq = produced / max(1, ctx.query.n_sequences)
            self.metrics.completion.observe(per_seq)
            if ctx.tokens is not None:
                self.metrics.abs_error.observe(abs(per_seq - ctx.tokens))
        ms = (time.monotonic() - ctx.t_in) * 1e3
        self._log(ctx.rid, f"{outcome} tokens={produced if produced is not None else '-'} ms={ms:.0f}"
                           + (f" error={err}" if err else ""), ctx)

    def _log(self, rid: str, what: str, ctx: Ctx | None = None) -> None:
        if not self.cfg.log_requests:
            return
        if ctx is None:
            log.info("rid=%s %s", rid, what)
            return
        pred = "-" if ctx.tokens is None else f"{ctx.tokens:.0f}"
        log.info("rid=%s model=%s stream=%s pred=%s est=%s prio=%s backend=%s attempt=%d %s", rid, ctx.query.model,
                 int(ctx.query.stream), pred, ctx.est.source, ctx.priority if ctx.priority is not None else "-",
                 ctx.backend.label if ctx.backend else "-", ctx.attempts, what)



def _looks_like_sse(buf: bytearray) -> bool:
    head = bytes(buf[:16]).lstrip()
    return head[:1] in (b"", b":") or head.startswith((b"data", b"event", b"id", b"retry"))


def close(r: UpstreamResponse | None) -> None:
    if r is not None:
        r.close()
