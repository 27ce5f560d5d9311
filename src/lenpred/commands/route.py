"""`lenpred route`: a length-aware OpenAI-compatible router in front of N backends (docs/route.md)."""

from __future__ import annotations

import argparse

from lenpred.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="router config (JSON; see experiments/route/*.json and docs/route.md)")
    p.add_argument("--host", default=None, help="listen address (overrides the config's host)")
    p.add_argument("--port", type=int, default=None, help="listen port (overrides the config's port)")
    p.add_argument("--policy", default=None, help="dispatch policy (overrides the config's policy)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                   help="router log level (info: one line per request)")
    p.add_argument("--check", action="store_true", help="validate the config, print it, and exit")
    p.add_argument("--schema", action="store_true", help="print the config's JSON schema and exit")


def build_config(args: argparse.Namespace):  # RouterConfig, imported lazily
    from lenpred.route.config import RouterConfig

    if not args.config:
        raise ConfigError("no config given", "pass --config FILE (e.g. experiments/route/two-stubs.json)")
    cfg = RouterConfig.load(args.config)
    changes = {k: v for k, v in (("host", args.host), ("port", args.port), ("policy", args.policy)) if v is not None}
    return cfg.replace(**changes) if changes else cfg


def run(args: argparse.Namespace) -> int:
    import json

    from lenpred.route.config import RouterConfig
    from lenpred.route.server import route

    if args.schema:
        print(json.dumps(RouterConfig.json_schema(), indent=2))
        return 0
    cfg = build_config(args)
    if args.check:
        print(cfg.to_json())
        return 0
    if cfg.estimator.kind in ("head", "inline"):  # a head read by path: every head known by name
        from lenpred.commands.heads import register_heads

        register_heads()
    return route(cfg, args.log_level)
