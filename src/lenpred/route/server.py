"""Run a router under uvicorn (what ``lenpred route`` calls), as ``lenpred serve`` runs the prediction
service (:mod:`lenpred.serve.server`): the app is built first (a bad head or estimator fails before
anything listens), the address bound next (a busy port fails with one line), and SIGINT or SIGTERM
stops it gracefully: the requests in flight may finish for ``timeouts.drain_s``; those still running then
are ended by the router, each with an OpenAI-format answer (:class:`lenpred.route.forward.Drain`), and it
exits 0.
"""

from __future__ import annotations

import logging
import sys

from lenpred.errors import ConfigError
from lenpred.route.config import RouterConfig

__all__ = ["route"]

# uvicorn's own limit on a stop, past the router's drain: it cancels what is left (the router's ending of the
# requests writes a few bytes each, so nothing is normally left by then)
_BACKSTOP_S = 2.0


def route(cfg: RouterConfig, log_level: str = "info") -> int:
    """Serve ``cfg``'s router until SIGINT / SIGTERM; 0 after a clean stop, 1 when it never started."""
    try:
        import uvicorn  # noqa: F401 - checked here: the serve extra

        from lenpred.route.app import create_app
    except ImportError as e:
        raise ConfigError(f"the router needs the serve extra ({e.name} is missing)",
                          "pip install 'lenpred[serve]'") from None
    from lenpred.serve.server import bind, run_app

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(cfg)  # a bad head or estimator fails here
    sock = bind(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    print(f"lenpred route: {cfg.mode} mode, policy {cfg.policy}, {len(cfg.backends)} backend(s), "
          f"estimator {cfg.estimator.kind}; listening on http://{host}:{port}", file=sys.stderr, flush=True)
    drain_s = cfg.timeouts.drain_s
    started = run_app(app, sock, log_level=log_level, access_log=False, timeout_graceful_shutdown=drain_s + _BACKSTOP_S,
                      backlog=2048, on_stop=lambda: app.state.router.drain.begin(drain_s))
    print("lenpred route: stopped", file=sys.stderr, flush=True)
    return 0 if started else 1
