"""The router's real A/B over workload draws (issue 37 part 5): the default (late-binding FCFS, no prediction)
against the arms given, on two llama.cpp servers, one ``bench_router ab`` per draw, each draw its own seed
(prompts, arrivals, sampling seeds) with the arms interleaved in blocks inside it.

Each draw writes ``draw-D.json`` (its figures) and ``draw-D.requests.jsonl`` (every request of every arm: arrival,
first token, end, output tokens, the server, whether its prompt is "short") into ``--out``, the JSON last, by a
rename: a draw whose JSON is there is done, and a rerun skips it (a run killed mid-draw reruns that draw whole).
A draw made with other settings refuses to mix with this run's.

"Short" is fixed before any arm runs, from the prompt set alone (``router_ab.short_prompts``): the same
requests in every arm and draw. The summary pairs the arms inside each draw (short-request P99, overall P99,
P50 of one arm over the reference arm's) and bootstraps the geometric mean of those ratios over draws; inside
each draw it also bootstraps the ratio over the draw's own request pairs (:func:`request_bootstrap`)::

    OMP_NUM_THREADS=1 python -m benchmarks.router_ab_draws --draws 5 --requests 200 --rate 0.12 --blocks 2 \\
        --head proxy=data/heads/proxy-smollm2-sharegpt --arms late,late-sjf --out docs/route/ab-draws
    python -m benchmarks.router_ab_draws --out docs/route/ab-draws --summary-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["bootstrap_ratio", "main", "request_bootstrap", "summarize"]

# the per-request fields committed (the rest, the token lags and headers, stay in the logs folder)
KEEP = ("arm", "block", "prompt_id", "short_fixed", "arrival_s", "t_send", "first", "e2e", "output_tokens",
        "prompt_tokens", "predicted", "backend", "done", "error")
SETTINGS = ("requests", "rate", "blocks", "arms", "head", "slots", "threads", "run", "max_tokens", "prompt_weight")


def bootstrap_ratio(ratios: list[float], n_boot: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """The geometric mean of per-draw ratios and its 95% bootstrap interval over draws (resampled whole)."""
    logs = np.log(np.asarray(ratios, float))
    rng = np.random.default_rng(seed)
    means = logs[rng.integers(0, len(logs), (n_boot, len(logs)))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(np.exp(logs.mean())), float(np.exp(lo)), float(np.exp(hi))


def _pair_key(r: dict[str, Any]) -> tuple[Any, ...]:
    """The same request in two arms of one draw: the same block, prompt and arrival time."""
    a = r.get("arrival_s")
    return (r.get("block"), r.get("prompt_id"), None if a is None else round(float(a), 6))


def request_bootstrap(recs: list[dict[str, Any]], arm: str, reference: str, q: float, short: bool,
                      n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float] | None:
    """Inside one draw: the ratio of ``arm``'s latency quantile ``q`` to ``reference``'s over the requests both
    arms finished (paired by block, prompt and arrival; ``short``: only the prompts fixed as short), and its
    95% interval with the pairs resampled whole (what one draw's requests say; the draws' spread is the
    other half of the noise)."""
    def done(name: str) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {_pair_key(r): r for r in recs if r.get("arm") == name and r.get("done") and r.get("error") is None
                and (r.get("short_fixed") or not short)}

    a, b = done(arm), done(reference)
    keys = sorted(set(a) & set(b), key=repr)
    if len(keys) < 2:
        return None
    xa = np.array([a[k]["e2e"] for k in keys], float)
    xb = np.array([b[k]["e2e"] for k in keys], float)
    idx = np.random.default_rng(seed).integers(0, len(keys), (n_boot, len(keys)))
    ratios = np.quantile(xa[idx], q, axis=1) / np.quantile(xb[idx], q, axis=1)
    lo, hi = np.quantile(ratios, [0.025, 0.975])
    return float(np.quantile(xa, q) / np.quantile(xb, q)), float(lo), float(hi)


def _json_value(v: Any) -> Any:
    """NaN and infinities as null: the records stay I-JSON, readable by every parser."""
    return None if isinstance(v, float) and not np.isfinite(v) else v


def _p(xs: list[float], q: float) -> float | None:
    return float(np.quantile(xs, q)) if xs else None


def _figs(recs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in recs if r.get("done") and r.get("error") is None]
    short = [r["e2e"] for r in ok if r.get("short_fixed")]
    e2e = [r["e2e"] for r in ok]
    return {"requests": len(recs), "ok": len(ok), "short_n": len(short), "short_p99_s": _p(short, 0.99),
            "short_p50_s": _p(short, 0.5), "p99_s": _p(e2e, 0.99), "p50_s": _p(e2e, 0.5)}


def summarize(folder: Path, reference: str = "late") -> dict[str, Any]:
    """Per draw and arm the figures from the committed per-request records; per arm, its ratios to the
    reference arm paired by draw and their bootstrap interval over draws."""
    draws: dict[int, dict[str, dict[str, Any]]] = {}
    records: dict[int, list[dict[str, Any]]] = {}
    loads: dict[str, float | None] = {}  # the offered load over the servers' measured decode capacity, per draw
    for p in sorted(folder.glob("draw-*.json")):
        d = int(p.stem.split("-")[1])
        recs = [json.loads(line) for line in (folder / f"draw-{d}.requests.jsonl").read_text().splitlines() if line]
        records[d] = recs
        load = json.loads(p.read_text()).get("load_vs_decode_capacity")
        loads[str(d)] = round(float(load), 3) if isinstance(load, (int, float)) else None
        by: dict[str, list[dict[str, Any]]] = {}
        for r in recs:
            by.setdefault(r["arm"], []).append(r)
        draws[d] = {arm: _figs(rs) for arm, rs in by.items()}
    if not draws:
        raise SystemExit(f"router_ab_draws: no draw in {folder} -- fix: run it without --summary-only first")
    arms = sorted({a for f in draws.values() for a in f})
    if reference not in arms:
        raise SystemExit(f"router_ab_draws: the reference arm {reference!r} is not in {folder} (arms: {arms}) -- "
                         "fix: --reference one of them")
    out: dict[str, Any] = {"reference": reference, "draws": sorted(draws), "per_draw": {str(d): f for d, f in draws.items()},
                           "load_vs_decode_capacity": loads, "arms": {}}
    for arm in arms:
        if arm == reference:
            continue
        entry: dict[str, Any] = {}
        for key in ("short_p99_s", "p99_s", "short_p50_s", "p50_s"):
            rs = [draws[d][arm][key] / draws[d][reference][key] for d in draws
                  if arm in draws[d] and draws[d][arm][key] and draws[d][reference][key]]
            if rs:
                gm, lo, hi = bootstrap_ratio(rs)
                entry[key] = {"per_draw": [round(r, 4) for r in rs], "geomean": round(gm, 4), "ci95": [round(lo, 4),
                              round(hi, 4)], "crosses_1": bool(lo <= 1.0 <= hi)}
        within = {}
        for key, q, short in (("short_p99_s", 0.99, True), ("p99_s", 0.99, False)):
            per = {str(d): request_bootstrap(records[d], arm, reference, q, short) for d in sorted(records)}
            within[key] = {d: [round(x, 4) for x in v] for d, v in per.items() if v is not None}
        entry["within_draw"] = within
        out["arms"][arm] = entry
    return out


def _markdown(s: dict[str, Any]) -> str:
    ref = s["reference"]
    lines = [f"# The router's real A/B over {len(s['draws'])} draws (issue 37 part 5)", "",
             f"Ratios to `{ref}` (the router's default: late-binding FCFS, no prediction), paired inside each draw; "
             "geometric mean over draws with a 95% bootstrap interval over draws. Short = prompts whose median "
             "sampled length in the run is below the test split's median (fixed before any arm ran).", "",
             "| arm | short P99 | overall P99 | short P50 | P50 | short P99 per draw |", "|---|---|---|---|---|---|"]
    for arm, e in s["arms"].items():
        cell = [f"{e[k]['geomean']:.3f} ({e[k]['ci95'][0]:.3f}-{e[k]['ci95'][1]:.3f})" if k in e else "-"
                for k in ("short_p99_s", "p99_s", "short_p50_s", "p50_s")]
        per = ", ".join(f"{r:.2f}" for r in e.get("short_p99_s", {}).get("per_draw", []))
        lines.append(f"| {arm} | " + " | ".join(cell) + f" | {per} |")
    lines += ["", "Inside each draw, the same ratio with its 95% interval from the draw's own requests (pairs "
              "resampled whole: how far one draw's requests pin its P99; the spread over draws is the other half):", "",
              "| arm | draw | short P99 | overall P99 |", "|---|---|---|---|"]
    for arm, e in s["arms"].items():
        w = e.get("within_draw", {})
        for d in s["per_draw"]:
            cell = [f"{v[0]:.3f} ({v[1]:.3f}-{v[2]:.3f})" if (v := w.get(k, {}).get(d)) else "-"
                    for k in ("short_p99_s", "p99_s")]
            lines.append(f"| {arm} | {d} | " + " | ".join(cell) + " |")
    lines += ["", "Per draw (seconds; load: the offered rate over the servers' decode capacity measured in that draw):",
              "", "| draw | load | arm | ok | short n | short P99 | P99 | short P50 | P50 |",
              "|---|---|---|---|---|---|---|---|---|"]
    for d, f in s["per_draw"].items():
        load = s.get("load_vs_decode_capacity", {}).get(d)
        for arm, g in f.items():
            vals = [f"{g[k]:.1f}" if g[k] is not None else "-" for k in ("short_p99_s", "p99_s", "short_p50_s", "p50_s")]
            lines.append(f"| {d} | {'-' if load is None else f'{load:.2f}x'} | {arm} | {g['ok']} | {g['short_n']} | "
                         + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _run_draw(args: argparse.Namespace, d: int, settings: dict[str, Any]) -> None:
    from benchmarks import bench_router

    logs = Path(args.work) / f"draw-{d}"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    argv = ["ab", "--requests", str(args.requests), "--rate", str(args.rate), "--blocks", str(args.blocks),
            "--arms", args.arms, "--slots", str(args.slots), "--threads", str(args.threads), "--run", args.run,
            "--seed", str(d), "--logs", str(logs), "--out", str(logs / "ab.json"),
            "--prompt-weight", str(args.prompt_weight)]
    for h in args.head:
        argv += ["--head", h]
    if args.max_tokens:
        argv += ["--max-tokens", str(args.max_tokens)]
    bench_router.main(argv)
    res = json.loads((logs / "ab.json").read_text())
    out = Path(args.out)
    recs = [json.loads(line) for line in (logs / "requests.jsonl").read_text().splitlines() if line]
    _write(out / f"draw-{d}.requests.jsonl", "".join(json.dumps({k: _json_value(r.get(k)) for k in KEEP}) + "\n" for r in recs))
    res["draws_settings"] = settings
    _write(out / f"draw-{d}.json", json.dumps(res, indent=1) + "\n")  # last: the draw is done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.router_ab_draws", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", required=True, help="draw-D.json, draw-D.requests.jsonl, summary.json, summary.md")
    ap.add_argument("--work", default="out/bench/router/ab-draws", help="the servers' and routers' logs per draw")
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--first-draw", type=int, default=0)
    ap.add_argument("--requests", type=int, default=200, help="requests per arm and draw")
    ap.add_argument("--rate", type=float, default=0.12,
                    help="arrivals per second per arm (0.12: ~0.8 of two one-thread llama.cpp servers on an AVX2 core each, ~22 tokens/s at these lengths)")
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--arms", default="late,late-sjf")
    ap.add_argument("--head", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--slots", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--run", default="data/runs/smollm2-sharegpt")
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--prompt-weight", type=float, default=0.5)
    ap.add_argument("--reference", default="late")
    ap.add_argument("--summary-only", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.summary_only:
        settings = {k: getattr(args, k) for k in SETTINGS}
        for d in range(args.first_draw, args.first_draw + args.draws):
            p = out / f"draw-{d}.json"
            if p.exists():
                theirs = json.loads(p.read_text()).get("draws_settings")
                if theirs != settings:
                    raise SystemExit(f"router_ab_draws: {p} was made with other settings ({theirs}) than these "
                                     f"({settings}) -- fix: the same flags, or another --out")
                print(f"draw {d}: done, skipped", file=sys.stderr)
                continue
            print(f"draw {d}: running", file=sys.stderr, flush=True)
            _run_draw(args, d, settings)
    s = summarize(out, args.reference)
    _write(out / "summary.json", json.dumps(s, indent=1) + "\n")
    md = _markdown(s)
    _write(out / "summary.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
