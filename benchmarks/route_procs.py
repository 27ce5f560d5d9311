"""Server processes on loopback for the router's benchmarks and tests (not part of the lenpred package;
``from benchmarks.route_procs import ...`` from the repository root): stub backends, llama.cpp servers
(llama-cpp-python with the embedded GGUF), a ``lenpred route`` process and a ``lenpred serve`` process.

Each is a :class:`Proc`: started on a free port, waited for until it answers, its output in a log file
(a pipe that nobody reads would fill and block the server), stopped with ``stop()`` (SIGTERM, then
SIGKILL) or killed at once with ``kill()`` (the fault tests).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["LlamaServer", "Proc", "RouterProcess", "ServeProcess", "Stub", "free_port", "lenpred_cmd", "wait_http"]

STUB = Path(__file__).with_name("route_stub.py")  # run as a script: it needs nothing but the standard library


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen | None = None, timeout: float = 60.0, log: Path | None = None,
              any_status: bool = False) -> None:
    """Wait until ``url`` answers (a status below 500, or any with ``any_status``); fail early if ``proc`` exits."""
    import httpx

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-800:] if log is not None and log.exists() else ""
            raise RuntimeError(f"process for {url} exited with {proc.returncode}: {tail}")
        try:
            if httpx.get(url, timeout=1.0).status_code < 500 or any_status:
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


class Proc:
    """A server process on ``127.0.0.1:port``."""

    ready_path = "/"
    ready_timeout = 60.0
    ready_any_status = False

    def __init__(self, name: str, port: int | None = None, log_dir: str | Path | None = None) -> None:
        self.name = name
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        folder = Path(log_dir) if log_dir is not None else Path(tempfile.gettempdir())
        folder.mkdir(parents=True, exist_ok=True)
        self.log = folder / f"{type(self).__name__.lower()}-{name}-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def start(self) -> Proc:
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(self.command(), stdout=f, stderr=subprocess.STDOUT, env=self.env())
        wait_http(self.url + self.ready_path, self.proc, timeout=self.ready_timeout, log=self.log,
                  any_status=self.ready_any_status)
        return self

    def env(self) -> dict[str, str]:
        return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Proc:
        return self if self.alive else self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class Stub(Proc):
    """``python benchmarks/route_stub.py`` (fixed token rate, scripted faults; see its module doc)."""

    ready_path = "/health"

    def __init__(self, name: str, port: int | None = None, log_dir: str | Path | None = None, **opts: Any) -> None:
        super().__init__(name, port, log_dir)
        self.opts = {"tokens_per_s": 200, "ttft_ms": 5, **opts}

    def command(self) -> list[str]:
        cmd = [sys.executable, str(STUB), "--port", str(self.port), "--name", self.name]
        for k, v in self.opts.items():
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        return cmd

    def fault(self, mode: str, count: int | None = None) -> None:
        import httpx

        httpx.post(self.url + "/stub/fault", json={"mode": mode, "count": count}, timeout=5).raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        import httpx

        return httpx.get(self.url + "/stub/requests", timeout=5).json()["requests"]

    def stats(self) -> dict[str, Any]:
        import httpx

        return httpx.get(self.url + "/stub/stats", timeout=5).json()

    def reset(self) -> None:
        import httpx

        self.fault("ok")
        httpx.post(self.url + "/stub/reset", timeout=5)


class LlamaServer(Proc):
    """llama-cpp-python's OpenAI-compatible server with the embedded GGUF (one request at a time; requests
    are not interrupted by newer ones: ``--interrupt_requests False``)."""

    ready_path = "/v1/models"
    ready_timeout = 180.0

    def __init__(self, name: str, port: int | None = None, log_dir: str | Path | None = None, gguf: str | None = None,
                 n_ctx: int = 2048, threads: int = 1, alias: str = "smollm2-135m") -> None:
        super().__init__(name, port, log_dir)
        if gguf is None:
            from lenpred.models import resolve

            gguf = str(resolve("smollm2-135m").gguf_path)
        self.gguf, self.n_ctx, self.threads, self.alias = gguf, n_ctx, threads, alias

    def command(self) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--model", self.gguf, "--model_alias", self.alias,
                "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
                "--interrupt_requests", "False", "--verbose", "False"]


class ServeProcess(Proc):
    """``lenpred serve --head PATH``."""

    ready_path = "/healthz"
    ready_timeout = 180.0

    def __init__(self, head: str | Path, name: str = "serve", port: int | None = None,
                 log_dir: str | Path | None = None) -> None:
        super().__init__(name, port, log_dir)
        self.head = str(head)

    def command(self) -> list[str]:
        return [*lenpred_cmd(), "serve", "--head", self.head, "--port", str(self.port)]


class RouterProcess(Proc):
    """``lenpred route --config FILE`` for a config given as a dict (written beside the log)."""

    ready_path = "/healthz"
    ready_any_status = True  # /healthz answers 503 while no backend is healthy: the router is up all the same

    def __init__(self, config: dict[str, Any], name: str = "router", port: int | None = None,
                 log_dir: str | Path | None = None, log_level: str = "warning") -> None:
        super().__init__(name, port, log_dir)
        self.config = {**config, "port": self.port, "host": "127.0.0.1"}
        self.config_path = self.log.with_suffix(".json")
        self.log_level = log_level

    def command(self) -> list[str]:
        self.config_path.write_text(json.dumps(self.config, indent=2))
        return [*lenpred_cmd(), "route", "--config", str(self.config_path), "--log-level", self.log_level]
