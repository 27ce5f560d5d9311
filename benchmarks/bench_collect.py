"""Collection throughput of each engine available here: useful tokens/s, and the padding share.

"Useful" tokens are response tokens that end up in the run (no padding, no prompt). For ``hf`` the
padding share is the fraction of decode row-steps that carried no live sample; the engine refills
finished rows, and ``hf-generate`` (plain ``model.generate`` on static batches) is measured beside
it for comparison. ``openai`` talks to llama-cpp-python's server on loopback (one request at a
time there; vLLM would batch).

    python -m benchmarks.bench_collect --prompts 8 --samples 4 --max-new-tokens 256
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from lenpred.collect.base import Job, SamplingConfig, sample_seed
from lenpred.collect.hf import HFEngine
from lenpred.data.sources import PromptConfig, build_prompt_table
from lenpred.models import load, resolve

CARD = {"temperature": 1.0, "top_p": 1.0, "min_p": 0.1}


def _jobs(prompts, samples: int) -> list[Job]:
    return [
        Job(r.prompt_id, k, tuple(int(t) for t in r.prompt_token_ids), r.rendered, sample_seed(0, r.prompt_id, k))
        for r in prompts.itertuples()
        for k in range(samples)
    ]


def _time(engine, jobs) -> tuple[int, int, float]:
    t = time.perf_counter()
    n = tok = 0
    for r in engine.generate(iter(jobs)):
        n += 1
        tok += len(r.token_ids)
    return n, tok, time.perf_counter() - t


def _hf_generate(lm, jobs, sampling: SamplingConfig, batch: int) -> tuple[int, int, float, float]:
    """Static batches with model.generate (left padding): the baseline the refill engine replaces."""
    import torch

    tok = lm.tokenizer
    tok.padding_side = "left"
    t = time.perf_counter()
    n = useful = rows = 0
    for i in range(0, len(jobs), batch):
        chunk = jobs[i : i + batch]
        enc = tok.pad({"input_ids": [list(j.prompt_token_ids) for j in chunk]}, return_tensors="pt")
        torch.manual_seed(chunk[0].seed)
        out = lm.model.generate(
            **enc, do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, min_p=sampling.min_p or None,
            max_new_tokens=sampling.max_new_tokens, pad_token_id=tok.eos_token_id,
        )
        gen = out[:, enc["input_ids"].shape[1]:]
        steps = gen.shape[1]
        for row in gen.tolist():
            L = row.index(tok.eos_token_id) if tok.eos_token_id in row else len(row)
            useful += L
        rows += steps * len(chunk)
        n += len(chunk)
    dt = time.perf_counter() - t
    return n, useful, dt, 1 - useful / rows if rows else 0.0


def _server(gguf: Path, log: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16, help="hf rows / llamacpp sequences")
    ap.add_argument("--engines", nargs="*", default=["llamacpp", "hf", "hf-generate", "openai"])
    a = ap.parse_args()
    sampling = SamplingConfig.from_dict({"max_new_tokens": a.max_new_tokens, **CARD}, "sampling")
    lm = load()
    prompts, _ = build_prompt_table(PromptConfig(max_prompt_tokens=256), lm.tokenizer, a.prompts, 8192, a.max_new_tokens)
    jobs = _jobs(prompts, a.samples)
    rows = []
    for name in a.engines:
        pad = None
        if name == "hf":
            eng = HFEngine(lm.model, lm.tokenizer, sampling, batch_size=a.batch)
            n, tok, dt = _time(eng, jobs)
            pad = eng.padding_share
        elif name == "hf-generate":
            n, tok, dt, pad = _hf_generate(lm, jobs, sampling, a.batch)
        elif name == "llamacpp":
            try:
                from lenpred.collect.llamacpp import LlamaCppEngine, LlamaCppOptions
                eng = LlamaCppEngine(resolve("smollm2-135m").gguf_path, sampling, LlamaCppOptions(n_parallel=a.batch),
                                     max_prompt_tokens=256)
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"skip llamacpp: {e}")
                continue
            n, tok, dt = _time(eng, jobs)
            eng.close()
        elif name == "openai":
            from lenpred.collect.openai_engine import OpenAIEngine, OpenAIOptions

            with tempfile.TemporaryDirectory() as d:
                proc, url = _server(resolve("smollm2-135m").gguf_path, Path(d) / "server.log")
                try:
                    opts = OpenAIOptions(base_url=url, api_model="smollm2-135m", concurrency=4, n_per_request=1)
                    eng = OpenAIEngine(opts, sampling, lm.tokenizer)
                    n, tok, dt = _time(eng, jobs)
                    eng.close()
                finally:
                    proc.terminate()
                    proc.wait()
        else:
            raise SystemExit(f"unknown engine {name}")
        rows.append({"engine": name, "samples": n, "useful_tokens": tok, "seconds": round(dt, 1), "tokens_per_s": round(tok / dt, 1), "padding_share": None if pad is None else round(pad, 3)})
    t = Table(title=f"collection throughput: {a.prompts} ShareGPT prompts x {a.samples} samples, max_new_tokens={a.max_new_tokens}, batch {a.batch}, card {CARD}")
    for c in ("engine", "samples", "useful tokens", "seconds", "useful tok/s", "padding share"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["engine"], str(r["samples"]), str(r["useful_tokens"]), str(r["seconds"]), str(r["tokens_per_s"]), "-" if r["padding_share"] is None else f"{r['padding_share']:.1%}")
    Console().print(t)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
