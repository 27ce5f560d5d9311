"""Benchmarks of `lenpred route` on loopback: its overhead, its behaviour when a backend dies, and a real A/B.

    nice -n 15 .venv/bin/python benchmarks/bench_router.py overhead   # 200 concurrent streams, stub backends
    nice -n 15 .venv/bin/python benchmarks/bench_router.py fault      # 200 requests, one of two stubs killed
    nice -n 15 .venv/bin/python benchmarks/bench_router.py ab --head proxy=PATH --head ridge=PATH --sim

* **overhead**: two stub backends (tests/route/route_stub.py: tokens at a fixed rate, each chunk stamped with the
  stub's monotonic clock), the same waves of concurrent streams sent once straight to the stubs and once
  through a router process. Added latency = router path minus direct path, for the first token (from
  the client's send) and for every chunk (arrival minus the stub's stamp), at p50 and p99; the router's
  CPU per request from /proc (user + system time of its process over its phase).
* **fault**: 200 requests (3 of 4 streamed) at a fixed rate through a router over two stubs; stub a is
  SIGKILLed after half of them were sent. Each request is *completed* (the full, right content),
  *failed cleanly* (an OpenAI error body, or an SSE error event then [DONE]) or *lost* (anything else: an
  exception, a truncated stream without an error, wrong content, a hang past the client timeout);
  *retried* counts the completed ones that needed a second backend (x-lenpred-attempts > 1).
* **ab**: two llama.cpp servers (the embedded SmolLM2 GGUF), prompts of the reference run's test split
  sent as chat requests under the run's sampling card (a fixed seed per prompt, so every arm generates
  the same answers and only the scheduling differs), Poisson arrivals at ``--rate``; arms = round robin
  and least predicted outstanding tokens with each head (``--head NAME=DIR``, served by a ``lenpred
  serve`` process each) or the chars fallback. Reports short-request P99 latency (output below the
  median) and throughput; with ``--sim``, a latency profile fitted to calibration requests (sequential,
  straight to one server) and the simulator's figures for the same requests, predictions and policies.
  On a shared machine the servers' speed drifts by 10-25% over half an hour, as much as the policies
  differ: ``--blocks N`` cuts the requests into N blocks and runs every arm on each block, the order
  reversed every other block (A B B A ...), so the drift falls on every arm alike; the JSON then has
  per-block figures and the largest speed gap between two arms of one block.

The clients that measure (one stream or unary request, the overhead waves) are in router_load.py; the
stub and server processes in tests/route/route_procs.py. Each writes its figures as JSON (``--out``, default out/bench/router/<mode>.json) beside the printed table.
The CPU is shared on the development machines: run with ``nice`` and read the figures as upper bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "route"))  # the server processes
from route_procs import LlamaServer, RouterProcess, ServeProcess, Stub  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # when loaded by path (tests/bench_scripts.py)
from router_load import (  # noqa: E402
    chat_body,
    client,
    measure_stream,
    measure_unary,
    quantile,
    rounded,
    summary,
    waves,
)

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "cpu_model": _cpu_model(),
            "load_avg_1m": round(os.getloadavg()[0], 2), "nice": os.nice(0), "packages": _versions()}


def _versions() -> dict[str, str | None]:
    """What the router process runs on (it shares this environment): its HTTP client, and whether uvicorn
    finds uvloop and httptools."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in ("aiohttp", "uvicorn", "uvloop", "httptools"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _write(out: Path, obj: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(obj, indent=2) + "\n")
    print(f"figures: {out}")


def _table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for h in header:
        t.add_column(h, justify="right")
    for r in rows:
        t.add_row(*["-" if v is None else (f"{v:g}" if isinstance(v, float) else str(v)) for v in r])
    Console(width=140).print(t)


def _stub_router(stubs: list[Stub], logs: Path, **extra: Any) -> RouterProcess:
    cfg = {"backends": [{"url": s.url, "name": s.name} for s in stubs], "policy": "least-predicted-tokens",
           "log_requests": False, "health": {"interval_s": 0.5}, **extra}
    return RouterProcess(cfg, log_dir=logs)


# ---------------------------------------------------------------- overhead
def overhead(args: argparse.Namespace) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="bench-router-"))
    stubs = [Stub(n, log_dir=logs, tokens_per_s=args.rate, ttft_ms=args.ttft_ms).start() for n in ("a", "b")]
    router = _stub_router(stubs, logs)
    cores = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cores) >= 2
    placement = ({"router": cores[-1:], "load_and_stubs": cores[:-1]} if pin else None)
    try:
        if placement:
            for pid in [0] + [s.pid for s in stubs]:
                os.sched_setaffinity(pid or 0, placement["load_and_stubs"])
        direct = summary(asyncio.run(waves([s.url for s in stubs], args.streams, args.rounds, args.tokens, args.ramp_s)))
        router.start()
        assert router.pid is not None
        if placement:
            os.sched_setaffinity(router.pid, placement["router"])
        cpu0 = _cpu_s(router.pid)
        recs = asyncio.run(waves([router.url], args.streams, args.rounds, args.tokens, args.ramp_s))
        cpu = _cpu_s(router.pid) - cpu0
        via = summary(recs)
        metrics = httpx.get(router.url + "/metrics").text
    finally:
        router.stop()
        for s in stubs:
            s.stop()
    internal = _hist_mean(metrics, "lenpred_route_overhead_seconds")
    n = (args.rounds + 1) * args.streams  # CPU covers the warm-up wave too
    added = {k: {q: rounded((via[k][q] or 0) - (direct[k][q] or 0), 1, 3) for q in ("p50", "p99")}
             for k in ("first_token_ms", "per_chunk_ms")}
    res = {"bench": "router-overhead", "streams": args.streams, "rounds": args.rounds, "tokens": args.tokens,
           "ramp_s": args.ramp_s, "placement": placement,
           "tokens_per_s": args.rate, "direct": direct, "router": via,
           "overhead_ms": {"first_token": added["first_token_ms"], "per_chunk": added["per_chunk_ms"]},
           "router_cpu_ms_per_request": rounded(cpu / n, 1e3, 2), "router_internal_ms_mean": rounded(internal, 1e3, 3),
           "goal": "p99 added latency under 5 ms", "machine": _machine()}
    rows = [[name, d["first_token_ms"]["p50"], d["first_token_ms"]["p99"], d["per_chunk_ms"]["p50"],
             d["per_chunk_ms"]["p99"], d["ok"]] for name, d in (("direct", direct), ("router", via))]
    rows.append(["added", added["first_token_ms"]["p50"], added["first_token_ms"]["p99"],
                 added["per_chunk_ms"]["p50"], added["per_chunk_ms"]["p99"], None])
    _table(f"router overhead: {args.streams} concurrent streams x {args.rounds} waves, {args.tokens} tokens at "
           f"{args.rate:g} tokens/s (ms)", ["path", "first token p50", "p99", "per chunk p50", "p99", "ok"], rows)
    print(f"router CPU per request: {res['router_cpu_ms_per_request']} ms; its own time before forwarding "
          f"(read, parse, predict, dispatch): {res['router_internal_ms_mean']} ms mean")
    return res


def _hist_mean(text: str, name: str) -> float | None:
    s = c = None
    for line in text.splitlines():
        if line.startswith(name + "_sum"):
            s = float(line.split()[-1])
        elif line.startswith(name + "_count"):
            c = float(line.split()[-1])
    return s / c if s is not None and c else None


# ---------------------------------------------------------------- fault
def _classify(rec: dict[str, Any], n: int) -> str:
    want = "".join(f" t{i}" for i in range(n))
    if rec.get("lost"):
        return "lost"
    if rec["status"] == 200 and rec.get("done") and rec["error"] is None:
        return "completed" if "".join(rec["text"]) == want else "lost"
    if rec["error"] is not None and (rec["status"] != 200 or rec.get("done")):
        return "failed_clean"
    return "lost"


async def _fault_run(url: str, victim: Stub, n: int, rate: float, tokens: int, kill_after: int) -> list[dict]:
    async with client(n, 60) as c:
        tasks = []
        for i in range(n):
            if i == kill_after:
                victim.kill()
            stream = i % 4 != 3
            fn = measure_stream if stream else measure_unary
            tasks.append(asyncio.create_task(fn(c, url + "/v1/chat/completions", chat_body(tokens, stream))))
            await asyncio.sleep(1.0 / rate)
        recs = await asyncio.gather(*tasks)
    for i, r in enumerate(recs):
        r["stream"] = i % 4 != 3
        r["i"] = i
    return list(recs)


def fault(args: argparse.Namespace) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="bench-router-"))
    stubs = [Stub(n, log_dir=logs, tokens_per_s=args.rate_tokens, ttft_ms=20).start() for n in ("a", "b")]
    router = _stub_router(stubs, logs, timeouts={"read_s": 2.0, "total_s": 30.0}).start()
    try:
        recs = asyncio.run(_fault_run(router.url, stubs[0], args.requests, args.rate, args.tokens,
                                      args.kill_after if args.kill_after is not None else args.requests // 2))
        metrics = httpx.get(router.url + "/metrics").text
    finally:
        router.stop()
        for s in stubs:
            s.stop()
    kinds = [_classify(r, args.tokens) for r in recs]
    retried = sum(1 for r, k in zip(recs, kinds, strict=True)
                  if k == "completed" and int(r["headers"].get("x-lenpred-attempts", "1")) > 1)
    res = {"bench": "router-fault", "requests": len(recs), "completed": kinds.count("completed"), "retried": retried,
           "failed_clean": kinds.count("failed_clean"), "lost": kinds.count("lost"),
           "streamed": sum(r["stream"] for r in recs), "kill_after": args.kill_after or args.requests // 2,
           "rate_rps": args.rate, "tokens": args.tokens, "router_retries_metric": _counter_sum(metrics, "lenpred_route_retries_total"),
           "failed_examples": sorted({r["error"] for r, k in zip(recs, kinds, strict=True) if k != "completed"})[:5],
           "goal": "0 lost", "machine": _machine()}
    _table(f"fault: {len(recs)} requests at {args.rate:g}/s through 2 stub backends, one SIGKILLed after "
           f"{res['kill_after']} were sent", ["requests", "completed", "retried", "failed cleanly", "lost"],
           [[res["requests"], res["completed"], res["retried"], res["failed_clean"], res["lost"]]])
    for e in res["failed_examples"]:
        print(f"  failed: {e}")
    return res


def _counter_sum(text: str, name: str) -> float:
    return sum(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith(name + "{"))


# ---------------------------------------------------------------- A/B on two llama.cpp servers
def _workload(run_path: str, n: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split

    run = RunDir.open(run_path)
    prompts = run.prompts()
    test = set(load_split(run, require_complete=False).test)
    pool = prompts[prompts.prompt_id.isin(test)].sort_values("prompt_id").reset_index(drop=True)
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(pool))[:n]
    rows = [{"prompt_id": str(pool.prompt_id[i]), "text": str(pool.text[i]),
             "prompt_tokens": int(pool.n_prompt_tokens[i])} for i in idx]
    return rows, dict(run.card["sampling"])


def _ab_body(row: dict[str, Any], sampling: dict[str, Any], max_tokens: int, k: int, model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": row["text"]}], "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
            "temperature": sampling["temperature"], "top_p": sampling["top_p"], "min_p": sampling.get("min_p", 0.0),
            "frequency_penalty": sampling.get("frequency_penalty", 0.0), "seed": int(sampling.get("seed", 0)) + k}


async def _replay(url: str, rows: list[dict[str, Any]], arrivals: np.ndarray, sampling: dict[str, Any],
                  max_tokens: int, model: str, timeout: float, seed_offset: int = 0) -> list[dict[str, Any]]:
    async with client(len(rows), timeout) as c:
        t0 = time.monotonic()
        tasks = []
        for k, (row, at) in enumerate(zip(rows, arrivals, strict=True)):
            delay = t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(measure_stream(c, url + "/v1/chat/completions",
                                                     _ab_body(row, sampling, max_tokens, seed_offset + k, model))))
        recs = await asyncio.gather(*tasks)
    for r, row, at in zip(recs, rows, arrivals, strict=True):
        r["arrival_s"] = float(at)
        r["prompt_id"] = row["prompt_id"]
        r["output_tokens"] = (r.get("usage") or {}).get("completion_tokens", r.get("n", 0))
        r["prompt_tokens"] = (r.get("usage") or {}).get("prompt_tokens", row["prompt_tokens"])
        r["predicted"] = float(r["headers"].get("x-lenpred-predicted-tokens", "nan"))
        r["backend"] = r["headers"].get("x-lenpred-backend")
    return list(recs)


def _completed(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests that streamed to the end without an error (the ones every figure is computed from)."""
    return [r for r in recs if r.get("done") and r["error"] is None]


def _by_block(recs: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Records grouped by the block they ran in (``--blocks``; block 0 for a run without blocks), in block order."""
    out: dict[int, list[dict[str, Any]]] = {}
    for r in recs:
        out.setdefault(int(r.get("block", 0)), []).append(r)
    return dict(sorted(out.items()))


def _span(recs: list[dict[str, Any]]) -> float:
    """First send to last completion of the requests that completed (nan if none did)."""
    ok = _completed(recs)
    return max(r["t_send"] + r["e2e"] for r in ok) - min(r["t_send"] for r in recs) if ok else float("nan")


def _arm_figures(recs: list[dict[str, Any]], short_thr: float) -> dict[str, Any]:
    ok = _completed(recs)
    e2e = [r["e2e"] for r in ok]
    short = [r["e2e"] for r in ok if r["output_tokens"] < short_thr]
    span = _span(recs)
    toks = sum(r["output_tokens"] for r in ok)
    # the servers' own speed in this arm: tokens per second while a response streams (a llama.cpp server
    # answers one request at a time, so this is its service rate, free of queueing) -- if it differs
    # between arms, the machine changed under the A/B and the arms are not comparable
    speed = [(r["output_tokens"] - 1) / (r["e2e"] - r["first"]) for r in ok
             if r["first"] is not None and r["output_tokens"] > 8 and r["e2e"] > r["first"]]
    return {"requests": len(recs), "ok": len(ok), "short_p99_e2e_s": rounded(quantile(short, 0.99)),
            "decode_tok_s_median": rounded(quantile(speed, 0.5), 1, 2),
            "short_p50_e2e_s": rounded(quantile(short, 0.5)), "p99_e2e_s": rounded(quantile(e2e, 0.99)), "mean_e2e_s": rounded(statistics.fmean(e2e)) if e2e else None,
            "p99_ttft_s": rounded(quantile([r["first"] for r in ok if r["first"] is not None], 0.99)),
            "throughput_tok_s": rounded(toks / span, 1, 2), "throughput_req_s": rounded(len(ok) / span, 1, 4),
            "backends": {b: sum(1 for r in ok if r["backend"] == b) for b in sorted({str(r["backend"]) for r in ok})}}


def _utilization(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each server's busy share of the arm: a server that runs one request at a time (llama-cpp-python) and
    takes them in order of arrival serves request i from max(its arrival, the previous completion on that
    server) to its completion. Busy time / the arm's span = the load it carried (1.0 = saturated)."""
    ok = [r for r in _completed(recs) if r.get("backend")]
    if not ok:
        return {}
    t0 = min(r["t_send"] for r in recs)
    end = max(r["t_send"] + r["e2e"] for r in ok)
    out: dict[str, Any] = {}
    service: list[float] = []
    for b in sorted({r["backend"] for r in ok}):
        prev = -np.inf
        busy = 0.0
        for r in sorted((r for r in ok if r["backend"] == b), key=lambda r: r["t_send"] + r["e2e"]):
            done = r["t_send"] + r["e2e"]
            s = done - max(r["t_send"], prev)
            busy += s
            service.append(s)
            prev = done
        out[b] = rounded(busy / (end - t0), 1, 3)
    return {"per_server": out, "mean": rounded(float(np.mean(list(out.values()))), 1, 3),
            "mean_service_s": rounded(float(np.mean(service)), 1, 3)}


def block_schedule(arms: list[str], n: int, blocks: int) -> list[tuple[int, str, np.ndarray]]:
    """The A/B's running order: the requests cut into ``blocks`` consecutive parts, each part run by every arm
    in turn, the order reversed every other block (A B, B A, A B, ...): a slow drift of the machine then
    falls on every arm alike, where whole arms one after another (A B A) leave each arm its own stretch of
    time. Returns (block, arm, request indices)."""
    parts = np.array_split(np.arange(n), blocks)
    out = []
    for b, idx in enumerate(parts):
        for arm in (arms if b % 2 == 0 else arms[::-1]):
            out.append((b, arm, idx))
    return out


def _pooled_figures(recs: list[dict[str, Any]], short_thr: float) -> dict[str, Any]:
    """An arm's figures over its blocks: latencies pooled, throughput and busy share over the blocks' own
    spans (not the time between blocks, which other arms used)."""
    by_block = _by_block(recs)
    f = _arm_figures(recs, short_thr)
    if len(by_block) <= 1:
        return {**f, "utilization": _utilization(recs)}
    parts = [_utilization(rs) for rs in by_block.values()]
    span = [_span(rs) for rs in by_block.values()]
    toks = sum(r["output_tokens"] for r in _completed(recs))
    total = sum(x for x in span if x == x)
    f["throughput_tok_s"] = rounded(toks / total, 1, 2) if total else None
    f["throughput_req_s"] = rounded(f["ok"] / total, 1, 4) if total else None
    busy = [(u["mean"], x) for u, x in zip(parts, span, strict=True) if u.get("mean") is not None and x == x]
    f["utilization"] = {"mean": rounded(sum(u * x for u, x in busy) / sum(x for _, x in busy), 1, 3) if busy else None,
                        "per_block": [u.get("mean") for u in parts]}
    return f


def _paired(results: dict[str, list[dict[str, Any]]], short_thr: float) -> dict[str, Any]:
    """Per block, each arm's short-request P99 and its servers' speed; the largest speed gap between two arms
    that ran the same block next to each other (what drift could still do to the comparison)."""
    per = {arm: {b: _arm_figures(rs, short_thr) for b, rs in _by_block(recs).items()} for arm, recs in results.items()}
    arms = list(per)
    gaps = []
    for b in per[arms[0]]:
        sp = [per[a][b]["decode_tok_s_median"] for a in arms if b in per[a] and per[a][b]["decode_tok_s_median"]]
        if len(sp) >= 2:
            gaps.append(max(sp) / min(sp) - 1)
    wins = {}
    if len(arms) >= 2:
        base = arms[0]
        for a in arms[1:]:
            pairs = [(per[base][b]["short_p99_e2e_s"], per[a][b]["short_p99_e2e_s"]) for b in per[base] if b in per[a]]
            wins[a] = sum(1 for x, y in pairs if x is not None and y is not None and y < x)
    return {"short_p99_per_block": {a: [v["short_p99_e2e_s"] for v in per[a].values()] for a in arms},
            "speed_per_block": {a: [v["decode_tok_s_median"] for v in per[a].values()] for a in arms},
            "neighbour_speed_gap": rounded(max(gaps), 1, 3) if gaps else None,
            "blocks_won_vs_first_arm": wins}


def _calibrate(server: LlamaServer, rows: list[dict[str, Any]], sampling: dict[str, Any], model: str,
               n: int) -> list[dict[str, Any]]:
    """Sequential requests straight to one server: TTFT -> prefill timings, inter-token time -> decode timings."""
    async def go() -> list[dict[str, Any]]:
        out = []
        async with client(2, 600) as c:
            for k, row in enumerate(rows[:n]):
                rec = await measure_stream(c, server.url + "/v1/chat/completions", _ab_body(row, sampling, 48, 10_000 + k, model))
                if rec.get("done") and rec["first"] is not None and rec["n"] > 2:
                    p = (rec.get("usage") or {}).get("prompt_tokens", row["prompt_tokens"])
                    m = (rec.get("usage") or {}).get("completion_tokens", rec["n"])
                    out.append({"kind": "prefill", "seconds": rec["first"], "tokens": p, "tokens_sq": p * p})
                    out.append({"kind": "decode", "seconds": (rec["e2e"] - rec["first"]) / max(1, m - 1),
                                "batch": 1, "context": p + m // 2})
        return out

    return asyncio.run(go())


def _simulate(timings: list[dict[str, Any]], arms: dict[str, list[dict[str, Any]]], dispatch: dict[str, str],
              short_thr: float, folder: Path) -> dict[str, Any]:
    import pandas as pd

    from lenpred.sim.config import ClusterConfig, MetricsConfig, PolicyConfig, SimConfig
    from lenpred.sim.profiles import fit_profile
    from lenpred.sim.sweep import replay_config, run_sweep

    prof = fit_profile(timings, name="llamacpp-fitted", base="llama8b-h100")
    prof_path = folder / "llamacpp-fitted.json"
    prof_path.write_text(json.dumps(prof.describe(), indent=2))
    out: dict[str, Any] = {"profile": prof.describe(), "arms": {}}
    for name, recs in arms.items():
        ok = _completed(recs)
        pred = [r["predicted"] if r["predicted"] == r["predicted"] else float(r["output_tokens"]) for r in ok]
        table = folder / f"requests-{name}.csv"
        pd.DataFrame({"arrival_s": [r["arrival_s"] for r in ok], "prompt_tokens": [r["prompt_tokens"] for r in ok],
                      "output_tokens": [max(1, r["output_tokens"]) for r in ok],
                      "predicted_tokens": pred}).to_csv(table, index=False)
        cfg = SimConfig(name=f"ab-{name}", cluster=ClusterConfig(mode="colocated", n_instances=2,
                                                                 profile=str(prof_path), max_batch=1),
                        policies=(PolicyConfig(name=name, queue="fcfs", dispatch=dispatch[name]),),
                        metrics=MetricsConfig(short_threshold=short_thr), plots=False)
        cfg, wl = replay_config(cfg, table)
        s = run_sweep(cfg, workload=wl).runs[0].summary
        out["arms"][name] = {"short_p99_e2e_s": rounded(s["latency"]["short"]["e2e"]["p99"]),
                             "p99_e2e_s": rounded(s["latency"]["all"]["e2e"]["p99"]) if "all" in s["latency"] else None}
    return out


def ab(args: argparse.Namespace) -> dict[str, Any]:
    logs = Path(args.logs or tempfile.mkdtemp(prefix="bench-router-ab-"))
    rows, sampling = _workload(args.run, args.requests, args.seed)
    max_tokens = args.max_tokens or int(sampling["max_new_tokens"])
    rng = np.random.default_rng(args.seed + 1)
    arrivals = np.cumsum(rng.exponential(1.0 / args.rate, len(rows)))
    arrivals -= arrivals[0]
    heads = dict(h.split("=", 1) for h in args.head)
    servers = [LlamaServer(n, log_dir=logs, threads=args.threads, n_ctx=args.n_ctx) for n in ("a", "b")]
    serves: dict[str, ServeProcess] = {}
    kinds = [k.strip() for k in args.arms.split(",") if k.strip()]
    unknown = sorted(set(kinds) - {"rr", "lpt", "recommended"})
    if unknown:
        raise SystemExit(f"bench_router ab: unknown arm kind {unknown[0]!r} -- fix: use rr, lpt, recommended")
    arms: dict[str, dict[str, Any]] = {}
    if "rr" in kinds:  # FCFS + round robin: each server's own arrival order
        arms["round-robin"] = {"policy": "round-robin", "estimator": {"kind": "chars"}}
        if args.same_estimator and heads:  # the head's prediction is made (and costs its CPU) in every arm
            arms["round-robin"] = {"policy": "round-robin", "head": next(iter(heads))}
    for name in heads:
        if "lpt" in kinds:  # least predicted outstanding tokens, every request sent on at once
            arms[f"lpt-{name}"] = {"policy": "least-predicted-tokens", "head": name}
        if "recommended" in kinds:  # the router's defaults (FCFS queue, lpt) with its queue in front of the slots
            arms[f"recommended-{name}"] = {"policy": "least-predicted-tokens", "head": name, "slots": args.slots}
    if "lpt" in kinds and (args.chars_arm or not heads):
        arms["lpt-chars"] = {"policy": "least-predicted-tokens", "estimator": {"kind": "chars"}}
    if not arms:
        raise SystemExit("bench_router ab: no arm to run -- fix: --arms rr,... and a --head for lpt/recommended")
    if args.blocks < 1 or args.blocks > len(rows):
        raise SystemExit(f"bench_router ab: --blocks {args.blocks} -- fix: between 1 and --requests ({len(rows)})")
    if args.blocks > 1 and args.repeat_first:
        raise SystemExit("bench_router ab: --blocks and --repeat-first both guard against drift -- fix: use one of them")
    if args.repeat_first:  # A B C ... A: a drift of the machine during the A/B shows in the two A runs
        first = next(iter(arms))
        arms[f"{first}-again"] = dict(arms[first])
    schedule = block_schedule(list(arms), len(rows), args.blocks)
    results: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    timings: list[dict[str, Any]] = []
    try:
        for s in servers:
            s.start()
        for name, path in heads.items():
            serves[name] = ServeProcess(path, name=name, log_dir=logs)
            serves[name].start()
        for s in servers:  # warm each server (its first requests run slower: page cache, allocations)
            _calibrate(s, rows[::-1], sampling, s.alias, args.warmup)
        if args.sim:
            timings = _calibrate(servers[0], rows[::-1], sampling, servers[0].alias, args.calib)
        for block, arm, idx in schedule:
            spec = arms[arm]
            est = spec.get("estimator") or {"kind": "remote", "url": serves[spec["head"]].url, "timeout_s": 5.0}
            # "recommended": the router's own defaults (priority.queue fcfs, no field sent), max_outstanding = the
            # server's slots, so requests wait in the router's queue and go to whichever server frees first
            slots = spec.get("slots", 1024)
            cfg = {"backends": [{"url": s.url, "name": s.name, "priority": "off", "max_outstanding": slots}
                                for s in servers],
                   "policy": spec["policy"], "estimator": est, "log_requests": True,
                   "prompt_weight": args.prompt_weight,
                   "timeouts": {"read_s": 600.0, "total_s": 3600.0},
                   "limits": {"max_queued": 4096, "queue_timeout_s": 3600.0},
                   "health": {"interval_s": 2.0, "timeout_s": 5.0}}
            tag = arm if args.blocks == 1 else f"{arm}-block{block}"
            with RouterProcess(cfg, name=tag, log_dir=logs, log_level="info") as router:
                print(f"arm {tag}: {len(idx)} requests at {args.rate:g}/s ...", file=sys.stderr, flush=True)
                recs = asyncio.run(_replay(router.url, [rows[i] for i in idx], arrivals[idx] - arrivals[idx[0]],
                                           sampling, max_tokens, servers[0].alias, timeout=3600, seed_offset=int(idx[0])))
                for r in recs:
                    r["block"] = block
                results[arm].extend(recs)
    finally:
        for p in [*serves.values(), *servers]:
            p.stop()
    outs = [r["output_tokens"] for recs in results.values() for r in recs if r.get("done")]
    short_thr = float(np.median(outs)) if outs else 0.0
    figs = {arm: _pooled_figures(recs, short_thr) for arm, recs in results.items()}
    with open(logs / "requests.jsonl", "w") as f:  # every request of every arm, for figures computed later
        for arm, recs in results.items():
            for r in recs:
                f.write(json.dumps({"arm": arm, **{k: v for k, v in r.items() if k not in ("text", "lags", "headers")},
                                    "backend": r.get("backend")}) + "\n")
    speeds = {arm: f["decode_tok_s_median"] for arm, f in figs.items() if f["decode_tok_s_median"]}
    drift = (max(speeds.values()) / min(speeds.values()) - 1) if speeds else None
    # offered load against the pair's decode capacity (2 servers x their streaming speed; prefill not
    # counted, so the true load is a little higher than this figure)
    mean_out = float(np.mean(outs)) if outs else float("nan")
    cap = 2 * float(np.median(list(speeds.values()))) / mean_out if speeds and outs else float("nan")
    res: dict[str, Any] = {"bench": "router-ab", "args": {k: v for k, v in vars(args).items() if k != "out"}, "server_speed_spread": rounded(drift, 1, 3), "requests": len(rows), "rate_rps": args.rate,
                           "max_tokens": max_tokens, "short_threshold_tokens": short_thr, "arms": figs,
                           "mean_output_tokens": rounded(mean_out, 1, 1), "decode_capacity_req_s": rounded(cap, 1, 4),
                           "load_vs_decode_capacity": rounded(args.rate / cap, 1, 3) if cap == cap else None,
                           "heads": heads, "run": args.run, "prompt_weight": args.prompt_weight, "machine": _machine(), "logs": str(logs)}
    if args.blocks > 1:
        res["blocks"] = {"n": args.blocks, "order": [[b, a] for b, a, _ in schedule], **_paired(results, short_thr)}
    if args.sim and timings:
        res["sim"] = _simulate(timings, results, {a: s["policy"] for a, s in arms.items()}, short_thr, logs)
    rows_t = []
    for arm, f in figs.items():
        sim = ((res.get("sim") or {}).get("arms") or {}).get(arm, {})
        rows_t.append([arm, f["ok"], f["short_p99_e2e_s"], sim.get("short_p99_e2e_s"), f["p99_e2e_s"],
                       f["throughput_tok_s"], f["throughput_req_s"], json.dumps(f["backends"])])
    _table(f"A/B: two llama.cpp servers, {len(rows)} ShareGPT test prompts at {args.rate:g} req/s, short = output "
           f"< {short_thr:g} tokens", ["arm", "ok", "short P99 e2e (s)", "sim short P99", "P99 e2e (s)",
                                       "tokens/s", "req/s", "per backend"], rows_t)
    print("servers' decode speed per arm (tokens/s while streaming): "
          + ", ".join(f"{a} {v:g}" for a, v in speeds.items()))
    utils = {a: f["utilization"].get("mean") for a, f in figs.items()}
    print("servers' busy share per arm (the load they carried; 0.9-1.0 = near capacity): "
          + ", ".join(f"{a} {u}" for a, u in utils.items()))
    if cap == cap:
        print(f"offered load: {args.rate:g} req/s x {mean_out:.0f} tokens = {args.rate / cap:.2f} x the pair's decode "
              f"capacity ({cap:.3f} req/s; prefill not counted)")
    if args.blocks > 1:
        pb = res["blocks"]
        print(f"{args.blocks} blocks, arms interleaved {' '.join(a for _, a in res['blocks']['order'])}: short P99 "
              "per block " + "; ".join(f"{a} " + ", ".join("-" if v is None else f"{v:g}" for v in vals)
                                                    for a, vals in pb["short_p99_per_block"].items()))
        print("servers' speed, neighbouring blocks of two arms (the drift the interleaving cancels): largest gap "
              f"{pb['neighbour_speed_gap']}")
    if drift is not None and drift > 0.05:
        print(f"warning: the servers' speed differed by {100 * drift:.0f}% between arms: the machine changed "
              "under the A/B (other load, clock); compare arms of equal speed only, or rerun on a quiet host")
    return res


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", default=None, help="JSON figures (default out/bench/router/<mode>.json)")
    o = sub.add_parser("overhead", parents=[common], help="added latency and CPU of the router (stub backends)")
    o.add_argument("--streams", type=int, default=200)
    o.add_argument("--rounds", type=int, default=3, help="measured waves of --streams concurrent streams")
    o.add_argument("--tokens", type=int, default=32, help="tokens per stream")
    o.add_argument("--rate", type=float, default=10.0, help="tokens per second per stream")
    o.add_argument("--ttft-ms", type=float, default=50.0)
    o.add_argument("--ramp-s", type=float, default=1.0, help="the streams of a wave start evenly over this time")
    o.add_argument("--no-pin", action="store_true",
                   help="do not give the router a core of its own (default on 2+ cores: the load generator and "
                        "the stubs share the other cores, for both paths, so the router never waits for a core "
                        "they hold: what a router host with its own cores sees)")
    f = sub.add_parser("fault", parents=[common], help="one of two backends killed mid-run")
    f.add_argument("--requests", type=int, default=200)
    f.add_argument("--rate", type=float, default=50.0, help="requests per second")
    f.add_argument("--tokens", type=int, default=20)
    f.add_argument("--rate-tokens", type=float, default=50.0, help="tokens per second per stream")
    f.add_argument("--kill-after", type=int, default=None, help="kill stub a after this many requests (n/2)")
    a = sub.add_parser("ab", parents=[common], help="round robin vs least predicted tokens on two llama.cpp servers")
    a.add_argument("--run", default="data/runs/smollm2-sharegpt")
    a.add_argument("--requests", type=int, default=200)
    a.add_argument("--rate", type=float, default=0.35, help="requests per second (near the pair's capacity)")
    a.add_argument("--max-tokens", type=int, default=None, help="default: the run card's max_new_tokens")
    a.add_argument("--head", action="append", default=[], metavar="NAME=DIR", help="a head for an lpt arm")
    a.add_argument("--arms", default="rr,lpt",
                   help="arm kinds, comma-separated: rr (FCFS + round robin), lpt (least predicted tokens per --head, "
                        "every request sent on at once), recommended (the router's default policy, FCFS queue + "
                        "least predicted tokens, with max_outstanding = --slots: the queue forms in the router)")
    a.add_argument("--slots", type=int, default=1,
                   help="recommended arms: requests a server runs at once (llama-cpp-python: 1; llama.cpp: -np)")
    a.add_argument("--same-estimator", action="store_true",
                   help="the round-robin arm asks the first --head too (ignoring the answer): every arm then pays the "
                        "prediction's CPU on the shared cores, and only the policy differs")
    a.add_argument("--chars-arm", action="store_true", help="also least predicted tokens with the chars estimate")
    a.add_argument("--sim", action="store_true", help="fit a latency profile and add the simulator's figures")
    a.add_argument("--repeat-first", action="store_true",
                   help="run the round-robin arm again at the end (A B ... A), to see a drift of the machine")
    a.add_argument("--blocks", type=int, default=1,
                   help="cut the requests into this many blocks and run every arm on each block, the order reversed "
                        "every other block (A B B A ...): drift of a shared machine falls on every arm alike")
    a.add_argument("--calib", type=int, default=12, help="--sim: calibration requests")
    a.add_argument("--warmup", type=int, default=2, help="requests sent straight to each server before the first arm")
    a.add_argument("--prompt-weight", type=float, default=0.5,
                   help="router prompt_weight (prefill work of a prompt token vs a generated one; llama.cpp on CPU)")
    a.add_argument("--threads", type=int, default=1, help="llama.cpp threads per server")
    a.add_argument("--n-ctx", type=int, default=2048)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--logs", default=None, help="folder for the servers' logs and configs")
    args = ap.parse_args(argv)
    # a SIGTERM (kill, a CI timeout) unwinds like Ctrl-C, so the servers, routers and stubs this run started are
    # stopped by their `finally`, not left running
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    res = {"overhead": overhead, "fault": fault, "ab": ab}[args.mode](args)
    _write(Path(args.out or f"out/bench/router/{args.mode}.json"), res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
