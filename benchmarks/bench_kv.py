"""A KV-bound regime, where remaining length decides (issue 30 part 3): KV victim choice and admission.

The cluster is bench_policies.py's (1 prefill + 2 decode, ``llama8b-h100``, batch limit 256, recompute
preemption, 25 GB/s link, ShareGPT test prompts), with each decode instance's KV budget cut so KV
binds before the 256 slots. **Budget rule**: half of what a full batch holds at the workload's mean
context, ``K = 0.5 x 256 x mean(prompt + output / 2)`` tokens (the seed-0 workload's means; the same
K for every seed): a full batch of 256 would need 2 K, so the batch is KV-bound and requests admitted
while they fit grow into preemption. Loads are multiples of the capacity a burst probe measures on
this cluster under vLLM's default (FCFS, preempt the latest arrival); one overload episode beside them
(a base of 0.7 x capacity with a burst of 1.3 x capacity for 30 s, Poisson, run until drained; figures over
the requests arriving from the burst on, as bench_yardstick.py measures episodes).

Arms: every arm is FCFS with round-robin dispatch, so only the victim and admission rules differ
(:mod:`lenpred.sim.preemption`): vLLM's default (victim ``latest``, admission ``fits-now``); victim
``predicted-remaining``, admission ``predicted-peak`` (S3) and both, each on the OUTLETS
re-predictions (``--outlets``, all 2,416 test samples) and on the mlp prefill head; the ceilings on
the true lengths (``true-remaining``, ``true-peak``, both). Beyond the issue's arms: admission ``predicted-horizon``
(the batch's most future KV, requests leaving at their predicted ends, must fit), alone and with the
victim rule, and ``true-horizon``. Per (arm, load, seed) one simulation and
one JSON row appended to ``WORK/cells.jsonl`` at once (resumable; a cell already there is skipped).
The report: ``OUT/kv.json`` (every row and the per-cell summary) and ``OUT/kv.md`` (min-max over
seeds, ratios to vLLM's default per seed, the issue's goal checked per cell and seed).

    flock /tmp/lenpred-heavy.lock nice -n 5 .venv/bin/python -m benchmarks.bench_kv --max-minutes 9
    .venv/bin/python -m benchmarks.bench_kv --report-only
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_policies import (
    ROOT,
    build,
    make_tables,
    prediction,
    run_then_report,
    say,
    sim_config,
    sources,
)
from benchmarks.flags import float_list, int_list
from benchmarks.report.policies_report import read_rows

LOADS = (0.9, 0.95, 0.98)
SEEDS = (0, 1, 2, 3, 4)
BUDGETS = (0.5, 0.25)  # K = share x batch limit x mean(prompt + output / 2)
KEY = ("arm", "budget_share", "load", "seed", "n_requests")
GOAL_PREEMPT = 0.7  # the goal: preemptions cut >= 30%
EPISODE = (0.7, 1.3, 30.0)  # an overload episode: base load, burst load (x capacity), burst seconds (Poisson)
EPISODE_LABEL = "episode 0.7 + 1.3x 30s"


@dataclass(frozen=True)
class KvArm:
    name: str
    predictor: str  # "-" (none), "outlets", "mlp", "true"
    victim: str
    admission: str

    def config(self, tables: dict[str, str]) -> Any:
        from lenpred.sim.config import PolicyConfig

        return PolicyConfig(name=self.name, queue="fcfs", dispatch="round-robin", victim=self.victim,
                            admission=self.admission, prediction=prediction(self.predictor, tables, None))


BASE = KvArm("vllm-default", "-", "latest", "fits-now")
ARMS = [BASE] + [KvArm(f"{what} {p}", p, v, a) for p in ("outlets", "mlp")
                 for what, v, a in (("victim", "predicted-remaining", "fits-now"),
                                    ("admit", "latest", "predicted-peak"),
                                    ("both", "predicted-remaining", "predicted-peak"),
                                    ("horizon", "latest", "predicted-horizon"),
                                    ("victim+horizon", "predicted-remaining", "predicted-horizon"))] + [
    KvArm("victim true", "true", "true-remaining", "fits-now"), KvArm("admit true", "true", "latest", "true-peak"),
    KvArm("both true", "true", "true-remaining", "true-peak"), KvArm("horizon true", "true", "latest", "true-horizon")]
OUTLETS_ARMS = [a.name for a in ARMS if a.predictor == "outlets"]


def kv_budget(wl: Any, max_batch: int, share: float) -> int:
    """The stated rule: share x max_batch x mean(prompt + output / 2), in tokens."""
    return int(round(share * max_batch * float(np.mean(wl.prompt + wl.output / 2.0))))


def episode_row(res: Any, thr: float, mask: np.ndarray) -> dict[str, Any]:
    """cell_row's figures over the requests in ``mask`` (an episode: those arriving from the burst on)."""
    from lenpred.sim.config import MetricsConfig
    from lenpred.sim.kvstats import preemption_stats
    from lenpred.sim.summary import latency_arrays, slo_attained

    mc = MetricsConfig()
    m = mask & np.isfinite(res.t_finish)
    lat = latency_arrays(res)
    e2e, short = lat["e2e"][m], (res.output < thr)[m]
    ok = slo_attained(res, mc.slo_ttft_s, mc.slo_tpot_s)[m]
    span = float(res.t_finish[m].max() - res.arrival[m].min())
    pre = preemption_stats(res.n_preempt[mask])
    q = lambda x, p: float(np.percentile(x, p))  # noqa: E731
    return {"preempt_mean": pre["mean"], "preempt_p99": pre["p99"], "preempt_share": pre["share"],
            "p99_s": q(e2e, 99), "p50_s": q(e2e, 50), "short_p99_s": q(e2e[short], 99),
            "short_p50_s": q(e2e[short], 50), "ttft_p99_s": q(lat["ttft"][m], 99),
            "tpot_p99_s": float(np.nanpercentile(lat["tpot"][m], 99)), "attainment": float(ok.mean()),
            "goodput_rps": float(ok.sum()) / span, "throughput_rps": float(m.sum()) / span,
            "mean_batch": float(np.mean([d["batch_time"] for d in res.instances["decode"]]))
            / float(np.nanmax(res.t_finish) - res.arrival.min())}


def cell_row(res: Any, thr: float) -> dict[str, Any]:
    """Preemptions per request (mean, P99, share preempted), overall and short P99 / P50 E2E, SLO
    attainment and goodput (SLO-meeting completions per second) of one run."""
    from lenpred.sim.summary import summarize

    s = summarize(res, short_threshold=thr)
    lat = s["latency"]
    return {"preempt_mean": s["preemption"]["mean"], "preempt_p99": s["preemption"]["p99"],
            "preempt_share": s["preemption"]["share"], "p99_s": lat["all"]["e2e"]["p99"],
            "p50_s": lat["all"]["e2e"]["p50"], "short_p99_s": lat["short"]["e2e"]["p99"],
            "short_p50_s": lat["short"]["e2e"]["p50"], "ttft_p99_s": lat["all"]["ttft"]["p99"],
            "tpot_p99_s": lat["all"]["tpot"]["p99"], "attainment": s["slo"]["attainment"],
            "goodput_rps": s["goodput_rps"], "throughput_rps": s["throughput_rps"],
            "mean_batch": float(np.mean(s["decode_imbalance"]["mean_batch"]))}


def setup(a: argparse.Namespace, say: Any, share: float) -> tuple[Any, dict[str, str], dict[str, Any]]:
    """The source, its predictions tables, and the budget and capacity (measured once per budget share, in
    WORK/setup-<share>.json)."""
    from lenpred.sim.sweep import RunSetup, measure_capacity

    src = sources(argparse.Namespace(alpaca_roles=None))["sharegpt"]
    work = Path(a.work)
    tables = make_tables(src, work, None, "", "", say)
    tables["outlets"] = a.outlets
    path = work / f"setup-{share:g}.json"
    if path.is_file():
        return src, tables, json.loads(path.read_text())
    cfg = sim_config(src, a.n_requests, 0, "poisson")
    wl = build(src, cfg, tables)
    budget = kv_budget(wl, cfg.cluster.max_batch, share)
    cfg = cfg.nested("cluster", kv_capacity_tokens=budget)
    cap = measure_capacity(RunSetup.of(cfg), wl, BASE.config(tables))
    st = {"kv_capacity_tokens": budget, "capacity_rps": cap, "mean_prompt": float(wl.prompt.mean()),
          "mean_output": float(wl.output.mean()), "budget_share": share,
          "rule": f"{share:g} x max_batch x mean(prompt + output/2)"}
    path.write_text(json.dumps(st, indent=2) + "\n")
    say(f"KV budget {budget} tokens per decode instance; capacity {cap:.2f} requests/s")
    return src, tables, st


def run_grid(a: argparse.Namespace, say: Any) -> bool:
    """Every missing cell, budget by budget and seed by seed; returns False when --max-minutes stopped it."""
    t_end = time.monotonic() + 60.0 * a.max_minutes
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    jl = work / "cells.jsonl"
    have = {tuple(r[k] for k in KEY) for r in read_rows(jl)} if jl.is_file() else set()
    for share in a.budgets:
        if not run_budget(a, share, have, say, t_end):
            return False
    return True


def run_budget(a: argparse.Namespace, share: float, have: set[tuple[Any, ...]], say: Any, t_end: float) -> bool:
    """The missing cells of one budget share, seed by seed."""
    from lenpred.sim.sweep import PredictionCache, RunSetup, run_one

    jl = Path(a.work) / "cells.jsonl"
    src, tables, st = setup(a, say, share)
    cells: list[float | str] = [*a.loads, *([EPISODE_LABEL] if a.episode else [])]
    for seed, load in ((s, c) for s in a.seeds for c in cells):
        todo = [x for x in ARMS if (x.name, share, load, seed, a.n_requests) not in have]
        if not todo:
            continue
        cfg, wl, rate, ep = cell_setup(a, (src, tables, st), seed, load)
        thr = float(np.median(wl.output))
        cache = PredictionCache(wl, seed)
        for x in todo:
            if time.monotonic() > t_end:
                say("stopped by --max-minutes: run again to continue")
                return False
            c0 = time.process_time()
            res = run_one(RunSetup.of(cfg), wl, x.config(tables), rate, cache=cache)
            fig = cell_row(res, thr) if ep is None else episode_row(res, thr, res.arrival >= ep.start)
            row = {"arm": x.name, "policy": "fcfs", "predictor": x.predictor, "victim": x.victim, "admission": x.admission,
                   "budget_share": share, "load": load, "seed": seed, "n_requests": a.n_requests, **fig,
                   "n_run": int(res.n), "short_threshold_tokens": thr, "rate_rps": rate,
                   "kv_capacity_tokens": st["kv_capacity_tokens"], "cpu_s": time.process_time() - c0}
            with jl.open("a") as f:
                f.write(json.dumps(row) + "\n")
            say(f"K {share:g} s{seed} {load}x {x.name}: {row['preempt_mean']:.3f} preempt/req, P99 {row['p99_s']:.2f} s, "
                f"short P99 {row['short_p99_s']:.2f} s, attainment {row['attainment']:.3f} ({row['cpu_s']:.1f} s CPU)")
    return True


def cell_setup(a: argparse.Namespace, ctx: tuple[Any, dict[str, str], dict[str, Any]], seed: int,
               load: float | str) -> tuple[Any, Any, float, Any]:
    """(config, workload, arrival rate, episode or None) of a steady load or of the episode: base
    EPISODE[0] x capacity, a burst at EPISODE[1] x capacity for EPISODE[2] s, then the base until drained
    (lenpred.sim.yardstick.episode_arrival), with the requests that cover it."""
    src, tables, st = ctx
    cap = st["capacity_rps"]
    if isinstance(load, str):
        from lenpred.sim.arrivals import Episode
        from lenpred.sim.yardstick import episode_arrival

        arr = episode_arrival(*EPISODE)
        ep = Episode.of(arr)
        assert ep is not None
        rate = EPISODE[0] * cap
        cfg = sim_config(src, ep.requests_needed(rate), seed, "poisson")
        cfg = cfg.replace(workload=cfg.workload.replace(arrival=arr))
    else:
        ep, rate, cfg = None, load * cap, sim_config(src, a.n_requests, seed, "poisson")
    cfg = cfg.nested("cluster", kv_capacity_tokens=st["kv_capacity_tokens"])
    return cfg, build(src, cfg, tables), rate, ep


# ---------------------------------------------------------------- report
METRICS = (("preempt_mean", "preempt/req"), ("preempt_share", "share preempted"), ("p99_s", "P99 s"),
           ("short_p99_s", "short P99 s"), ("attainment", "SLO attainment"), ("goodput_rps", "goodput req/s"))
RATIOS = (("preempt_mean", "preempt"), ("p99_s", "P99"), ("short_p99_s", "short P99"), ("attainment", "attain"))


def summarize_cells(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per load and arm: min / max / mean over seeds of each metric, and of its ratio to vLLM's
    default in the same seed; per load: whether the goal holds for each OUTLETS arm in every seed."""
    out: dict[str, Any] = {}
    cells = sorted({(r["budget_share"], r["load"]) for r in rows},
                   key=lambda c: (-c[0], isinstance(c[1], str), 0.0 if isinstance(c[1], str) else c[1]))
    for share, load in cells:
        at = [r for r in rows if r["budget_share"] == share and r["load"] == load]
        base = {r["seed"]: r for r in at if r["arm"] == BASE.name}
        cell: dict[str, Any] = {"seeds": sorted(base), "arms": {}}
        for x in ARMS:
            rs = [r for r in at if r["arm"] == x.name and r["seed"] in base]
            if not rs:
                continue
            m = {k: _mm([r[k] for r in rs]) for k, _ in METRICS}
            ratios = {k: _mm([_ratio(r[k], base[r["seed"]][k]) for r in rs]) for k, _ in RATIOS}
            goal = [r["preempt_mean"] <= GOAL_PREEMPT * base[r["seed"]]["preempt_mean"]
                    and r["p99_s"] < base[r["seed"]]["p99_s"] and r["short_p99_s"] <= base[r["seed"]]["short_p99_s"]
                    for r in rs]
            cell["arms"][x.name] = {"n_seeds": len(rs), "metrics": m, "ratio_to_default": ratios,
                                    "goal_seeds": int(sum(goal)), "goal_all_seeds": all(goal)}
        out[f"K {share:g}, {load}" if isinstance(load, str) else f"K {share:g}, load {load:g}"] = cell
    return out


def _mm(v: list[float]) -> dict[str, float]:
    x = np.asarray(v, dtype=float)
    return {"min": float(np.nanmin(x)), "max": float(np.nanmax(x)), "mean": float(np.nanmean(x))}


def _ratio(v: float, b: float) -> float:
    return float(v / b) if b else (1.0 if v == b else float("inf"))


def _fmt(m: dict[str, float], digits: int = 2) -> str:
    lo, hi = m["min"], m["max"]
    return f"{lo:.{digits}f}" if abs(hi - lo) < 0.5 * 10 ** -digits else f"{lo:.{digits}f}-{hi:.{digits}f}"


def write_report(work: Path, out: Path, n_requests: int | None = None) -> list[Path]:
    """OUT/kv.json and OUT/kv.md from WORK/cells.jsonl (only the rows of ``n_requests`` when given)."""
    rows = read_rows(work / "cells.jsonl") if (work / "cells.jsonl").is_file() else []
    rows = [r for r in rows if "arm" in r and n_requests in (None, r.get("n_requests"))]
    setup_info = {p.stem.removeprefix("setup-"): json.loads(p.read_text()) for p in sorted(work.glob("setup-*.json"))}
    summ = summarize_cells(rows)
    out.mkdir(parents=True, exist_ok=True)
    js = out / "kv.json"
    js.write_text(json.dumps({"setup": setup_info, "summary": summ, "rows": rows}, indent=1) + "\n")
    lines = ["# KV-bound regime: victim choice and admission (issue 30 part 3)", "",
             "Batch limit 256, 1 prefill + 2 decode, ShareGPT test prompts, FCFS + round robin in every arm. "
             "Figures: min-max over seeds; ratios: per seed, to vLLM's default in the same seed. KV budgets "
             "(K share: tokens per decode instance, share x 256 x mean(prompt + output/2); capacity by a burst "
             "probe under vLLM's default):", ""]
    lines += [f"* K {k}: {v['kv_capacity_tokens']} tokens, capacity {v['capacity_rps']:.2f} requests/s"
              for k, v in setup_info.items()] + [""]
    for label, cell in summ.items():
        lines += [f"## {label}{'' if 'episode' in label else ' x capacity'} (seeds {', '.join(map(str, cell['seeds']))})", "",
                  "| arm | " + " | ".join(lab for _, lab in METRICS) + " | " +
                  " | ".join(f"{lab} / default" for _, lab in RATIOS) + " | goal seeds |",
                  "|" + "---|" * (len(METRICS) + len(RATIOS) + 2)]
        for name, c in cell["arms"].items():
            vals = [_fmt(c["metrics"][k], 3 if k.startswith("preempt") or k == "attainment" else 2)
                    for k, _ in METRICS]
            rat = [_fmt(c["ratio_to_default"][k]) for k, _ in RATIOS]
            goal = "-" if name == BASE.name else f"{c['goal_seeds']}/{c['n_seeds']}"
            lines.append(f"| {name} | " + " | ".join(vals) + " | " + " | ".join(rat) + f" | {goal} |")
        lines.append("")
    met = {load: [n for n in OUTLETS_ARMS if cell["arms"].get(n, {}).get("goal_all_seeds")]
           for load, cell in summ.items()}
    lines += ["## Goal", "", "OUTLETS-informed victim choice and admission cut preemptions >= 30% and overall P99 "
              "below vLLM's default, with short P99 no worse, in every KV-bound cell (every seed):", ""]
    lines += [f"* {label}: " + (", ".join(v) + " meet it" if v else "no OUTLETS arm meets it")
              for label, v in met.items()]
    md = out / "kv.md"
    md.write_text("\n".join(lines) + "\n")
    return [js, md]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/kv", help="report folder (kv.json, kv.md)")
    ap.add_argument("--work", default="out/kv", help="cells.jsonl, setup.json, predictions tables")
    ap.add_argument("--n-requests", type=int, default=16000)
    ap.add_argument("--seeds", type=int_list, default=",".join(map(str, SEEDS)))
    ap.add_argument("--loads", type=float_list, default=",".join(f"{x:g}" for x in LOADS))
    ap.add_argument("--budgets", type=float_list, default=",".join(f"{x:g}" for x in BUDGETS),
                    help="KV budget shares: K = share x 256 x mean(prompt + output/2)")
    ap.add_argument("--outlets", default=str(ROOT / "data/outlets/predictions-test-smollm2-sharegpt.parquet"),
                    help="OUTLETS predictions with re-predictions for the test samples")
    ap.add_argument("--no-episode", dest="episode", action="store_false",
                    help=f"skip the overload episode ({EPISODE_LABEL} x capacity, measured from the burst on)")
    ap.add_argument("--max-minutes", type=float, default=9.0, help="stop starting cells after this long")
    ap.add_argument("--report-only", action="store_true", help="write the report from WORK/cells.jsonl")
    a = ap.parse_args(argv)
    if (not a.seeds or not a.loads or any(not (0 < x < 2) for x in a.loads) or a.n_requests < 100
            or not a.budgets or any(not (0 < x <= 1) for x in a.budgets)):
        print(f"error: loads {a.loads} must be in (0, 2) x capacity, budgets {a.budgets} in (0, 1], seeds "
              "non-empty, --n-requests >= 100 -- fix: e.g. --loads 0.9,0.98 --budgets 0.5,0.25 --seeds 0,1,2,3,4",
              file=sys.stderr)
        return 1
    return run_then_report(None if a.report_only else lambda: run_grid(a, say),
                           lambda: write_report(Path(a.work), Path(a.out), a.n_requests))


if __name__ == "__main__":
    raise SystemExit(main())
