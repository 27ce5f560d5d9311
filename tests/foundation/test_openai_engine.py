"""The openai engine against a real OpenAI-compatible server process on loopback.

The server is llama-cpp-python's (``python -m llama_cpp.server``) serving the embedded GGUF: the
same HTTP API vLLM and SGLang speak for ``/v1/completions``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import needs_llama
from lenpred.cli import main
from lenpred.data.rundir import RunDir
from lenpred.models import resolve

pytestmark = needs_llama


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("llama_cpp.server")
    port = _free_port()
    gguf = resolve("smollm2-135m").gguf_path
    log = open(tmp_path_factory.mktemp("server") / "server.log", "w+b")  # a file: a full pipe would block the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            pytest.fail(f"server died: {log.read().decode(errors='replace')[-500:]}")
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("server did not come up in 120 s")
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def _prompts(tmp_path: Path) -> Path:
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps({"id": f"q{i}", "prompt": t}) + "\n" for i, t in enumerate(["Name a color.", "What is 2 + 5?", "Name a fruit."])))
    return p


def _args(run: Path, prompts: Path, url: str, *extra: str) -> list[str]:
    return [
        "collect", "--engine", "openai", "--base-url", url, "--run", str(run), "--source", "jsonl",
        "--prompts-file", str(prompts), "--prompts", "2", "--samples", "2", "--max-new-tokens", "16",
        "--temperature", "1.0", "--top-p", "1.0", "--min-p", "0.1", "--no-progress", *extra,
    ]


def test_collect_through_server(server, tmp_path):
    run = tmp_path / "run"
    assert main(_args(run, _prompts(tmp_path), server, "--n-per-request", "1", "--concurrency", "2")) == 0
    rd = RunDir.open(run)
    s = rd.samples()
    assert len(s) == 4 and not s.duplicated(["prompt_id", "sample_idx"]).any()
    assert set(s.stop_reason) <= {"eos", "length"}
    assert (s.n_tokens <= 16).all() and ((s.stop_reason == "length") == (s.n_tokens == 16)).all()
    assert (s.n_tokens == s.token_ids.map(len)).all()
    assert rd.card["engine"] == {"name": "openai", "version": "v1-completions", "api_model": "smollm2-135m"}


def test_server_that_ignores_n_is_named(server, tmp_path, capsys):
    # llama.cpp's server returns one choice whatever n is: the error must say what to do
    assert main(_args(tmp_path / "run", _prompts(tmp_path), server)) == 1
    assert "--n-per-request 1" in capsys.readouterr().err


def test_unreachable_server(tmp_path, capsys):
    assert main(_args(tmp_path / "run", _prompts(tmp_path), f"http://127.0.0.1:{_free_port()}/v1")) == 1
    err = capsys.readouterr().err
    assert "cannot reach the OpenAI-compatible server" in err and "fix:" in err
    assert not (tmp_path / "run").exists()


class _Flaky:
    """A tiny HTTP server on loopback that fails in scripted ways (the error paths a real server can take)."""

    def __init__(self, script: list[int]) -> None:
        import http.server
        import threading

        self.script = list(script)
        self.posts = 0
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"data": [{"id": "m"}]})

            def do_POST(self):
                n = int(self.headers["content-length"])
                req = json.loads(self.rfile.read(n))
                outer.posts += 1
                code = outer.script.pop(0) if outer.script else 200
                if code != 200:
                    self._send(code, {"error": {"message": f"scripted {code}"}})
                    return
                choices = [{"index": i, "text": "red", "finish_reason": "stop"} for i in range(req["n"])]
                self._send(200, {"choices": choices, "usage": {"completion_tokens": req["n"]}})

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def _engine(url: str, retries: int):
    from lenpred.collect.base import Job, SamplingConfig
    from lenpred.collect.openai import OpenAIEngine
    from lenpred.models import load_tokenizer

    eng = OpenAIEngine(url, "m", SamplingConfig(max_new_tokens=8), load_tokenizer(), concurrency=1, retries=retries)
    eng_jobs = [Job("p", k, (1, 2), "hi", 0) for k in range(2)]
    return eng, eng_jobs


def test_retries_then_succeeds(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    srv = _Flaky([503, 500])
    try:
        eng, jobs = _engine(srv.url, retries=3)
        res = list(eng.generate(iter(jobs)))
        assert srv.posts == 3 and [r.text for r in res] == ["red", "red"]
    finally:
        srv.close()


def test_client_error_is_not_retried_and_names_status(monkeypatch):
    from lenpred.errors import EngineError

    monkeypatch.setattr("time.sleep", lambda s: None)
    srv = _Flaky([400])
    try:
        eng, jobs = _engine(srv.url, retries=3)
        with pytest.raises(EngineError, match="HTTP 400.*scripted 400"):
            list(eng.generate(iter(jobs)))
        assert srv.posts == 1
    finally:
        srv.close()


def test_gives_up_after_retries(monkeypatch):
    from lenpred.errors import EngineError

    monkeypatch.setattr("time.sleep", lambda s: None)
    srv = _Flaky([503] * 10)
    try:
        eng, jobs = _engine(srv.url, retries=2)
        with pytest.raises(EngineError, match="failed after 3 attempts"):
            list(eng.generate(iter(jobs)))
        assert srv.posts == 3
    finally:
        srv.close()
