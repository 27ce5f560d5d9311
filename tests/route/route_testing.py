"""Helpers for the router's tests: stub backend processes, a router served on loopback from a thread
(its state stays inspectable), a router as its own process, and SSE parsing."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

__all__ = ["RouterThread", "Stub", "free_port", "lenpred_cmd", "sse_data", "wait_http"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen | None = None, timeout: float = 60.0, log: Path | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-800:] if log is not None and log.exists() else ""
            raise RuntimeError(f"process for {url} exited with {proc.returncode}: {tail}")
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up in {timeout:.0f} s")


def lenpred_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "lenpred"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; from lenpred.cli import main; sys.exit(main())"]


class Stub:
    """A stub backend process (lenpred.route.stub) on a free loopback port."""

    def __init__(self, name: str, port: int | None = None, **opts: Any) -> None:
        self.name = name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.opts = {"tokens_per_s": 200, "ttft_ms": 5, **opts}
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        cmd = [sys.executable, "-m", "lenpred.route.stub", "--port", str(self.port), "--name", self.name]
        for k, v in self.opts.items():
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(self.url + "/health", self.proc, timeout=30)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()

    def fault(self, mode: str, count: int | None = None) -> None:
        httpx.post(self.url + "/stub/fault", json={"mode": mode, "count": count}, timeout=5).raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        return httpx.get(self.url + "/stub/requests", timeout=5).json()["requests"]

    def stats(self) -> dict[str, Any]:
        return httpx.get(self.url + "/stub/stats", timeout=5).json()

    def reset(self) -> None:
        self.fault("ok")
        httpx.post(self.url + "/stub/reset", timeout=5)


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
