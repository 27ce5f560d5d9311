"""``bench_router.py ab``: round robin vs least predicted tokens through ``lenpred route`` on two llama.cpp
servers (the mode is described in bench_router.py's docstring): the workload drawn from a run's test split,
the arms, their running order in blocks, the replay through one router per arm and block, and the figures
(per arm, pooled over blocks, paired per block, and the simulator's for the same requests with ``--sim``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.route_procs import LlamaServer, RouterProcess, ServeProcess
from benchmarks.router_load import client, measure_stream, quantile, rounded
from benchmarks.router_report import machine, table

__all__ = ["ARM_KINDS", "ab", "block_schedule", "short_prompts"]

# --arms: rr (FCFS + round robin), lpt (least predicted tokens, sent at once), recommended (lpt behind the
# router's queue, the default before issue 37), late (the default now: late-binding FCFS, no prediction),
# late-sjf (late binding, the queue ordered by a head's prediction, SJF with aging 100)
ARM_KINDS = ("rr", "lpt", "recommended", "late", "late-sjf")


@dataclass(frozen=True)
class Send:
    """How every request of the A/B is sent: the run's sampling card, the output cap, the model name, and
    the client's timeout."""

    sampling: dict[str, Any]
    max_tokens: int
    model: str
    timeout: float


def _workload(run_path: str, n: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split

    run = RunDir.open(run_path)
    prompts = run.prompts()
    test = set(load_split(run, require_complete=False).test)
    pool = prompts[prompts.prompt_id.isin(test)].sort_values("prompt_id").reset_index(drop=True)
    rng = np.random.default_rng(seed)
    # more requests than test prompts (a long episode): the permutation again (each request its own seed)
    idx = np.resize(rng.permutation(len(pool)), n)
    short = short_prompts(run, test)
    rows = [{"prompt_id": str(pool.prompt_id[i]), "text": str(pool.text[i]),
             "prompt_tokens": int(pool.n_prompt_tokens[i]), "short": short.get(str(pool.prompt_id[i]))}
            for i in idx]
    return rows, dict(run.card["sampling"])


def short_prompts(run: Any, test: set[str]) -> dict[str, bool]:
    """Which test prompts are "short", fixed before any arm runs, from the prompt set alone: a prompt whose
    median sampled length in the run is below the median of all the test split's samples (issue 37 part 5:
    not from each arm's completed outputs, which differ between arms and draws)."""
    s = run.samples(columns=["prompt_id", "n_tokens"])
    s = s[s.prompt_id.astype(str).isin(test)]
    if s.empty:
        return {}
    thr = float(np.median(s.n_tokens))
    med = s.groupby(s.prompt_id.astype(str)).n_tokens.median()
    return {pid: bool(m < thr) for pid, m in med.items()}


def _ab_body(row: dict[str, Any], sampling: dict[str, Any], max_tokens: int, k: int, model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": row["text"]}], "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
            "temperature": sampling["temperature"], "top_p": sampling["top_p"], "min_p": sampling.get("min_p", 0.0),
            "frequency_penalty": sampling.get("frequency_penalty", 0.0), "seed": int(sampling.get("seed", 0)) + k}


async def _replay(url: str, rows: list[dict[str, Any]], arrivals: np.ndarray, send: Send,
                  seed_offset: int = 0) -> list[dict[str, Any]]:
    sampling, max_tokens, model = send.sampling, send.max_tokens, send.model
    async with client(len(rows), send.timeout) as c:
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
        r["short_fixed"] = row.get("short")
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
    fixed = [r["e2e"] for r in ok if r.get("short_fixed")]
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
            # "short" fixed in advance from the prompt set (short_prompts): the same requests in every arm
            "short_fixed_n": len(fixed), "short_fixed_p99_e2e_s": rounded(quantile(fixed, 0.99)),
            "short_fixed_p50_e2e_s": rounded(quantile(fixed, 0.5)), "p50_e2e_s": rounded(quantile(e2e, 0.5)),
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


@dataclass
class Plan:
    """One A/B: the parsed arguments, the requests and their arrival times, the arms and their order."""

    args: argparse.Namespace
    logs: Path
    rows: list[dict[str, Any]]
    sampling: dict[str, Any]
    max_tokens: int
    arrivals: np.ndarray
    heads: dict[str, str]
    arms: dict[str, dict[str, Any]]
    schedule: list[tuple[int, str, np.ndarray]]


def _arms(args: argparse.Namespace, heads: dict[str, str], n: int) -> dict[str, dict[str, Any]]:
    """The arms to run (name -> policy and estimator or head), from ``--arms`` and ``--head``; a bad choice of
    arms, blocks or repeats exits with one line."""
    kinds = [k.strip() for k in args.arms.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(ARM_KINDS))
    if unknown:
        raise SystemExit(f"bench_router ab: unknown arm kind {unknown[0]!r} -- fix: use {', '.join(ARM_KINDS)}")
    if "late-sjf" in kinds and not heads:
        raise SystemExit("bench_router ab: the late-sjf arm orders its queue by a prediction -- fix: give a --head")
    arms: dict[str, dict[str, Any]] = {}
    if "late" in kinds:  # the router's default (issue 37): one FCFS queue, sent to the least loaded free server
        arms["late"] = {"policy": "least-requests", "estimator": {"kind": "none"}, "slots": args.slots, "priority": {}}
    if "rr" in kinds:  # FCFS + round robin: each server's own arrival order
        arms["round-robin"] = {"policy": "round-robin", "estimator": {"kind": "chars"}}
        if args.same_estimator and heads:  # the head's prediction is made (and costs its CPU) in every arm
            arms["round-robin"] = {"policy": "round-robin", "head": next(iter(heads))}
    for name in heads:
        if "lpt" in kinds:  # least predicted outstanding tokens, every request sent on at once
            arms[f"lpt-{name}"] = {"policy": "least-predicted-tokens", "head": name}
        if "recommended" in kinds:  # the router's defaults (queue auto: gboost on a head, lpt) in front of the slots
            arms[f"recommended-{name}"] = {"policy": "least-predicted-tokens", "head": name, "slots": args.slots}
        if "late-sjf" in kinds:  # the same late binding, the queue ordered by the head (the yardstick's best real arm)
            arms[f"late-sjf-{name}"] = {"policy": "least-requests", "head": name, "slots": args.slots,
                                        "priority": {"queue": {"name": "sjf", "aging": 100}}}
    if "lpt" in kinds and (args.chars_arm or not heads):
        arms["lpt-chars"] = {"policy": "least-predicted-tokens", "estimator": {"kind": "chars"}}
    if not arms:
        raise SystemExit("bench_router ab: no arm to run -- fix: --arms rr,... and a --head for lpt/recommended")
    if args.blocks < 1 or args.blocks > n:
        raise SystemExit(f"bench_router ab: --blocks {args.blocks} -- fix: between 1 and --requests ({n})")
    if args.blocks > 1 and args.repeat_first:
        raise SystemExit("bench_router ab: --blocks and --repeat-first both guard against drift -- fix: use one of them")
    if args.repeat_first:  # A B C ... A: a drift of the machine during the A/B shows in the two A runs
        first = next(iter(arms))
        arms[f"{first}-again"] = dict(arms[first])
    return arms


def episode_arrivals(args: argparse.Namespace, rng: np.random.Generator) -> np.ndarray:
    """``--episode PEAKxBURSTs``: Poisson arrivals at ``--base`` x ``--capacity`` requests/s, ``PEAK`` x
    capacity for ``BURST`` seconds from ``--episode-start``, then the base again for the yardstick's tail
    (:func:`lenpred.sim.yardstick.tail_for`); no arrival after it. Sets ``args.rate`` to the base rate."""
    from lenpred.sim.episode import Episode
    from lenpred.sim.yardstick import tail_for

    m = re.fullmatch(r"([0-9.]+)x([0-9.]+)s", args.episode.strip())
    if m is None:
        raise SystemExit(f"bench_router ab: --episode {args.episode!r} -- fix: PEAKxSECONDSs, e.g. 1.3x60s")
    peak, burst = float(m[1]), float(m[2])
    if not (args.capacity and args.capacity > 0):
        raise SystemExit("bench_router ab: --episode needs --capacity -- fix: the pair's capacity in requests/s "
                         "(an A/B's decode_capacity_req_s)")
    if not (0 < args.base < 1 and peak >= args.base and burst > 0):
        raise SystemExit(f"bench_router ab: --base {args.base:g} / peak {peak:g} -- fix: 0 < base < 1, peak >= base")
    if args.blocks != 1 or args.repeat_first:
        raise SystemExit("bench_router ab: an episode is run whole by each arm -- fix: drop --blocks/--repeat-first "
                         "and interleave arms across draws (--seed: odd seeds run the arms in reverse order)")
    args.rate = args.base * args.capacity
    ep = Episode(peak / args.base, args.episode_start, burst, tail_for(args.base, peak, burst))
    t = ep.times(np.cumsum(rng.exponential(1.0, ep.requests_needed(args.rate))), args.rate)
    return t[t <= ep.end]


def _plan(args: argparse.Namespace) -> Plan:
    logs = Path(args.logs or tempfile.mkdtemp(prefix="bench-router-ab-"))
    rng = np.random.default_rng(args.seed + 1)
    if args.episode:
        arrivals = episode_arrivals(args, rng)
    else:
        arrivals = np.cumsum(rng.exponential(1.0 / args.rate, args.requests))
        arrivals -= arrivals[0]
    rows, sampling = _workload(args.run, len(arrivals), args.seed)
    max_tokens = args.max_tokens or int(sampling["max_new_tokens"])
    heads = dict(h.split("=", 1) for h in args.head)
    arms = _arms(args, heads, len(rows))
    names = list(arms)[::-1] if args.episode and args.seed % 2 else list(arms)  # draws alternate A B / B A
    return Plan(args, logs, rows, sampling, max_tokens, arrivals, heads, arms,
                block_schedule(names, len(rows), args.blocks))


def _router_cfg(plan: Plan, spec: dict[str, Any], servers: list[LlamaServer],
                serves: dict[str, ServeProcess]) -> dict[str, Any]:
    """One arm's router config over the two servers."""
    est = spec.get("estimator") or {"kind": "remote", "url": serves[spec["head"]].url, "timeout_s": 5.0}
    # "recommended": the router's own defaults (priority.queue auto: gboost calibrated online after a head's
    # prediction, no field sent), max_outstanding = the server's slots, so requests wait in the router's
    # queue and go to whichever server frees first
    slots = spec.get("slots", 1024)
    prio = spec["priority"] if "priority" in spec else json.loads(plan.args.priority_json) if "slots" in spec else {}
    return {"backends": [{"url": s.url, "name": s.name, "priority": "off", "max_outstanding": slots}
                         for s in servers], "priority": prio,
            "policy": spec["policy"], "estimator": est, "log_requests": True,
            "prompt_weight": plan.args.prompt_weight,
            "timeouts": {"read_s": 600.0, "total_s": 3600.0},
            "limits": {"max_queued": 4096, "queue_timeout_s": 3600.0},
            "health": {"interval_s": 2.0, "timeout_s": 5.0}}


def _run_arms(plan: Plan) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Start the servers and prediction services, warm (and with ``--sim`` time) the servers, then run every
    arm on every block through a router of its own. Returns each arm's request records and the timings."""
    args, rows, arrivals = plan.args, plan.rows, plan.arrivals
    servers = [LlamaServer(n, log_dir=plan.logs, threads=args.threads, n_ctx=args.n_ctx) for n in ("a", "b")]
    serves: dict[str, ServeProcess] = {}
    results: dict[str, list[dict[str, Any]]] = {a: [] for a in plan.arms}
    timings: list[dict[str, Any]] = []
    try:
        for s in servers:
            s.start()
        for name, path in plan.heads.items():
            serves[name] = ServeProcess(path, name=name, log_dir=plan.logs)
            serves[name].start()
        for s in servers:  # warm each server (its first requests run slower: page cache, allocations)
            _calibrate(s, rows[::-1], plan.sampling, s.alias, args.warmup)
        if args.sim:
            timings = _calibrate(servers[0], rows[::-1], plan.sampling, servers[0].alias, args.calib)
        send = Send(plan.sampling, plan.max_tokens, servers[0].alias, timeout=3600)
        for block, arm, idx in plan.schedule:
            cfg = _router_cfg(plan, plan.arms[arm], servers, serves)
            tag = arm if args.blocks == 1 else f"{arm}-block{block}"
            with RouterProcess(cfg, name=tag, log_dir=plan.logs, log_level="info") as router:
                _warm_router(router.url, plan, send)
                what = f"an episode {args.episode} from {args.rate:g}/s" if args.episode else f"{args.rate:g}/s"
                print(f"arm {tag}: {len(idx)} requests at {what} ...", file=sys.stderr, flush=True)
                recs = asyncio.run(_replay(router.url, [rows[i] for i in idx], arrivals[idx] - arrivals[idx[0]],
                                           send, seed_offset=int(idx[0])))
                for r in recs:
                    r["block"] = block
                results[arm].extend(recs)
                _say_router_state(router.url, tag)
    finally:
        for p in [*serves.values(), *servers]:
            p.stop()
    return results, timings


def _warm_router(url: str, plan: Plan, send: Send) -> None:
    """``--router-warmup`` requests through a fresh router at the base rate, not measured: a router serving
    for a while has calibrated what it measures online (gboost's gamma and seconds per token); a router
    started for the arm has not."""
    n = plan.args.router_warmup
    if n <= 0:
        return
    rows = plan.rows[::-1][:n]
    at = np.arange(len(rows)) / plan.args.rate
    print(f"router warm-up: {len(rows)} requests at {plan.args.rate:g}/s (not measured) ...", file=sys.stderr,
          flush=True)
    asyncio.run(_replay(url, rows, at, send, seed_offset=10**6))


def _say_router_state(url: str, tag: str) -> None:
    """The router's queue and, for gboost, its online calibration at the end of an arm (on stderr)."""
    import httpx

    try:
        h = httpx.get(url + "/healthz", timeout=5.0).json()
    except (httpx.HTTPError, ValueError) as e:
        print(f"arm {tag}: /healthz unreadable ({e})", file=sys.stderr, flush=True)
        return
    print(f"arm {tag}: router queue {h.get('queue')}, gboost {json.dumps(h.get('gboost'))}", file=sys.stderr,
          flush=True)


def _write_requests(folder: Path, results: dict[str, list[dict[str, Any]]]) -> None:
    with open(folder / "requests.jsonl", "w") as f:  # every request of every arm, for figures computed later
        for arm, recs in results.items():
            for r in recs:
                f.write(json.dumps({"arm": arm, **{k: v for k, v in r.items() if k not in ("text", "lags", "headers")},
                                    "backend": r.get("backend")}) + "\n")


def _figures(plan: Plan, results: dict[str, list[dict[str, Any]]],
             timings: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The A/B's JSON figures from every arm's records (and requests.jsonl written beside the logs), and the
    unrounded figures the printed lines use."""
    args = plan.args
    outs = [r["output_tokens"] for recs in results.values() for r in recs if r.get("done")]
    short_thr = float(np.median(outs)) if outs else 0.0
    figs = {arm: _pooled_figures(recs, short_thr) for arm, recs in results.items()}
    _write_requests(plan.logs, results)
    speeds = {arm: f["decode_tok_s_median"] for arm, f in figs.items() if f["decode_tok_s_median"]}
    drift = (max(speeds.values()) / min(speeds.values()) - 1) if speeds else None
    # offered load against the pair's decode capacity (2 servers x their streaming speed; prefill not
    # counted, so the true load is a little higher than this figure)
    mean_out = float(np.mean(outs)) if outs else float("nan")
    cap = 2 * float(np.median(list(speeds.values()))) / mean_out if speeds and outs else float("nan")
    res: dict[str, Any] = {"bench": "router-ab", "args": {k: v for k, v in vars(args).items() if k != "out"}, "server_speed_spread": rounded(drift, 1, 3), "requests": len(plan.rows), "rate_rps": args.rate,
                           "max_tokens": plan.max_tokens, "short_threshold_tokens": short_thr, "arms": figs,
                           "mean_output_tokens": rounded(mean_out, 1, 1), "decode_capacity_req_s": rounded(cap, 1, 4),
                           "load_vs_decode_capacity": rounded(args.rate / cap, 1, 3) if cap == cap else None,
                           "heads": plan.heads, "run": args.run, "prompt_weight": args.prompt_weight, "machine": machine(), "logs": str(plan.logs)}
    if args.blocks > 1:
        res["blocks"] = {"n": args.blocks, "order": [[b, a] for b, a, _ in plan.schedule], **_paired(results, short_thr)}
    if args.sim and timings:
        res["sim"] = _simulate(timings, results, {a: s["policy"] for a, s in plan.arms.items()}, short_thr, plan.logs)
    return res, {"speeds": speeds, "drift": drift, "cap": cap, "mean_out": mean_out}


def _print(plan: Plan, res: dict[str, Any], raw: dict[str, Any]) -> None:
    """The A/B's table and the lines that say whether its arms are comparable."""
    args, figs = plan.args, res["arms"]
    speeds, drift, cap, mean_out = raw["speeds"], raw["drift"], raw["cap"], raw["mean_out"]
    rows_t = []
    for arm, f in figs.items():
        sim = ((res.get("sim") or {}).get("arms") or {}).get(arm, {})
        rows_t.append([arm, f["ok"], f["short_p99_e2e_s"], sim.get("short_p99_e2e_s"), f["p99_e2e_s"],
                       f["throughput_tok_s"], f["throughput_req_s"], json.dumps(f["backends"])])
    table(f"A/B: two llama.cpp servers, {len(plan.rows)} ShareGPT test prompts at {args.rate:g} req/s, short = output "
          f"< {res['short_threshold_tokens']:g} tokens", ["arm", "ok", "short P99 e2e (s)", "sim short P99",
                                                          "P99 e2e (s)", "tokens/s", "req/s", "per backend"], rows_t)
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
        print(f"{args.blocks} blocks, arms interleaved {' '.join(a for _, a in pb['order'])}: short P99 "
              "per block " + "; ".join(f"{a} " + ", ".join("-" if v is None else f"{v:g}" for v in vals)
                                                    for a, vals in pb["short_p99_per_block"].items()))
        print("servers' speed, neighbouring blocks of two arms (the drift the interleaving cancels): largest gap "
              f"{pb['neighbour_speed_gap']}")
    if drift is not None and drift > 0.05:
        print(f"warning: the servers' speed differed by {100 * drift:.0f}% between arms: the machine changed "
              "under the A/B (other load, clock); compare arms of equal speed only, or rerun on a quiet host")


def ab(args: argparse.Namespace) -> dict[str, Any]:
    plan = _plan(args)
    results, timings = _run_arms(plan)
    res, raw = _figures(plan, results, timings)
    _print(plan, res, raw)
    return res
