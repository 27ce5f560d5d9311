"""`lenpred route`: a length-aware OpenAI-compatible router in front of N backends (docs/route.md)."""

from __future__ import annotations

import argparse
import logging
import sys

from lenpred.errors import ConfigError

HELP = "a length-aware OpenAI-compatible router in front of N backends (priority, dispatch, headers)"
EXAMPLE = "lenpred route --config experiments/route/two-vllm.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="router config (JSON; see experiments/route/*.json and docs/route.md)")
    p.add_argument("--host", default=None, help="listen address (overrides the config's host)")
    p.add_argument("--port", type=int, default=None, help="listen port (overrides the config's port)")
    p.add_argument("--policy", default=None, help="dispatch policy (overrides the config's policy)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="router log level (info: one line per request)")
    p.add_argument("--check", action="store_true", help="validate the config, print it, and exit")
    p.add_argument("--schema", action="store_true", help="print the config's JSON schema and exit")


def build_config(args: argparse.Namespace):  # noqa: ANN201 - RouterConfig, imported lazily
    from lenpred.route.config import RouterConfig

    if not args.config:
        raise ConfigError("no config given", "pass --config FILE (e.g. experiments/route/two-stubs.json)")
    cfg = RouterConfig.load(args.config)
    changes = {k: v for k, v in (("host", args.host), ("port", args.port), ("policy", args.policy)) if v is not None}
    return cfg.replace(**changes) if changes else cfg


def run(args: argparse.Namespace) -> int:
    import json

    if args.schema:
        from lenpred.route.config import RouterConfig

        print(json.dumps(RouterConfig.json_schema(), indent=2))
        return 0
    cfg = build_config(args)
    if args.check:
        print(cfg.to_json())
        return 0
    try:
        import uvicorn

        from lenpred.route.app import create_app
    except ImportError as e:
        raise ConfigError(f"the router needs the serve extra ({e.name} is missing)",
                          "pip install 'lenpred[serve]'") from None
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per backend call is noise
    app = create_app(cfg)  # a bad head or estimator fails here
    _check_port(cfg.host, cfg.port)
    print(f"lenpred route: {cfg.mode} mode, policy {cfg.policy}, {len(cfg.backends)} backend(s), "
          f"estimator {cfg.estimator.kind}; listening on http://{cfg.host}:{cfg.port}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level=args.log_level,
                                           access_log=False, timeout_graceful_shutdown=5, backlog=2048))
    server.run()
    return 0 if server.started else 1


def _check_port(host: str, port: int) -> None:
    """Fail with one line (not uvicorn's log) when the address cannot be listened on."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(infos[0][4])
    except OSError as e:  # the port is taken, the address is not local, the name does not resolve
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}",
                          "choose another --port or --host") from None
