"""Run a :class:`~lenpred.serve.service.PredictionService` under uvicorn (what ``lenpred serve`` calls).

The socket is bound first (a busy port fails before a model is loaded), the head loaded next (a bad
head fails before anything listens), and only then does uvicorn start listening: each fails at once
with a one-line :class:`~lenpred.errors.LenpredError` (exit code 1). Until the head is loaded the
port refuses connections, so "connection refused" means "not ready yet". ``--port 0`` binds any free
port; the ``listening on`` line names it. :func:`bind` and :func:`run_app` (uvicorn on a bound socket, a
requested stop drains and exits 0) start the router too (:mod:`lenpred.route.server`).
"""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from lenpred.errors import ConfigError
from lenpred.serve.config import ServeConfig

__all__ = ["bind", "run_app", "serve", "CHEAP_HEADS"]

CHEAP_HEADS = ("ngram", "gbdt")  # text heads of a fraction of a ms a request


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), not yet listening (asyncio's server calls listen), or a
    ConfigError naming the problem."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ConfigError(f"--host {host!r} is not an address this machine can listen on ({e.strerror})",
                          "pass an IP address such as 127.0.0.1 or 0.0.0.0") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port} ({e.strerror})",
                          "pass another --port (0 picks a free one), or stop what holds this one") from None
    return sock


def serve(cfg: ServeConfig) -> int:
    from lenpred.checks import check_device
    from lenpred.serve.app import create_app
    from lenpred.serve.heads import PrefillOptions, TextOptions
    from lenpred.serve.service import Batching, PredictionService

    check_device(cfg.device)  # before the head and its target load (seconds), not after
    sock = bind(cfg.host, cfg.port)
    try:
        batching = Batching(max_batch=cfg.max_batch, max_wait_ms=cfg.max_wait_ms or 0.0, max_queue=cfg.max_queue,
                            timeout_s=cfg.timeout_s)
        prefill = PrefillOptions(model=cfg.model, max_prompt_tokens=cfg.max_prompt_tokens, device=cfg.device)
        svc = PredictionService.from_head(cfg.head, batching=batching, threads=cfg.threads, prefill=prefill,
                                          text=TextOptions(cfg.runtime, cfg.runtime_tolerance))
        if cfg.inline and svc.input_kind != "text":
            raise ConfigError(f"--inline runs text heads on the event loop; head {cfg.head} is a {svc.predictor} head "
                              "that runs the target's prefill", "drop --inline for this head")
        svc.inline = cfg.inline
        if cfg.max_wait_ms is None:  # the measured default (docs/route.md, router-side predictors): no wait for
            svc.max_wait_ms = 0.0 if svc.predictor in CHEAP_HEADS else 2.0  # a cheap head halves its idle cost
    except BaseException:
        sock.close()
        raise
    host, port = sock.getsockname()[:2]
    app = create_app(svc, max_body_bytes=cfg.max_body_bytes)
    what = f"target {svc.model_id}" if svc.model_id else "no target model"
    how = "inline (no batching)" if svc.inline else f"max batch {cfg.max_batch}, max wait {svc.max_wait_ms:g} ms"
    print(f"serve: head {svc.head_name} ({svc.predictor}, card {svc.card_hash}, {what}); {how}", flush=True)
    print(f"serve: listening on http://{host}:{port}  (POST /v1/predict, GET /healthz, GET /metrics, /docs)",
          flush=True)
    run_app(app, sock, log_level=cfg.log_level, access_log=cfg.access_log)
    print("serve: stopped", file=sys.stderr, flush=True)
    return 0


def run_app(app: Any, sock: socket.socket, on_stop: Callable[[], None] | None = None, **options: Any) -> bool:
    """Serve the ASGI ``app`` on the bound ``sock`` under uvicorn (``options``: uvicorn.Config's) until
    SIGINT or SIGTERM, then shut down gracefully (requests in flight finish) and return; True when the
    server had started. ``on_stop`` is called on the server's event loop when the stop begins (it no longer
    listens; the requests in flight run on). ``sock`` is closed on return."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if on_stop is not None:
                on_stop()
            await super().shutdown(sockets)

    server = Server(uvicorn.Config(app, lifespan="on", **options))
    # uvicorn shuts down gracefully on SIGINT / SIGTERM, then re-raises the signal to the handler that
    # was there before; a quiet one here makes a requested stop exit 0 (not 143, nor a KeyboardInterrupt)
    before = {s: _quiet(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for s, h in before.items():
            if h is not None:
                signal.signal(s, h)
    return bool(server.started)


# what signal.signal returns and takes: a handler, SIG_DFL / SIG_IGN, or None (set outside Python)
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _quiet(sig: signal.Signals) -> _Handler:
    try:
        return signal.signal(sig, lambda *_: None)
    except ValueError:  # not the main thread: leave signals alone
        return None
