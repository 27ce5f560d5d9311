"""The openai engine: retry logic in-process (httpx.MockTransport, a scripted loopback server) and,
where llama-cpp-python is installed, against a real OpenAI-compatible server process.

The real server is llama-cpp-python's (``python -m llama_cpp.server``) serving the embedded GGUF:
the same HTTP API vLLM and SGLang speak for ``/v1/completions``. Only those tests need llama.cpp.
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
from collect_testing import write_prompts

from lenpred.cli import main
from lenpred.collect.base import Job, SamplingConfig
from lenpred.collect.openai_engine import OpenAIEngine, OpenAIOptions, server_message
from lenpred.data.rundir import RunDir
from lenpred.errors import EngineError
from lenpred.models import resolve
from model_testing import WordTokenizer, needs_llama


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- in-process: httpx.MockTransport
class _Script:
    """A MockTransport handler: GET /models answers 200; each POST takes the next scripted reply
    (an int status with a JSON error, an httpx.Response, or an exception to raise), then succeeds."""

    def __init__(self, *replies: object) -> None:
        self.replies = list(replies)
        self.posts: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        body = json.loads(request.content)
        self.posts.append(body)
        reply = self.replies.pop(0) if self.replies else None
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, httpx.Response):
            return reply
        if isinstance(reply, int):
            return httpx.Response(reply, json={"error": {"message": f"scripted {reply}"}})
        choices = [
            {"index": i, "text": "red blue", "token_ids": [5, 6], "finish_reason": "stop"} for i in range(body["n"])
        ]
        return httpx.Response(200, json={"choices": choices})


def _options(base_url: str, **kw: object) -> OpenAIOptions:
    return OpenAIOptions(base_url=base_url, api_model="m", **kw)


def _mock_engine(script: _Script, retries: int = 3, sleeps: list[float] | None = None, **kw: object) -> OpenAIEngine:
    return OpenAIEngine(
        OpenAIOptions(base_url="http://server.test/v1", api_model="m", concurrency=1, retries=retries),
        SamplingConfig(max_new_tokens=8), WordTokenizer(),
        transport=httpx.MockTransport(script), sleep=(sleeps.append if sleeps is not None else lambda s: None), **kw,
    )


JOBS = [Job("p", k, (1, 2), "hi", 7) for k in range(2)]


def test_retries_429_and_500_then_succeeds_with_backoff():
    script, sleeps = _Script(429, 500), []
    res = list(_mock_engine(script, sleeps=sleeps).generate(iter(JOBS)))
    assert len(script.posts) == 3 and sleeps == [1.0, 2.0]  # exponential backoff between the attempts
    assert [(r.sample_idx, r.token_ids, r.stop_reason) for r in res] == [(0, (5, 6), "eos"), (1, (5, 6), "eos")]
    assert script.posts[0]["n"] == 2 and script.posts[0]["seed"] == 7 and script.posts[0]["max_tokens"] == 8


def test_timeouts_are_retried_then_named():
    ok = _Script(httpx.ReadTimeout("read timed out"))
    assert len(list(_mock_engine(ok).generate(iter(JOBS)))) == 2 and len(ok.posts) == 2
    always = _Script(*[httpx.ConnectTimeout("connect timed out")] * 5)
    with pytest.raises(EngineError, match=r"failed after 3 attempts \(ConnectTimeout: connect timed out\)"):
        list(_mock_engine(always, retries=2).generate(iter(JOBS)))
    assert len(always.posts) == 3


def test_client_error_is_not_retried_and_names_status():
    script = _Script(400)
    with pytest.raises(EngineError, match=r"HTTP 400: scripted 400"):
        list(_mock_engine(script).generate(iter(JOBS)))
    assert len(script.posts) == 1


PAGE = (
    "<!DOCTYPE html>\n<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<center><h1>502 Bad Gateway</h1>"
    "</center>\n<hr><center>nginx/1.25.3</center>\n</body>\n</html>\n"
)


def test_html_error_page_keeps_status_and_first_line():
    script = _Script(*[httpx.Response(502, text=PAGE, headers={"content-type": "text/html"})] * 2)
    with pytest.raises(EngineError) as e:
        list(_mock_engine(script, retries=1).generate(iter(JOBS)))
    msg = str(e.value)
    assert "HTTP 502: 502 Bad Gateway" in msg and "<" not in msg and "nginx" not in msg and "\n" not in msg
    # a page without a title: its first line of text; a plain body: its first line
    assert server_message(httpx.Response(503, text="<html><body>\n<p>Service Unavailable</p><p>x</p>")) == "Service Unavailable"
    assert server_message(httpx.Response(500, text="boom\ntraceback...")) == "boom"
    assert server_message(httpx.Response(500, json={"detail": "no such model"})) == "no such model"


def test_injected_client_is_used_as_is():
    script = _Script()
    client = httpx.Client(transport=httpx.MockTransport(script), headers={"x-test": "1"})
    eng = OpenAIEngine(_options("http://server.test"), SamplingConfig(max_new_tokens=8), WordTokenizer(), client=client)
    assert eng.base_url == "http://server.test/v1"  # /v1 appended
    assert len(list(eng.generate(iter(JOBS)))) == 2


def test_token_ids_from_text_when_the_server_sends_none():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"data": []})
        return httpx.Response(200, json={"choices": [{"index": 0, "text": "a b c d e f g h i j", "finish_reason": "length"}]})

    eng = OpenAIEngine(_options("http://s/v1"), SamplingConfig(max_new_tokens=8), WordTokenizer(),
                       transport=httpx.MockTransport(handler))
    (r,) = eng.generate(iter([Job("p", 0, (1,), "hi", 0)]))
    tok = WordTokenizer()
    assert r.stop_reason == "length" and r.token_ids == tuple(tok("a b c d e f g h")["input_ids"])  # cut at the cap


def test_models_endpoint_html_error_is_one_line():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, text=PAGE.replace("502 Bad Gateway", "401 Authorization Required"), headers={"content-type": "text/html"})

    with pytest.raises(EngineError, match=r"answered HTTP 401: 401 Authorization Required -- fix"):
        OpenAIEngine(_options("http://s/v1"), SamplingConfig(), WordTokenizer(), transport=httpx.MockTransport(handler))


# ---------------------------------------------------------------- a real OpenAI-compatible server (llama.cpp)
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
            pass  # not listening yet
        time.sleep(0.3)  # also after a non-200 answer (still loading): no busy loop
    else:
        proc.kill()
        pytest.fail("server did not come up in 120 s")
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def _prompts(tmp_path: Path) -> Path:
    return write_prompts(tmp_path / "p.jsonl", ["Name a color.", "What is 2 + 5?", "Name a fruit."])


def _args(run: Path, prompts: Path, url: str, *extra: str) -> list[str]:
    return [
        "collect", "--engine", "openai", "--base-url", url, "--run", str(run), "--source", "jsonl",
        "--prompts-file", str(prompts), "--prompts", "2", "--samples", "2", "--max-new-tokens", "16",
        "--temperature", "1.0", "--top-p", "1.0", "--min-p", "0.1", "--no-progress", *extra,
    ]


@needs_llama
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


@needs_llama
def test_server_that_ignores_n_is_named(server, tmp_path, capsys):
    # llama.cpp's server returns one choice whatever n is: the error must say what to do
    assert main(_args(tmp_path / "run", _prompts(tmp_path), server)) == 1
    assert "--n-per-request 1" in capsys.readouterr().err


def test_unreachable_server(tmp_path, capsys):
    assert main(_args(tmp_path / "run", _prompts(tmp_path), f"http://127.0.0.1:{_free_port()}/v1")) == 1
    err = capsys.readouterr().err
    assert "cannot reach the OpenAI-compatible server" in err and "fix:" in err
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- in-process: a scripted loopback server
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


def test_real_sockets_retry_then_succeed():
    srv = _Flaky([503, 500])
    try:
        eng = OpenAIEngine(_options(srv.url, concurrency=1, retries=3), SamplingConfig(max_new_tokens=8), WordTokenizer(),
                           sleep=lambda s: None)
        res = list(eng.generate(iter(JOBS)))
        assert srv.posts == 3 and [r.text for r in res] == ["red", "red"]
    finally:
        srv.close()


def test_server_error_on_the_first_request_leaves_nothing(tmp_path, capsys):
    """The server answers /models, then fails every completion: exit 1, one line, no run directory."""
    srv = _Flaky([500] * 10)
    try:
        assert main(_args(tmp_path / "run", _prompts(tmp_path), srv.url, "--retries", "0")) == 1
    finally:
        srv.close()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "HTTP 500: scripted 500" in err and "fix:" in err
    assert not (tmp_path / "run").exists()


def test_server_error_on_an_existing_run_changes_nothing(tmp_path, capsys):
    """Extending a run whose server then fails: the run's files are byte-identical afterwards."""
    srv = _Flaky([])
    run = tmp_path / "run"
    try:
        assert main(_args(run, _prompts(tmp_path), srv.url, "--n-per-request", "1")) == 0
        before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
        srv.script = [500] * 10
        assert main(_args(run, _prompts(tmp_path), srv.url, "--retries", "0", "--samples", "3")) == 1
    finally:
        srv.close()
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert len(RunDir.open(run).samples()) == 4
