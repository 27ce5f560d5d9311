"""`lenpred serve`: a length-prediction service for one trained head (FastAPI under uvicorn).

``POST /v1/predict`` takes ``{"prompt": ...}`` or ``{"messages": [...]}`` and answers the predicted
output tokens, q10 / q50 / q90, the head's name and card hash and the time taken; concurrent
requests are micro-batched. ``GET /healthz``, ``GET /metrics`` (Prometheus). See docs/serve.md.
"""

from __future__ import annotations

import argparse

from lenpred.config import add_arguments as add_config_arguments
from lenpred.config import from_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    from lenpred.serve.config import ServeConfig

    p.add_argument("--head", required=True, help="head directory written by `lenpred train`")
    add_config_arguments(p, ServeConfig, exclude=("head",))


def run(a: argparse.Namespace) -> int:
    from lenpred.commands.heads import register_heads
    from lenpred.serve.config import ServeConfig
    from lenpred.serve.server import serve

    register_heads()
    return serve(from_arguments(ServeConfig, a, head=a.head))
