"""Helpers for the router's tests: the server processes of benchmarks/route_procs.py, a router served on loopback
from a thread (its state stays inspectable), and SSE parsing."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from benchmarks.route_procs import (
    LlamaServer,
    RouterProcess,
    ServeProcess,
    Stub,
    free_port,
    lenpred_cmd,
    wait_http,
)

__all__ = ["LlamaServer", "RouterProcess", "RouterThread", "ServeProcess", "Stub", "free_port", "lenpred_cmd",
           "sse_data", "wait_http"]


class RouterThread:
    """``create_app(cfg)`` served by uvicorn on a free port from a background thread."""

    def __init__(self, cfg: Any, estimator: Any = None) -> None:
        import uvicorn

        from lenpred.route.app import create_app

        self.port = free_port()
        cfg = cfg.replace(port=self.port)
        self.app = create_app(cfg, estimator=estimator)
        self.router = self.app.state.router
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    access_log=False, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.time() > deadline:
                raise RuntimeError("router thread did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> RouterThread:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def sse_data(text: str) -> list[Any]:
    """The data payloads of an SSE body, JSON-decoded ("[DONE]" kept as the string)."""
    out: list[Any] = []
    for line in text.splitlines():
        if line.startswith("data:"):
            p = line[5:].strip()
            out.append(p if p == "[DONE]" else json.loads(p))
    return out
