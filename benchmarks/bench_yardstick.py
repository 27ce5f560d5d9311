"""The yardstick that measures a policy (issue 30): steady loads with a convergence rule, overload
episodes that end, SLO attainment and goodput, on two cluster sizes and two decode batch limits.

Above capacity nothing is stationary (FCFS's short P99 at 1.2x doubled with every doubling of the
run), so the policy study's percentages described the run length. Here every figure has a limit:

* ``steady``: loads 0.90 / 0.95 / 0.98 / 0.99 x the measured capacity, Poisson; N requests doubled
  from ``--n0`` until every arm's short and overall P99 move < 5% (capped at ``--n-max``; the N and
  whether it converged are in the row); figures over the arrivals between the 10% and 90% points;
* ``episode``: a base of 0.7x with a burst of 1.3x or 1.5x for 30 s or 120 s after 60 s of warm-up,
  then 0.7x for long enough to drain (2x the excess work over the spare capacity, >= 60 s), Poisson
  or Gamma CV 3 inside; simulated until every request finished; figures over every request
  arriving from the burst's start;
* ``goodput``: per arm, the highest load (x capacity) at which >= 90% of all / short / long requests
  attain TTFT <= 0.25 s and TPOT <= 0.1 s (DistServe), by bisection between 0.5x and 1.0x (above
  capacity attainment falls with the run's length too) to 0.01x, N fixed at ``--goodput-n``.

Clusters 1 prefill + 2 decode and 4 + 8 (``llama8b-h100``), decode batch limits 256 and 16; workload
``sharegpt`` (the reference run's test prompts) with bench_policies.py's predictors and arms. One
JSON row per cell in ``WORK/cells.jsonl`` (every arm of the cell in it), written when the cell is
done: a killed run loses only the cell in progress, and cells present are skipped. The report:
``OUT/yardstick.json`` and ``OUT/yardstick.md`` (min-max over seeds, ratios to the best prediction-free arm
of the same cell and seed (issue 37: ``lenpred.report.yardstick.reference``), FCFS + round robin a reference
column). ``--augment CELLS`` adds the
arms a committed cells file lacks (the prediction-free dispatchers, late binding, the predictor arms on them)
on the same cells, checking that the baseline reproduces each row.

    .venv/bin/python -m benchmarks.bench_yardstick --dry-run     # the cells, runs and estimated CPU time
    flock /tmp/lenpred-heavy.lock nice -n 5 .venv/bin/python -m benchmarks.bench_yardstick --max-minutes 8 \\
        --out docs/yardstick
    .venv/bin/python -m benchmarks.bench_yardstick --clusters 1+2 --batches 16 --regimes episode \\
        --episodes 1.3x30s --arrivals poisson --seeds 0 --work out/yardstick --out docs/yardstick
    .venv/bin/python -m benchmarks.bench_yardstick --report-only --work out/yardstick --out docs/yardstick
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_policies import (
    ROOT,
    Arm,
    arms,
    build,
    make_tables,
    prediction,
    run_then_report,
    samples_table,
    say,
    sim_config,
    sources,
)
from benchmarks.flags import int_list
from benchmarks.report.yardstick_report import write_report
from lenpred.report.yardstick import read_cells

PROG = "python -m benchmarks.bench_yardstick"  # as run from the repository root; names its errors
CLUSTERS = {"1+2": (1, 2), "4+8": (4, 8)}
BATCHES = (256, 16)
LOADS = (0.90, 0.95, 0.98, 0.99)
BASE = 0.7
EPISODES = {"1.3x30s": (1.3, 30.0), "1.3x120s": (1.3, 120.0), "1.5x30s": (1.5, 30.0), "1.5x120s": (1.5, 120.0)}
ARRIVALS = {"poisson": ("poisson", 1.0), "gamma3": ("gamma", 3.0)}
REGIMES = ("steady", "episode", "goodput")
SEEDS = (0, 1, 2, 3, 4)
BASELINE = "fcfs+rr/-"
DEFAULT_ARMS = (BASELINE, "fcfs+lpt/mlp", "mlfq/-", "sjf/mlp", "sjf aging100/mlp", "gittins aging100/samples",
                "sjf/true", "sjf aging100/true")  # with FREE_ARMS and ON_FREE_ARMS (below) in --arms' default
# x capacity: the search stops at capacity (above it no attainment is stationary: it falls with the run's
# length), so a goodput of 1.0 reads ">= capacity"; probes per search
GOODPUT_LO, GOODPUT_HI, GOODPUT_TOL, GOODPUT_PROBES = 0.5, 1.0, 0.01, 8
# capacities (req/s, burst probe on seed 0) for --dry-run until WORK/capacity.json holds its own
NOMINAL_CAP = {"1+2|b256": 100.0, "1+2|b16": 15.8, "4+8|b256": 410.0, "4+8|b16": 62.7}  # measured 2026-12-03


@dataclass(frozen=True)
class Cell:
    regime: str  # steady | episode | goodput
    cluster: str  # 1+2 | 4+8
    batch: int
    where: str  # steady: the load ("0.95"); episode: its name ("1.5x120s"); goodput: "-"
    arrival: str  # poisson | gamma3
    seed: int

    @property
    def key(self) -> str:
        return f"{self.regime}|{self.cluster}|b{self.batch}|{self.where}|{self.arrival}|s{self.seed}"

    @property
    def n_decode(self) -> int:
        return CLUSTERS[self.cluster][1]


def grid(a: argparse.Namespace) -> list[Cell]:
    """Every cell asked for, cheapest cluster and batch first, the seeds innermost."""
    out: list[Cell] = []
    for cl in a.clusters:
        for b in a.batches:
            places: list[tuple[str, str, str]] = []
            if "steady" in a.regimes:
                places += [("steady", f"{x:g}", "poisson") for x in a.loads]
            if "episode" in a.regimes:
                places += [("episode", e, arr) for e in a.episodes for arr in a.arrivals]
            if "goodput" in a.regimes:
                places.append(("goodput", "-", "poisson"))
            out += [Cell(r, cl, b, w, arr, s) for r, w, arr in places for s in a.seeds]
    return out


# ---------------------------------------------------------------- arms
# the dispatcher's short name in an arm's label ("fcfs @jsq/-")
DISPATCH_LABEL = {"round-robin": "rr", "least-requests": "jsq", "power-of-two": "p2", "least-observed-load": "lol",
                  "least-kv": "lkv", "least-predicted-tokens": "lpt", "least-requests-predicted": "jsq+pred"}
# issue 37: the prediction-free arms a router can run (late binding = lenpred route's pool with max_outstanding),
# and the predictor arms built on the same dispatchers, up to the true sizes
FREE_ARMS = ("fcfs/-:dispatch=least-requests", "fcfs/-:dispatch=power-of-two", "fcfs/-:dispatch=least-observed-load",
             "fcfs/-:dispatch=least-kv", "fcfs/-:late")
ON_FREE_ARMS = ("sjf/mlp:aging=100:late", "gboost/mlp:late", "gboost/outlets:late",
                "fcfs/mlp:dispatch=least-requests-predicted", "gboost/mlp:dispatch=least-requests",
                "sjf/true:aging=100:late", "gboost/true:late")
PREDICTORS = ("-", "mlp", "proxy", "prompt-median", "samples", "outlets", "counters", "anchored", "true")


def parse_arm(spec: str) -> tuple[str, Arm]:
    """``policy/predictor`` as bench_policies.py names its arms (e.g. ``sjf aging100/mlp``), or a
    queue policy of lenpred.sched with options: ``QUEUE/PREDICTOR:key=value:...``. The options
    ``dispatch=NAME`` (a dispatcher of lenpred.sched.dispatch; default round-robin without a prediction,
    least-predicted-tokens with one) and ``late`` (late binding: one queue per pool in the queue's order, a
    request sent while an instance holds fewer than the cell's batch limit; default dispatch least-requests)
    choose the dispatch; every other key is a queue parameter (a number). A prediction-free arm (``-``)
    whose dispatcher or queue reads a prediction is refused."""
    from lenpred.errors import ConfigError
    from lenpred.sched.dispatch import DISPATCHERS
    from lenpred.sched.queue import QUEUE_POLICIES

    head, *params = spec.split(":")
    name, _, pred = head.partition("/")
    known = {f"{x.policy}/{x.predictor}": x for x in arms("sharegpt")}
    if not params and head in known:
        return head, known[head]
    if not pred or pred not in PREDICTORS or name not in QUEUE_POLICIES:
        raise ConfigError(f"unknown arm {spec!r}", f"use POLICY/PREDICTOR from bench_policies.py (e.g. {BASELINE}, "
                          f"sjf aging100/mlp) or QUEUE/PREDICTOR[:key=value...] with a queue of "
                          f"{', '.join(QUEUE_POLICIES.names())} and a predictor of {', '.join(PREDICTORS)}")
    dispatch, late, kv = None, False, []
    for p in params:
        k, eq, v = p.partition("=")
        if k == "late" and (not eq or v in ("1", "true")):
            late = True
        elif k == "dispatch":
            if v not in DISPATCHERS:
                raise ConfigError(f"arm {spec!r}: unknown dispatcher {v!r}",
                                  f"use dispatch= one of {', '.join(DISPATCHERS.names())}")
            dispatch = v
        else:
            try:
                kv.append((k, float(v)))
            except ValueError:
                raise ConfigError(f"arm {spec!r}: {p!r} is not key=number, dispatch=NAME or late",
                                  "give queue parameters as numbers, e.g. sjf/mlp:aging=100:late") from None
    if pred == "-":
        needs = [f"dispatcher {dispatch!r}"] if dispatch and DISPATCHERS.get(dispatch).needs_prediction else []
        q = QUEUE_POLICIES.get(name)
        needs += [f"queue {name!r}"] if q.needs_prediction or q.needs_dist else []
        if needs:
            raise ConfigError(f"arm {spec!r}: the {' and the '.join(needs)} read(s) a predicted length, and the arm "
                              "has no prediction ('-')",
                              f"name a predictor ({', '.join(PREDICTORS[1:])}) or a prediction-free dispatcher "
                              f"({', '.join(n for n in DISPATCHERS.names() if not DISPATCHERS.get(n).needs_prediction)})")
    label = name + "".join(f" {k}{v:g}" for k, v in kv) + (f" @{DISPATCH_LABEL.get(dispatch, dispatch)}" if dispatch
                                                             else "") + (" late" if late else "")
    return f"{label}/{pred}", Arm(label, pred, name, tuple(kv), dispatch, late)


# ---------------------------------------------------------------- one cell's simulations
class CellRunner:
    """Workloads, predictions and simulations of one cell (every arm on the same requests)."""

    def __init__(self, a: argparse.Namespace, cell: Cell, cap: float, tables: dict[str, str]) -> None:
        self.a, self.cell, self.cap, self.tables = a, cell, cap, tables
        self.src = sources(argparse.Namespace(alpaca_roles=None))["sharegpt"]
        self.arms = a.arm_objs
        self.n_simulated = 0

    def config(self, n: int, arrival: Any = None) -> Any:
        from lenpred.sim.config import ArrivalConfig

        cfg = sim_config(self.src, n, self.cell.seed, "poisson")
        np_, nd = CLUSTERS[self.cell.cluster]
        cluster = cfg.cluster.replace(n_prefill=np_, n_decode=nd, max_batch=self.cell.batch)
        wl = cfg.workload.replace(arrival=arrival or ArrivalConfig(process="poisson"))
        return cfg.replace(cluster=cluster, workload=wl)

    def simulate(self, cfg: Any, rate: float, names: Sequence[str] | None = None) -> tuple[dict[str, Any], float]:
        """The arms (default: every one) on ``cfg``'s workload at ``rate`` req/s -> {arm: SimResult},
        the short threshold (the workload's median output)."""
        from lenpred.sim.sweep import PredictionCache, RunSetup, run_one

        wl = build(self.src, cfg, self.tables)
        todo = {k: self.arms[k] for k in (names or self.arms)}
        samples = None
        if any(x.predictor == "samples" for x in todo.values()):
            dest = Path(self.a.work) / "tables" / "sharegpt" / f"samples-s{cfg.seed}-n{wl.n}.parquet"
            samples = samples_table(wl, dest)
        cache = PredictionCache(wl, cfg.seed)
        setup = RunSetup.of(cfg)
        out = {}
        for name, x in todo.items():
            pol = x.config(prediction(x.predictor, self.tables, samples), self.cell.batch)
            out[name] = run_one(setup, wl, pol, rate, cache=cache)
            self.n_simulated += out[name].n
        return out, float(np.median(wl.output))

    def steady(self) -> dict[str, Any]:
        from lenpred.sim.yardstick import cell_figures, converge, steady_mask

        load = float(self.cell.where)
        per_n: dict[int, dict[str, Any]] = {}

        def run(n: int) -> dict[str, float]:
            res, thr = self.simulate(self.config(n), load * self.cap)
            figs = {k: cell_figures(r, thr, self.a.metrics, steady_mask(r)) for k, r in res.items()}
            per_n[n] = {"figures": figs, "short_threshold_tokens": thr}
            return {f"{k} {m}": f[m] for k, f in figs.items() for m in ("short_p99_s", "p99_s")}

        nd = self.cell.n_decode
        c = converge(run, self.a.n0 * nd, self.a.n_max * nd)
        last = per_n[c.n]
        return {"n": c.n, "converged": c.converged, "tol": c.tol, "ns": [n for n, _ in c.history],
                "diverging": c.diverging,
                "moves": c.moves(), "rate_rps": load * self.cap, "arms": last["figures"],
                "short_threshold_tokens": last["short_threshold_tokens"]}

    def steady_at(self, n: int, rate: float, names: Sequence[str]) -> dict[str, Any]:
        """The arms ``names`` at one N (a committed cell's): the figures and each arm's batch figures."""
        from lenpred.sim.yardstick import batch_figures, cell_figures, steady_mask

        res, thr = self.simulate(self.config(n), rate, names)
        return {k: {**cell_figures(r, thr, self.a.metrics, steady_mask(r)),
                    "batches": batch_figures(r, thr, steady_mask(r))} for k, r in res.items()}

    def episode(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        from lenpred.sim.episode import Episode
        from lenpred.sim.yardstick import cell_figures, drain_s, episode_arrival, episode_mask

        peak, burst = EPISODES[self.cell.where]
        inner, cv = ARRIVALS[self.cell.arrival]
        arr = episode_arrival(BASE, peak, burst, inner=inner, cv=cv)
        ep = Episode.of(arr)
        assert ep is not None
        rate = BASE * self.cap
        res, thr = self.simulate(self.config(ep.requests_needed(rate, cv), arr), rate, names)
        figs = {k: {**cell_figures(r, thr, self.a.metrics, episode_mask(r, ep)), "drain_s": drain_s(r, ep),
                    "drained": drain_s(r, ep) <= ep.tail, "n": r.n} for k, r in res.items()}
        return {"episode": {"base": BASE, "peak": peak, "burst_s": burst, "start_s": ep.start, "tail_s": ep.tail,
                            "end_s": ep.end, "inner": inner, "cv": cv},
                "rate_rps": rate, "arms": figs, "short_threshold_tokens": thr}

    def goodput(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        from lenpred.sim.summary import attainment_by_class
        from lenpred.sim.yardstick import goodput_search, steady_mask

        n = self.a.goodput_n * self.cell.n_decode
        memo: dict[tuple[float, str], dict[str, float | None]] = {}  # the classes share each probe's run

        def attain(load: float, name: str, cls: str) -> float:
            if (load, name) not in memo:
                res, thr = self.simulate(self.config(n), load * self.cap, [name])
                m = self.a.metrics
                memo[load, name] = attainment_by_class(res[name], thr, m.slo_ttft_s, m.slo_tpot_s,
                                                       steady_mask(res[name]))
            return memo[load, name][cls] or 0.0

        out: dict[str, Any] = {}
        for name in names or self.arms:
            out[name] = {}
            for cls in ("all", "short", "long"):
                g = goodput_search(lambda x, k=name, c=cls: attain(x, k, c), GOODPUT_LO, GOODPUT_HI,
                                   target=self.a.metrics.slo_target, tol=GOODPUT_TOL, max_probes=GOODPUT_PROBES)
                out[name][cls] = {"load": g.load, "lo": g.lo, "hi": None if math.isinf(g.hi) else g.hi, "resolved": g.resolved,
                                  "rps": None if g.load is None else g.load * self.cap}
        search = {"lo": GOODPUT_LO, "hi": GOODPUT_HI, "tol": GOODPUT_TOL, "max_probes": GOODPUT_PROBES}
        return {"n": n, "search": search, "probes": len(memo), "arms": out}


def estimate(a: Any, cell: Any, caps: dict[str, float]) -> tuple[int, int, int]:
    """(runs, simulated requests if every steady cell converges at 2 n0, ... if none converges)."""
    from lenpred.sim.episode import Episode
    from lenpred.sim.yardstick import episode_arrival

    arms, nd = len(a.arm_objs), cell.n_decode
    if cell.regime == "steady":
        n0, k = a.n0 * nd, int(math.log2(a.n_max / a.n0)) + 1
        return arms * k, arms * 3 * n0, arms * n0 * (2**k - 1)
    if cell.regime == "goodput":
        loads = 2 + math.ceil(math.log2((GOODPUT_HI - GOODPUT_LO) / GOODPUT_TOL))
        runs = arms * min(GOODPUT_PROBES * 3, loads + 4)  # the three classes share most probes
        return runs, runs * a.goodput_n * nd, runs * a.goodput_n * nd
    peak, burst = EPISODES[cell.where]
    inner, cv = ARRIVALS[cell.arrival]
    ep = Episode.of(episode_arrival(BASE, peak, burst, inner=inner, cv=cv))
    cap = caps.get(f"{cell.cluster}|b{cell.batch}", NOMINAL_CAP[f"{cell.cluster}|b{cell.batch}"])
    n = int(ep.expected(ep.end, BASE * cap)) if ep is not None else 0
    return arms, arms * n, arms * n


# CPU microseconds per simulated request (one arm), measured on the 2-core shared machine with one
# small cell each (docs/yardstick.md); rows in cells.jsonl replace them with their own figures
US_PER_REQUEST = {256: 55.0, 16: 170.0}


def _us_per_request(rows: list[dict[str, Any]]) -> dict[tuple[str, int], float]:
    """Measured CPU microseconds per simulated request, per (cluster, batch), from the rows run."""
    acc: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        k = (r["cell"]["cluster"], int(r["cell"]["batch"]))
        acc[k][0] += r["cpu_s"]
        acc[k][1] += r["n_simulated"]
    return {k: 1e6 * c / n for k, (c, n) in acc.items() if n}


def dry_run(a: Any, cells: list[Cell], work: Path) -> str:
    """The cells, the runs they need (:func:`estimate`: runs, simulated requests if every steady cell
    converges at 2 n0, if none does) and their CPU time from measured rates."""
    rows = read_cells(work / "cells.jsonl", partial=True)
    have = {r["key"] for r in rows}
    cap_path = work / "capacity.json"  # nominal capacities (estimate's) until measured
    caps = json.loads(cap_path.read_text()) if cap_path.is_file() else {}
    rates = _us_per_request(rows)
    lines, tot = [], [0, 0, 0, 0.0, 0.0]
    for c in cells:
        runs, lo, hi = estimate(a, c, caps)
        us = rates.get((c.cluster, c.batch), US_PER_REQUEST[c.batch])
        done = c.key in have
        lines.append(f"{'done ' if done else 'to do'} {c.key}: {runs} runs, {lo:,}-{hi:,} requests, "
                     f"{lo * us / 1e6 / 60:.1f}-{hi * us / 1e6 / 60:.1f} CPU min")
        if not done:
            for i, v in enumerate((1, runs, lo, lo * us / 1e6, hi * us / 1e6)):
                tot[i] += v
    src = "measured in cells.jsonl" if rates else "nominal"
    lines.append(f"{int(tot[0])} cell(s) to run, about {int(tot[1])} simulations; estimated CPU "
                 f"{tot[3] / 3600:.1f} h (every steady cell converging at 2 n0) to {tot[4] / 3600:.1f} h (none "
                 f"converging), at {', '.join(f'{k}: {v:.0f}' for k, v in sorted(rates.items())) or US_PER_REQUEST} "
                 f"us/request ({src}); capacities {'from ' + str(cap_path) if caps else 'nominal'}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the study
def capacity(a: argparse.Namespace, cluster: str, batch: int, tables: dict[str, str], say: Any) -> float:
    """Saturation throughput of (cluster, batch) on seed 0's workload (WORK/capacity.json caches it)."""
    from lenpred.sim.config import PolicyConfig
    from lenpred.sim.sweep import RunSetup, measure_capacity

    path = Path(a.work) / "capacity.json"
    caps = json.loads(path.read_text()) if path.is_file() else {}
    key = f"{cluster}|b{batch}"
    if key not in caps:
        r = CellRunner(a, Cell("steady", cluster, batch, "1", "poisson", 0), 1.0, tables)
        cfg = r.config(4000)
        caps[key] = measure_capacity(RunSetup.of(cfg), build(r.src, cfg, tables), PolicyConfig())
        path.write_text(json.dumps(caps, indent=2) + "\n")
        say(f"{key}: capacity {caps[key]:.2f} requests/s")
    return float(caps[key])


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one line; a line cut by a kill is ended first so the new row stands on its own."""
    text = path.read_text() if path.is_file() else ""
    with path.open("a") as f:
        if text and not text.endswith("\n"):
            f.write("\n")
        f.write(json.dumps(row) + "\n")


def run_cell(a: argparse.Namespace, cell: Cell, tables: dict[str, str], say: Any) -> dict[str, Any]:
    cap = capacity(a, cell.cluster, cell.batch, tables, say)
    runner = CellRunner(a, cell, cap, tables)
    t0, c0 = time.perf_counter(), time.process_time()
    body: dict[str, Any] = getattr(runner, cell.regime)()
    return {"key": cell.key, "cell": asdict(cell), "capacity_rps": cap, **body, "n_simulated": runner.n_simulated,
            "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0,
            "slo": {"ttft_s": a.metrics.slo_ttft_s, "tpot_s": a.metrics.slo_tpot_s, "target": a.metrics.slo_target}}


def run_study(a: argparse.Namespace, say: Any) -> None:
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    jl = work / "cells.jsonl"
    have = {r["key"] for r in read_cells(jl, partial=True)}
    todo = [c for c in grid(a) if c.key not in have]
    say(f"{len(todo)} cell(s) to run, {len(grid(a)) - len(todo)} already in {jl}")
    if not todo:
        return
    src = sources(argparse.Namespace(alpaca_roles=None))["sharegpt"]
    tables = {**make_tables(src, work, None, "", "", say), "outlets": a.outlets, "counters": a.counters,
              "anchored": a.anchored}
    t0 = time.monotonic()
    for i, cell in enumerate(todo):
        if a.max_minutes is not None and time.monotonic() - t0 > 60.0 * a.max_minutes:
            say(f"--max-minutes {a.max_minutes:g} spent: stopping with {len(todo) - i} cell(s) left (run again)")
            return
        row = run_cell(a, cell, tables, say)
        append_row(jl, row)
        say(f"{cell.key}: {row['n_simulated']} requests simulated in {row['cpu_s']:.1f} s CPU"
            + (f", N {row['n']} ({'converged' if row['converged'] else 'NOT converged'})" if "converged" in row else ""))


def augment_row(a: argparse.Namespace, row: dict[str, Any], tables: dict[str, str], source: Path) -> dict[str, Any]:
    """A committed cell row with the arms of ``--arms`` it lacks added, run on the same cell: the same seed,
    N (steady) or episode, rate and capacity, so on the same requests as the arms it holds. The baseline is
    run again beside them and must reproduce the row's figures exactly (same workload, same simulator);
    otherwise the row is refused rather than mixed. Steady cells get each added arm's batch figures (batch
    means, issue 37 part 4) and the baseline's."""
    from lenpred.errors import ConfigError

    c = row["cell"]
    cell = Cell(c["regime"], c["cluster"], int(c["batch"]), c["where"], c["arrival"], int(c["seed"]))
    names = [k for k in a.arm_objs if k not in row["arms"]]
    runner = CellRunner(a, cell, float(row["capacity_rps"]), tables)
    t0, c0 = time.perf_counter(), time.process_time()
    check = [] if cell.regime == "goodput" else [BASELINE]
    if cell.regime == "steady":
        got = runner.steady_at(int(row["n"]), float(row["rate_rps"]), [*names, *check])
    elif cell.regime == "episode":
        got = runner.episode([*names, *check])["arms"] if names or check else {}
    else:
        got = runner.goodput(names)["arms"] if names else {}
    for k in check:
        mine, theirs = got.pop(k), row["arms"][k]
        same = all(mine.get(f) == theirs.get(f) for f in ("short_p99_s", "p99_s"))
        if not same:
            raise ConfigError(f"{source} {row['key']}: {k} reran at short P99 {mine.get('short_p99_s')} s, P99 "
                              f"{mine.get('p99_s')} s, the row holds {theirs.get('short_p99_s')}, {theirs.get('p99_s')}: "
                              "a different workload or simulator, so the new arms cannot join this row",
                              "rerun the whole cell (without --augment) into a new work folder")
        if "batches" in mine:
            theirs = {**theirs, "batches": mine["batches"]}
        got[k] = theirs
    prev = row.get("added", {})
    return {**row, "arms": {**row["arms"], **got},
            "added": {"arms": [*prev.get("arms", []), *names], "from": str(source),
                      "n_simulated": prev.get("n_simulated", 0) + runner.n_simulated,
                      "cpu_s": prev.get("cpu_s", 0.0) + time.process_time() - c0,
                      "wall_s": prev.get("wall_s", 0.0) + time.perf_counter() - t0}}


def _selected(a: argparse.Namespace, c: dict[str, Any]) -> bool:
    """A committed cell in the loads (steady) or episodes and arrivals (episode) the flags name."""
    if c["regime"] == "steady":
        return any(abs(float(c["where"]) - x) < 1e-9 for x in a.loads)
    if c["regime"] == "episode":
        return c["where"] in a.episodes and c["arrival"] in a.arrivals
    return True


def run_augment(a: argparse.Namespace, say: Any) -> None:
    """Every row of ``--augment`` in the selected regimes, clusters, batches and seeds, with the arms it lacks
    added (:func:`augment_row`), into WORK/cells.jsonl; rows already there are skipped (resumable)."""
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    jl = work / "cells.jsonl"
    have = {r["key"] for r in read_cells(jl, partial=True)}
    src_rows = read_cells(Path(a.augment))
    todo = [r for r in src_rows if r["key"] not in have and r["cell"]["regime"] in a.regimes
            and r["cell"]["cluster"] in a.clusters and int(r["cell"]["batch"]) in a.batches
            and int(r["cell"]["seed"]) in a.seeds and _selected(a, r["cell"])]
    say(f"{len(todo)} row(s) of {a.augment} to augment, {len(have)} already in {jl}")
    if not todo:
        return
    src = sources(argparse.Namespace(alpaca_roles=None))["sharegpt"]
    tables = {**make_tables(src, work, None, "", "", say), "outlets": a.outlets, "counters": a.counters,
              "anchored": a.anchored}
    t0 = time.monotonic()
    for i, row in enumerate(todo):
        if a.max_minutes is not None and time.monotonic() - t0 > 60.0 * a.max_minutes:
            say(f"--max-minutes {a.max_minutes:g} spent: stopping with {len(todo) - i} row(s) left (run again)")
            return
        new = augment_row(a, row, tables, Path(a.augment))
        append_row(jl, new)
        say(f"{row['key']}: +{len(new['arms']) - len(row['arms'])} arm(s) in {new['added']['cpu_s']:.1f} s CPU")


def _list(values: str | Sequence[Any], valid: Sequence[Any], what: str) -> list[Any]:
    """A comma-separated flag (or the numbers argparse read from one) checked against its valid values."""
    from lenpred.errors import ConfigError

    out = [x.strip() for x in values.split(",") if x.strip()] if isinstance(values, str) else list(values)
    bad = [x for x in out if x not in valid]
    if bad or not out:
        raise ConfigError(f"--{what}: {bad[0] if bad else 'empty'!r} is not one of {', '.join(map(str, valid))}",
                          f"pass a comma-separated subset of {', '.join(map(str, valid))}")
    return out


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="report folder (yardstick.json, yardstick.md); default WORK, so a partial run or an "
                         "--augment never overwrites the committed report (docs/yardstick) unless named")
    ap.add_argument("--work", default="out/yardstick", help="cells.jsonl, capacity.json, predictions tables")
    ap.add_argument("--regimes", default=",".join(REGIMES))
    ap.add_argument("--clusters", default=",".join(CLUSTERS))
    ap.add_argument("--batches", type=int_list, default=",".join(map(str, BATCHES)))
    ap.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS),
                    help="steady loads, multiples of capacity (0.95 or 0.95x; all in (0, 4])")
    ap.add_argument("--episodes", default=",".join(EPISODES))
    ap.add_argument("--arrivals", default=",".join(ARRIVALS), help="inside the episodes")
    ap.add_argument("--seeds", type=int_list, default=",".join(map(str, SEEDS)), help="comma-separated integers")
    ap.add_argument("--arms", default=";".join((*DEFAULT_ARMS, *FREE_ARMS, *ON_FREE_ARMS)),
                    help=f"';'-separated arms, POLICY/PREDICTOR or QUEUE/PREDICTOR:k=v (the baseline {BASELINE} is "
                         "always run)")
    ap.add_argument("--outlets", default=str(ROOT / "data/outlets/predictions-test-smollm2-sharegpt.parquet"),
                    metavar="TABLE", help="predictor 'outlets': OUTLETS predictions with re-predictions of every "
                    "test sample (lenpred outlets predict)")
    ap.add_argument("--counters", default=str(ROOT / "data/outlets/predictions-counters-mlp-test-smollm2-sharegpt.parquet"),
                    metavar="TABLE", help="predictor 'counters': a counter head's predictions with re-predictions and "
                    "their quantiles at the live points of every test sample (lenpred outlets predict --head "
                    "data/outlets/counters/quantile-mlp --roles test ...)")
    ap.add_argument("--anchored", default=str(ROOT / "data/outlets/predictions-anchored-live-test-smollm2-sharegpt.parquet"),
                    metavar="TABLE", help="predictor 'anchored': the live-trained OUTLETS head's prefill anchor, with "
                    "re-predictions and their quantiles at the live points of every test sample (lenpred outlets "
                    "predict --head data/outlets/anchor-live-smollm2-sharegpt --prefill-predictions mlp=FILE ...)")
    ap.add_argument("--n0", type=int, default=1000, help="steady: first N, requests per decode instance")
    ap.add_argument("--n-max", type=int, default=16000, help="steady: largest N, requests per decode instance")
    ap.add_argument("--goodput-n", type=int, default=4000, help="goodput probes: requests per decode instance")
    ap.add_argument("--slo-ttft", type=float, default=0.25)
    ap.add_argument("--slo-tpot", type=float, default=0.10)
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="start no new cell after this many minutes (a lock held <= 10 min: run again to go on)")
    ap.add_argument("--augment", default=None, metavar="CELLS",
                    help="add the arms of --arms that each row of this committed cells file lacks, on the same cell "
                         "(N, episode, rate), checking the baseline reproduces; rows to WORK/cells.jsonl")
    ap.add_argument("--dry-run", action="store_true", help="list the cells and estimate runs and CPU time")
    ap.add_argument("--report-only", action="store_true", help="write the report from WORK/cells.jsonl")
    return ap.parse_args(argv)


def resolve(a: argparse.Namespace) -> argparse.Namespace:
    """Lists and objects from the flags; every bad value is one ConfigError before anything runs."""
    from lenpred.errors import ConfigError
    from lenpred.sim.config import MetricsConfig, parse_loads

    a.regimes = _list(a.regimes, REGIMES, "regimes")
    a.clusters = _list(a.clusters, tuple(CLUSTERS), "clusters")
    a.batches = _list(a.batches, BATCHES, "batches")
    a.episodes = _list(a.episodes, tuple(EPISODES), "episodes")
    a.arrivals = _list(a.arrivals, tuple(ARRIVALS), "arrivals")
    loads, _ = parse_loads(a.loads, "capacity")
    if any(x >= 1.0 for x in loads):
        raise ConfigError(f"--loads {max(loads):g}: steady loads must lie below capacity, in (0, 1)",
                          "loads at or above capacity never reach a steady state: use --regimes episode")
    a.loads = list(loads)
    a.arm_objs = dict(parse_arm(s.strip()) for s in [BASELINE, *a.arms.split(";")] if s.strip())
    if not 1 <= a.n0 <= a.n_max:
        raise ConfigError(f"--n0 {a.n0} and --n-max {a.n_max} must satisfy 1 <= n0 <= n-max")
    if a.max_minutes is not None and not a.max_minutes > 0:
        raise ConfigError(f"--max-minutes must be > 0, got {a.max_minutes:g}")
    a.metrics = MetricsConfig(slo_ttft_s=a.slo_ttft, slo_tpot_s=a.slo_tpot)
    if a.out is None:
        a.out = a.work
    return a


def main(argv: Sequence[str] | None = None) -> int:
    from lenpred.errors import LenpredError

    try:
        a = resolve(parse(argv))
    except LenpredError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    if a.dry_run:
        print(dry_run(a, grid(a), Path(a.work)))
        return 0
    study = (lambda: run_augment(a, say)) if a.augment else (lambda: run_study(a, say))
    return run_then_report(None if a.report_only else study,
                           lambda: write_report(Path(a.work) / "cells.jsonl", Path(a.out), BASELINE))


if __name__ == "__main__":
    raise SystemExit(main())
