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
