"""Benchmarks of `lenpred route` on loopback: its overhead, its behaviour when a backend dies, and a real A/B.

    nice -n 15 .venv/bin/python -m benchmarks.bench_router overhead   # 200 concurrent streams, stub backends
    nice -n 15 .venv/bin/python -m benchmarks.bench_router fault      # 200 requests, one of two stubs killed
    nice -n 15 .venv/bin/python -m benchmarks.bench_router ab --head proxy=PATH --head ridge=PATH --sim

* **overhead**: two stub backends (benchmarks/route_stub.py: tokens at a fixed rate, each chunk stamped with the
  stub's monotonic clock), the same waves of concurrent streams sent once straight to the stubs and once
  through a router process. Added latency = router path minus direct path, for the first token (from
  the client's send) and for every chunk (arrival minus the stub's stamp), at p50 and p99; the router's
  CPU per request from /proc (user + system time of its process over its phase), and its garbage
  collections per generation from its /metrics (``router_gc``). ``--router-json`` adds config keys to
  the router's (``'{"gc": {"thresholds": [700, 10, 10]}}'``: Python's own collector settings).
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
A/B in router_ab.py; the machine's description, the table and the JSON in router_report.py; the
stub and server processes in benchmarks/route_procs.py. Each writes its figures as JSON (``--out``, default out/bench/router/<mode>.json) beside the printed table.
The CPU is shared on the development machines: run with ``nice`` and read the figures as upper bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.route_procs import RouterProcess, Stub
from benchmarks.router_ab import ab
from benchmarks.router_load import (
    chat_body,
    client,
    measure_stream,
    measure_unary,
    rounded,
    summary,
    waves,
)
from benchmarks.router_report import counter_sum, cpu_s, gc_pauses, hist_mean, machine, table, write_json


def _stub_router(stubs: list[Stub], logs: Path, **extra: Any) -> RouterProcess:
    cfg = {"backends": [{"url": s.url, "name": s.name} for s in stubs], "policy": "least-predicted-tokens",
           "log_requests": False, "health": {"interval_s": 0.5}, **extra}
    return RouterProcess(cfg, log_dir=logs)


# ---------------------------------------------------------------- overhead
def _prompts(run: str | None) -> list[str] | None:
    """The user messages of a run's prompts (distinct prompts for the router's predictor), or None."""
    if not run:
        return None
    import pyarrow.parquet as pq

    return [str(t) for t in pq.read_table(Path(run) / "prompts.parquet", columns=["text"]).column("text").to_pylist()]


def overhead(args: argparse.Namespace) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="bench-router-"))
    stubs = [Stub(n, log_dir=logs, tokens_per_s=args.rate, ttft_ms=args.ttft_ms).start() for n in ("a", "b")]
    router = _stub_router(stubs, logs, **json.loads(args.router_json))
    cores = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and len(cores) >= 2
    placement = ({"router": cores[-1:], "load_and_stubs": cores[:-1]} if pin else None)
    try:
        if placement:
            for pid in [0] + [s.pid for s in stubs]:
                os.sched_setaffinity(pid or 0, placement["load_and_stubs"])
        texts = _prompts(args.prompts)
        direct = summary(asyncio.run(waves([s.url for s in stubs], args.streams, args.rounds, args.tokens, args.ramp_s,
                                           texts)))
        router.start()
        assert router.pid is not None
        if placement:
            os.sched_setaffinity(router.pid, placement["router"])
        cpu0 = cpu_s(router.pid)
        recs = asyncio.run(waves([router.url], args.streams, args.rounds, args.tokens, args.ramp_s, texts))
        cpu = cpu_s(router.pid) - cpu0
        via = summary(recs)
        metrics = httpx.get(router.url + "/metrics").text
    finally:
        router.stop()
        for s in stubs:
            s.stop()
    internal = hist_mean(metrics, "lenpred_route_overhead_seconds")
    n = (args.rounds + 1) * args.streams  # CPU covers the warm-up wave too
    added = {k: {q: rounded((via[k][q] or 0) - (direct[k][q] or 0), 1, 3) for q in ("p50", "p99")}
             for k in ("first_token_ms", "per_chunk_ms")}
    res = {"bench": "router-overhead", "streams": args.streams, "rounds": args.rounds, "tokens": args.tokens,
           "router_config": json.loads(args.router_json), "prompts": args.prompts,
           "ramp_s": args.ramp_s, "placement": placement,
           "tokens_per_s": args.rate, "direct": direct, "router": via,
           "overhead_ms": {"first_token": added["first_token_ms"], "per_chunk": added["per_chunk_ms"]},
           "router_cpu_ms_per_request": rounded(cpu / n, 1e3, 2), "router_internal_ms_mean": rounded(internal, 1e3, 3),
           "router_gc": gc_pauses(metrics),
           "goal": "p99 added latency under 5 ms", "machine": machine()}
    rows = [[name, d["first_token_ms"]["p50"], d["first_token_ms"]["p99"], d["per_chunk_ms"]["p50"],
             d["per_chunk_ms"]["p99"], d["ok"]] for name, d in (("direct", direct), ("router", via))]
    rows.append(["added", added["first_token_ms"]["p50"], added["first_token_ms"]["p99"],
                 added["per_chunk_ms"]["p50"], added["per_chunk_ms"]["p99"], None])
    table(f"router overhead: {args.streams} concurrent streams x {args.rounds} waves, {args.tokens} tokens at "
           f"{args.rate:g} tokens/s (ms)", ["path", "first token p50", "p99", "per chunk p50", "p99", "ok"], rows)
    print(f"router CPU per request: {res['router_cpu_ms_per_request']} ms; its own time before forwarding "
          f"(read, parse, predict, dispatch): {res['router_internal_ms_mean']} ms mean")
    for gen, g in res["router_gc"].items():
        print(f"router GC generation {gen}: {g['count']} collections, mean {g['mean_ms']} ms, total {g['total_ms']} ms, "
              f"{g['over_1ms']} over 1 ms, {g['over_5ms']} over 5 ms")
    return res


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
           "rate_rps": args.rate, "tokens": args.tokens, "router_retries_metric": counter_sum(metrics, "lenpred_route_retries_total"),
           "failed_examples": sorted({r["error"] for r, k in zip(recs, kinds, strict=True) if k != "completed"})[:5],
           "goal": "0 lost", "machine": machine()}
    table(f"fault: {len(recs)} requests at {args.rate:g}/s through 2 stub backends, one SIGKILLed after "
           f"{res['kill_after']} were sent", ["requests", "completed", "retried", "failed cleanly", "lost"],
           [[res["requests"], res["completed"], res["retried"], res["failed_clean"], res["lost"]]])
    for e in res["failed_examples"]:
        print(f"  failed: {e}")
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
    o.add_argument("--router-json", default="{}", metavar="JSON",
                   help='more router config keys, e.g. \'{"gc": {"thresholds": [10000, 10, 10]}}\'')
    o.add_argument("--prompts", default=None, metavar="RUN",
                   help="send the prompts of this run directory in turn (distinct prompts: what a router-side "
                        "predictor sees); default one short prompt")
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
                        "every request sent on at once), recommended (before issue 37's default: the router's queue "
                        "ordered by priority.queue auto, least predicted tokens, max_outstanding = --slots), late "
                        "(the router's default now: one FCFS queue in the router, least-requests, max_outstanding = "
                        "--slots; no prediction), late-sjf (the same, the queue ordered by SJF with aging 100 on "
                        "each --head)")
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
    a.add_argument("--router-warmup", type=int, default=0,
                   help="requests sent through each arm's fresh router at the base rate before its measured ones "
                        "(not measured): a router serving for a while has calibrated gboost online")
    a.add_argument("--prompt-weight", type=float, default=0.5,
                   help="router prompt_weight (prefill work of a prompt token vs a generated one; llama.cpp on CPU)")
    a.add_argument("--threads", type=int, default=1, help="llama.cpp threads per server")
    a.add_argument("--n-ctx", type=int, default=2048)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--episode", default=None, metavar="PEAKxSECONDSs",
                   help="an overload episode instead of --rate/--requests, e.g. 1.3x60s: --base x --capacity req/s, "
                        "PEAK x capacity for SECONDS, then the base until the yardstick's tail ends (no --blocks)")
    a.add_argument("--capacity", type=float, default=None, help="--episode: the pair's capacity, requests/s")
    a.add_argument("--base", type=float, default=0.7, help="--episode: the base load, x capacity")
    a.add_argument("--episode-start", type=float, default=60.0, help="--episode: seconds at the base before the burst")
    a.add_argument("--priority-json", default="{}", metavar="JSON",
                   help="recommended arms: the router's priority section (its queue's order), e.g. "
                        "'{\"queue\": \"boost2\"}' (default: the router's default, priority.queue auto)")
    a.add_argument("--logs", default=None, help="folder for the servers' logs and configs")
    args = ap.parse_args(argv)
    # a SIGTERM (kill, a CI timeout) unwinds like Ctrl-C, so the servers, routers and stubs this run started are
    # stopped by their `finally`, not left running
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    res = {"overhead": overhead, "fault": fault, "ab": ab}[args.mode](args)
    write_json(Path(args.out or f"out/bench/router/{args.mode}.json"), res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
