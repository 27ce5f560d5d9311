"""Real clients nobody here wrote, through `lenpred route` in front of two llama.cpp servers (issue 39):
the official ``openai`` Python client and guidellm, each request counted as done or as an error.

    nice -n 10 .venv/bin/python -m benchmarks.bench_clients --guidellm /path/to/venv/bin/guidellm

* Two llama-cpp-python servers with the embedded SmolLM2 GGUF (one slot, one thread each) and a
  ``lenpred route`` process over them, configured as ``experiments/route/two-llamacpp.json`` is
  (``flatten_content`` on, ``max_outstanding`` 1) with the cheap ``chars`` estimator; or the servers
  given with ``--backends URL,URL``.
* **openai**: the ``openai`` package (the ``dev`` extra), ``--openai-requests`` of each kind, two at a
  time: chat with string content, chat with a list of text parts, completions, and a streamed chat.
* **guidellm**: ``guidellm run`` (0.8: a separate environment is fine, it talks HTTP only; give its
  executable with ``--guidellm``), once in chat mode (``/v1/chat/completions``: it sends ``content`` as a
  list of parts) and once in completions mode, ``--guidellm-requests`` each, two concurrent streams,
  synthetic prompts of ``--prompt-tokens`` counted with SmolLM2's tokenizer (saved once from the GGUF
  into ``--tokenizer-dir``: guidellm needs a tokenizer and nothing can be downloaded here). It first
  calls the router's ``/health``, as it calls vLLM's.

Writes the counts, the router's request outcomes and retries (its /metrics) and the machine to ``--out``
(default out/bench/router/clients.json) and prints a table. Everything runs on loopback; the processes
it starts are stopped at the end.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ALIAS = "smollm2-135m"
PARTS = [{"type": "text", "text": "Name three colours."}, {"type": "text", "text": "One line, please."}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A process on 127.0.0.1, its output in a log file, ready once ``ready_path`` answers below 500."""

    def __init__(self, name: str, cmd: list[str], url: str, ready_path: str, logs: Path) -> None:
        self.name, self.url, self.ready_path = name, url, ready_path
        self.log = logs / f"{name}.log"
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)

    def wait(self, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: "
                                   f"{self.log.read_text(errors='replace')[-600:]}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)  # polling a server that is starting, not timing a result
        raise RuntimeError(f"{self.name} did not answer {self.ready_path} within {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def llama_server(name: str, gguf: str, logs: Path) -> Server:
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--model_alias", ALIAS, "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--n_threads_batch", "1",
           "--interrupt_requests", "False", "--verbose", "False"]
    return Server(name, cmd, f"http://127.0.0.1:{port}", "/v1/models", logs)


def router(backends: list[str], logs: Path, flatten: bool = True) -> Server:
    port = _free_port()
    cfg = {"port": port, "policy": "least-predicted-tokens", "log_requests": False,
           "backends": [{"url": u, "name": f"llama-{chr(97 + i)}", "priority": "off", "max_outstanding": 1,
                         "flatten_content": flatten} for i, u in enumerate(backends)],
           "estimator": {"kind": "chars"}, "timeouts": {"read_s": 300.0, "total_s": 1200.0},
           "limits": {"queue_timeout_s": 600.0}}
    path = logs / "router.json"
    path.write_text(json.dumps(cfg, indent=2))
    exe = Path(sys.executable).parent / "lenpred"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "lenpred.cli"]
    return Server("router", [*cmd, "route", "--config", str(path), "--log-level", "warning"],
                  f"http://127.0.0.1:{port}", "/health", logs)


# ------------------------------------------------------------------ the openai client
def run_openai(url: str, n: int, max_tokens: int) -> dict[str, Any]:
    """``n`` requests of each kind through the router with the official client, two at a time."""
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)

    def chat(content: Any) -> str:
        r = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": content}],
                                           max_tokens=max_tokens, temperature=0)
        return r.choices[0].message.content or ""

    def stream() -> str:
        chunks = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": PARTS}],
                                                max_tokens=max_tokens, temperature=0, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    def complete() -> str:
        r = client.completions.create(model=ALIAS, prompt="The three primary colours are", max_tokens=max_tokens,
                                      temperature=0)
        return r.choices[0].text

    kinds = {"chat (string)": lambda: chat("Name three colours. One line, please."),
             "chat (list of parts)": lambda: chat(PARTS), "completions": complete, "chat (streamed)": stream}
    out: dict[str, Any] = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for kind, fn in kinds.items():
            t0 = time.monotonic()
            futs = [pool.submit(fn) for _ in range(n)]
            ok, errors = 0, []
            for f in futs:
                try:
                    ok += bool(f.result())  # an empty answer counts as an error too
                except Exception as e:  # noqa: BLE001 - the client's error classes, each one's message recorded
                    errors.append(f"{type(e).__name__}: {e}"[:200])
            out[kind] = {"requests": n, "ok": ok, "errors": n - ok, "error_samples": errors[:3],
                         "seconds": round(time.monotonic() - t0, 1)}
    return out


# ------------------------------------------------------------------ guidellm
def save_tokenizer(folder: Path) -> Path:
    """SmolLM2's tokenizer as a Hugging Face folder (from the GGUF; once): guidellm counts prompt tokens with it."""
    if (folder / "tokenizer.json").exists():
        return folder
    from transformers import AutoTokenizer

    from lenpred.models import resolve

    spec = resolve(ALIAS)
    tok = AutoTokenizer.from_pretrained(str(Path(spec.gguf_path).parent), gguf_file=Path(spec.gguf_path).name)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(folder)
    return folder


def run_guidellm(exe: str, url: str, fmt: str, n: int, tokenizer: Path, prompt_tokens: int, output_tokens: int,
                 logs: Path) -> dict[str, Any]:
    """One ``guidellm run`` against the router; its request counts from its JSON report."""
    name = fmt.strip("/").replace("/", "-")  # v1-chat-completions, v1-completions
    report = logs / f"guidellm-{name}.json"
    cmd = [exe, "run",
           "--backend", f"kind=openai_http,target={url},model={ALIAS},request_format={fmt},max_tokens={output_tokens}",
           "--profile", "kind=concurrent,streams=2",
           "--constraint", f"kind=max_requests,count={n}",
           "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},output_tokens={output_tokens}",
           "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
           "--output", f"kind=json,path={report}", "--disable-console-interactive"]
    t0 = time.monotonic()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    log = logs / f"guidellm-{name}.log"
    with open(log, "wb") as f:  # its own process group: guidellm's worker processes end with it
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=1800)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    out: dict[str, Any] = {"command": " ".join(cmd), "rc": rc, "seconds": round(time.monotonic() - t0, 1)}
    if rc != 0 or not report.exists():
        out["error"] = log.read_text(errors="replace")[-800:]
        return out
    return {**out, **guidellm_counts(json.loads(report.read_text()))}


def guidellm_counts(report: dict[str, Any]) -> dict[str, Any]:
    """successful / errored / incomplete requests of each benchmark in a guidellm JSON report, summed."""
    totals = {"successful": 0, "errored": 0, "incomplete": 0}
    samples: list[str] = []
    for bench in report.get("benchmarks", []):
        metrics = bench.get("metrics", {})
        counts = (metrics.get("request_totals") or bench.get("request_totals") or {})
        for k in totals:
            totals[k] += int(counts.get(k, 0) or 0)
        for req in (bench.get("requests") or {}).get("errored", [])[:3]:
            info = req.get("info") or {}
            samples.append(str(info.get("error") or req.get("error") or req)[:200])
    return {**totals, "error_samples": samples[:3]}


def router_metrics(url: str) -> dict[str, Any]:
    """The router's request outcomes and retries from its /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {"requests": {}, "retries": {}}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
        for s in fam.samples:
            if s.name == "lenpred_route_requests_total":
                key = f"{s.labels.get('backend')}/{s.labels.get('outcome')}"
                out["requests"][key] = int(s.value)
            elif s.name == "lenpred_route_retries_total":
                out["retries"][f"{s.labels.get('backend')}/{s.labels.get('reason')}"] = int(s.value)
    return out


def machine() -> dict[str, Any]:
    cpu = None
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), None)
    except OSError:
        pass
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "cpu_model": cpu,
            "load_avg_1m": round(os.getloadavg()[0], 2), "nice": os.nice(0)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_clients.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default=None, help="URL,URL of running llama.cpp servers (default: start two)")
    p.add_argument("--openai-requests", type=int, default=8, help="requests of each kind with the openai client")
    p.add_argument("--guidellm", default=shutil.which("guidellm"), help="guidellm's executable (skipped when none)")
    p.add_argument("--guidellm-requests", type=int, default=30, help="requests of each guidellm run")
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32, help="output tokens asked of each request")
    p.add_argument("--tokenizer-dir", type=Path, default=Path("out/bench/router/smollm2-tokenizer"))
    p.add_argument("--no-flatten", action="store_true",
                   help="the control: flatten_content off (llama-cpp-python's template then answers a list of parts "
                        "with a 500, which the router passes on)")
    p.add_argument("--out", type=Path, default=Path("out/bench/router/clients.json"))
    args = p.parse_args(argv)
    for name in ("openai_requests", "guidellm_requests", "prompt_tokens", "max_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)} -- fix: give a positive count")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stop (timeout, kill) still stops the servers
    logs = Path(tempfile.mkdtemp(prefix="bench-clients-"))
    procs: list[Server] = []
    try:
        if args.backends:
            urls = [u.strip().rstrip("/") for u in args.backends.split(",") if u.strip()]
        else:
            from lenpred.models import resolve

            gguf = str(resolve(ALIAS).gguf_path)
            procs += [llama_server(f"llama-{c}", gguf, logs) for c in "ab"]
            for s in procs:
                s.wait()
            urls = [s.url for s in procs]
        r = router(urls, logs, flatten=not args.no_flatten)
        procs.append(r)
        r.wait(120)
        result: dict[str, Any] = {"machine": machine(), "backends": urls, "logs": str(logs),
                                  "flatten_content": not args.no_flatten, "argv": sys.argv[1:],
                                  "health": httpx.get(r.url + "/health", timeout=10).status_code}
        result["openai"] = run_openai(r.url, args.openai_requests, args.max_tokens)
        if args.guidellm:
            tok = save_tokenizer(args.tokenizer_dir.resolve())
            result["guidellm"] = {fmt: run_guidellm(args.guidellm, r.url, fmt, args.guidellm_requests, tok,
                                                    args.prompt_tokens, args.max_tokens, logs)
                                  for fmt in ("/v1/chat/completions", "/v1/completions")}
        else:
            result["guidellm"] = "skipped: no guidellm executable (pip install guidellm; --guidellm PATH)"
        result["router"] = router_metrics(r.url)
    finally:
        for s in reversed(procs):
            s.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'client':<36} {'requests':>8} {'ok':>6} {'errors':>7}")
    for kind, f in result["openai"].items():
        print(f"{'openai ' + kind:<36} {f['requests']:>8} {f['ok']:>6} {f['errors']:>7}")
    if isinstance(result["guidellm"], dict):
        for fmt, g in result["guidellm"].items():
            if "error" in g:
                print(f"{'guidellm ' + fmt:<36} failed (rc {g['rc']}): {g['error'][-300:]}")
            else:
                n = g["successful"] + g["errored"] + g["incomplete"]
                print(f"{'guidellm ' + fmt:<36} {n:>8} {g['successful']:>6} {g['errored'] + g['incomplete']:>7}")
    else:
        print(result["guidellm"])
    print(f"router: {json.dumps(result['router'])}\nfigures: {args.out}; logs: {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
