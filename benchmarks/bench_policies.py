"""Scheduling that never backfires: every queue policy, with every predictor, at every load (issue 21's study).

The cluster is a quarter of the reproduction's (1 prefill + 2 decode instances, ``llama8b-h100``,
batch 256, recompute preemption, 25 GB/s KV link): 6,000 requests overload it as 24,000 overload the
reproduction's 4 + 8 (above capacity the backlog, and so every P99, grows with the run's length; a
run too short for its cluster never builds one), at a quarter of the CPU. Per cell -- (policy, predictor, arrival, workload, seed,
load) -- one simulation, and one JSON row appended to ``WORK/cells.jsonl`` at once: a killed run
continues where it stopped (cells already in the file are skipped). Then the report: ``OUT/policies.json``
(every row), ``OUT/policies.md`` (the headline tables, the "never worse than FCFS" matrix, the
recommended default), ``OUT/p99_vs_load_{arrival}.png`` and ``OUT/pareto.png``.

Workloads (requests drawn with replacement from a run's samples; loads are multiples of the
capacity a burst probe measures on each workload):

* ``sharegpt``: the reference run's test prompts (no head trained on them);
* ``outlets``: the test samples the OUTLETS trajectory holds (``--outlets``: a predictions table with
  re-predictions, ``lenpred outlets predict``; default: made here from ``--outlets-head`` on ``--traj``);
* ``alpaca``: the shifted workload: heads trained on ShareGPT, requests from the AlpacaEval run.

Predictors: the committed ``mlp`` and ``proxy`` heads (predicted here on each workload's prompts, as
``lenpred predict`` does), ``outlets``, ``prompt-median`` (the median of the prompt's other samples),
``samples`` (the oracle distribution: the prompt's other K-1 samples as ``dist_tokens``) and ``true``.
Prediction-free arms use round-robin dispatch, the others least-predicted-tokens (the reproduction's).

    taskset -c 0 nice -n 10 .venv/bin/python -m benchmarks.bench_policies --out docs/policies --work out/policies
    .venv/bin/python -m benchmarks.bench_policies --report-only --out docs/policies --work out/policies
    # sizing: --seeds 0 --arrivals poisson --loads 1.2 --workloads sharegpt --n-requests 20000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import ROOT
from benchmarks.flags import float_list, int_list
from benchmarks.report.policies_report import read_rows, write_report

LOADS = (0.8, 0.9, 1.0, 1.05, 1.1, 1.2, 1.3)
ARRIVALS = {"poisson": {"process": "poisson"}, "bursty": {"process": "gamma", "cv": 3.0}}
SEEDS = (0, 1, 2)
AGING = 100.0  # tokens per second of waiting, the compromise docs/sim_real.md measured
KEY = ("policy", "predictor", "arrival", "workload", "seed", "load")


@dataclass(frozen=True)
class Arm:
    policy: str  # the row's policy label
    predictor: str  # the row's predictor label ("-": none)
    queue: str
    params: tuple[tuple[str, Any], ...] = ()
    dispatch: str | None = None  # None: round-robin without a prediction, least-predicted-tokens with one
    late: bool = False  # late binding: one queue per pool, sent while an instance holds < its batch limit

    def config(self, prediction: Any, batch: int | None = None) -> Any:
        """The simulator's policy; ``batch`` (the decode batch limit) is the late-binding limit."""
        from lenpred.errors import ConfigError
        from lenpred.sim.config import PolicyConfig

        default = "least-requests" if self.late else "round-robin" if self.predictor == "-" else "least-predicted-tokens"
        late: dict[str, Any] = {}
        if self.late:
            if batch is None:
                raise ConfigError(f"arm {self.policy}/{self.predictor} binds late but no batch limit was given",
                                  "pass the cell's decode batch limit (max_outstanding = batch)")
            late = {"max_outstanding": int(batch)}
        return PolicyConfig(name=f"{self.policy} {self.predictor}", queue=self.queue, dispatch=self.dispatch or default,
                            prediction=prediction, **dict(self.params), **late)


POINT = [("sjf", "sjf", ()), (f"sjf aging{AGING:g}", "sjf", (("aging", AGING),)), ("hrrn", "hrrn", ()),
         ("trail", "trail", ())]
DIST = [("gittins", "gittins", ()), (f"gittins aging{AGING:g}", "gittins", (("aging", AGING),)), ("risk", "risk", ())]
DISPATCH_ONLY = ("fcfs+lpt", "fcfs", ())  # FCFS queues, least-predicted-tokens dispatch: nobody is overtaken
NO_PREEMPT = ("gittins np", "gittins", (("preempt", False),))  # the rank orders the queues only
# aging fast enough to bound the extra wait by (longest - shortest prediction) / rate, about a second
SAFE = [(f"sjf aging{r:g}", "sjf", (("aging", float(r)),)) for r in (300, 1000)]
OUTLETS = [("srpt", "srpt", ()), (f"srpt aging{AGING:g}", "srpt", (("aging", AGING),)), *POINT[2:], *DIST,
           *[(f"srpt aging{r:g}", "srpt", (("aging", float(r)),)) for r in (300, 1000)]]
FREE = [Arm("fcfs+rr", "-", "fcfs"), Arm("las", "-", "las"), Arm("mlfq", "-", "mlfq")]


def arms(workload: str) -> list[Arm]:
    """Every arm a workload runs (the baseline first). The outlets workload compares OUTLETS'
    re-predictions with the prefill head's SJF and the truth. risk and hrrn order like sjf wherever a
    table's spread is a monotone function of its prediction (the affine law), so they run with mlp only."""
    out = list(FREE)
    if workload == "outlets":
        out += [Arm(p, "outlets", q, prm) for p, q, prm in OUTLETS]
        out += [Arm(p, "mlp", q, prm) for p, q, prm in POINT[:2] + [DISPATCH_ONLY]]
        return out + [Arm(p, "true", q, prm) for p, q, prm in POINT[:2]]
    out += [Arm(p, "mlp", q, prm) for p, q, prm in POINT + DIST + [NO_PREEMPT] + SAFE + [DISPATCH_ONLY]]
    out += [Arm(p, "proxy", q, prm) for p, q, prm in POINT[:3] + DIST[:2] + SAFE + [DISPATCH_ONLY]]
    out += [Arm(p, "prompt-median", q, prm) for p, q, prm in POINT[:2]]
    out += [Arm(p, "samples", q, prm) for p, q, prm in DIST[:2] + [NO_PREEMPT]]
    return out + [Arm(p, "true", q, prm) for p, q, prm in POINT[:2] + POINT[3:]]


# ---------------------------------------------------------------- workloads and predictions
@dataclass
class Source:
    name: str
    run: str
    features: str
    roles: tuple[str, ...] | None
    keys_from: str | None = None  # predictor whose table's samples restrict the workload (outlets)


@dataclass(frozen=True)
class Block:
    """One (workload, seed, arrival): the cells that share a workload and its tables."""

    src: Source
    seed: int
    arrival: str


def sim_config(src: Source, n: int, seed: int, arrival: str) -> Any:
    from lenpred.sim.config import (
        ArrivalConfig,
        ClusterConfig,
        LengthConfig,
        MetricsConfig,
        SimConfig,
        SweepConfig,
        WorkloadConfig,
    )

    lengths = LengthConfig(source="rundir", path=src.run, roles=src.roles, include_truncated=True, min_tokens=1,
                           max_prompt_tokens=1024, max_total_tokens=2048)
    return SimConfig(
        name=f"policies-{src.name}", seed=seed,
        cluster=ClusterConfig(n_prefill=1, n_decode=2, profile="llama8b-h100", max_batch=256, preemption="recompute",
                              link_gbps=25.0),
        workload=WorkloadConfig(n_requests=n, arrival=ArrivalConfig(**ARRIVALS[arrival]), lengths=lengths),
        sweep=SweepConfig(load_unit="capacity", probe_requests=8000), metrics=MetricsConfig(), plots=False)


def build(src: Source, cfg: Any, tables: dict[str, str]) -> Any:
    """The workload of one (source, seed, arrival)."""
    from lenpred.sim.workload import build_workload

    if src.keys_from is None:
        return build_workload(cfg.workload, cfg.seed)
    from lenpred.outlets.schedule import sample_workload
    from lenpred.predictions import read_predictions

    f = read_predictions(tables[src.keys_from]).frame
    return sample_workload(cfg.workload, src.run, f[f["sample_idx"] >= 0][["prompt_id", "sample_idx"]], cfg.seed)


def make_tables(src: Source, work: Path, outlets: str | None, outlets_head: str, traj: str,
                say: Any) -> dict[str, str]:
    """Predictions tables of a workload's prompts under WORK/tables/<workload>/ (made once)."""
    from lenpred.predictors.pipeline import predict_run

    d = work / "tables" / src.name
    d.mkdir(parents=True, exist_ok=True)
    out: dict[str, str] = {}
    for name in ("mlp", "proxy"):
        dest = d / f"{name}.parquet"
        if not dest.is_file():
            say(f"predicting {src.name} with {name}")
            preds, _ = predict_run(ROOT / "data" / "heads" / f"{name}-smollm2-sharegpt", src.run, src.features,
                                   src.roles, None)
            preds.write(dest)
        out[name] = str(dest)
    if src.name == "outlets":
        dest = d / "outlets.parquet"
        if outlets is not None:
            out["outlets"] = outlets
        else:
            if not dest.is_file():
                from lenpred.outlets.pipeline import predict_table

                say("predicting the outlets re-predictions")
                predict_table(outlets_head, traj, src.run, roles=("test",), split=None).write(dest)
            out["outlets"] = str(dest)
    return out


def prediction(name: str, tables: dict[str, str], samples: str | None) -> Any:
    from lenpred.sim.config import PredictionConfig

    if name == "-" or name == "true":
        return PredictionConfig(model="oracle")
    if name == "prompt-median":
        return PredictionConfig(model="prompt-median")
    if name == "samples":
        return PredictionConfig(model="table", path=samples)
    return PredictionConfig(model="table", path=tables[name])


def samples_table(wl: Any, dest: Path) -> str:
    """The oracle distribution of the workload's prompts (each sample: its prompt's other samples)."""
    from lenpred.sim.predictions import other_samples_table

    if not dest.is_file():
        pids = set(wl.keys["prompt_id"])
        pop = wl.population[wl.population["prompt_id"].isin(pids)]
        other_samples_table(pop, wl.card, source=str(dest)).write(dest)
    return str(dest)


# ---------------------------------------------------------------- one cell
def cell_metrics(res: Any, thr: float) -> dict[str, Any]:
    """The issue's per-cell figures (seconds): short-request P99 / P50, overall P99, mean E2E, TTFT P99,
    the longest wait (queues + preempted), preemptions per request, starved requests (waited more
    than 10x their own service time, i.e. E2E minus waiting)."""
    from lenpred.sim.summary import latency_arrays

    lat = latency_arrays(res)
    done = np.isfinite(res.t_finish)
    e2e = lat["e2e"][done]
    short = (res.output < thr)[done]
    wait = (lat["queue"] + (res.waited if res.waited is not None else 0.0))[done]
    service = e2e - wait
    return {
        "short_p99_s": float(np.percentile(e2e[short], 99)), "short_p50_s": float(np.percentile(e2e[short], 50)),
        "p99_s": float(np.percentile(e2e, 99)), "mean_e2e_s": float(e2e.mean()),
        "ttft_p99_s": float(np.percentile(lat["ttft"][done], 99)), "max_wait_s": float(wait.max()),
        "preemptions_per_req": float(res.n_preempt.sum() / res.n), "starved": int((wait > 10.0 * service).sum()),
    }


def done_keys(path: Path, n: int) -> set[tuple[Any, ...]]:
    """Cells already in the file (at this workload size)."""
    if not path.is_file():
        return set()
    return {tuple(r[k] for k in KEY) for r in read_rows(path) if r.get("n_requests") == n}


# the headline (ShareGPT, Poisson, every seed) first, then one seed of every other (workload, arrival),
# then their other seeds: a run cut short still has the headline and every cell's first seed
ORDER = (("sharegpt", "poisson", (0, 1, 2)), ("sharegpt", "bursty", (0,)), ("alpaca", "poisson", (0,)),
         ("outlets", "poisson", (0,)), ("alpaca", "bursty", (0,)), ("outlets", "bursty", (0,)),
         ("sharegpt", "bursty", (1, 2)), ("alpaca", "poisson", (1, 2)), ("outlets", "poisson", (1, 2)),
         ("alpaca", "bursty", (1, 2)), ("outlets", "bursty", (1, 2)))


def cells(workloads: Sequence[str], seeds: Sequence[int], arrivals: Sequence[str]) -> Iterator[tuple[str, int, str]]:
    for w, a, ss in ORDER:
        if w in workloads and a in arrivals:
            for s in ss:
                if s in seeds:
                    yield w, s, a


def run_study(a: argparse.Namespace, say: Any) -> None:
    from lenpred.errors import LenpredError

    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    jl = work / "cells.jsonl"
    have = done_keys(jl, a.n_requests)
    srcs = sources(a)
    caps: dict[str, float] = json.loads((work / "capacity.json").read_text()) if (work / "capacity.json").is_file() else {}
    for w, seed, arrival in cells(a.workloads, a.seeds, a.arrivals):
        todo = [(x, load) for load in a.loads for x in arms(w)
                if (x.policy, x.predictor, arrival, w, seed, load) not in have]
        if not todo:
            continue
        try:
            run_block(a, Block(srcs[w], seed, arrival), todo, caps, jl, say)
        except LenpredError as e:  # one workload's inputs failing must not cost the others' cells
            say(f"{w} s{seed} {arrival}: skipped: {e}")


def run_block(a: argparse.Namespace, block: Block, todo: list[tuple[Arm, float]], caps: dict[str, float], jl: Path,
              say: Any) -> None:
    """The cells of one (workload, seed, arrival): one workload, its tables, then every arm and load."""
    from lenpred.sim.sweep import PredictionCache, RunSetup, measure_capacity, run_one

    src, seed, arrival = block.src, block.seed, block.arrival
    w, work = src.name, Path(a.work)
    tables = make_tables(src, work, a.outlets, a.outlets_head, a.traj, say)
    cfg = sim_config(src, a.n_requests, seed, arrival)
    wl = build(src, cfg, tables)
    samples = samples_table(wl, work / "tables" / w / f"samples-s{seed}.parquet") if w != "outlets" else None
    if w not in caps:
        from lenpred.sim.config import PolicyConfig

        probe_cfg = sim_config(src, a.n_requests, 0, "poisson")
        caps[w] = measure_capacity(RunSetup.of(probe_cfg), build(src, probe_cfg, tables), PolicyConfig())
        (work / "capacity.json").write_text(json.dumps(caps, indent=2) + "\n")
        say(f"{w}: capacity {caps[w]:.1f} requests/s")
    thr = float(np.median(wl.output))
    cache = PredictionCache(wl, seed)
    run_setup = RunSetup.of(cfg)
    for x, load in todo:
        t0, c0 = time.perf_counter(), time.process_time()
        pol = x.config(prediction(x.predictor, tables, samples))
        res = run_one(run_setup, wl, pol, load * caps[w], cache=cache)
        row = {"policy": x.policy, "predictor": x.predictor, "arrival": arrival, "workload": w, "seed": seed,
               "load": load, **cell_metrics(res, thr), "dispatch": pol.policy.dispatch, "n_requests": wl.n,
               "rate_rps": load * caps[w], "short_threshold_tokens": thr, "wall_s": time.perf_counter() - t0,
               "cpu_s": time.process_time() - c0}
        with jl.open("a") as f:
            f.write(json.dumps(row) + "\n")
        say(f"{w} s{seed} {arrival} {load:g}x {x.policy} / {x.predictor}: short P99 {row['short_p99_s']:.2f} s, "
            f"P99 {row['p99_s']:.2f} s, {row['preemptions_per_req']:.3f} preempt/req ({row['cpu_s']:.1f} s CPU)")


def say(m: str) -> None:
    """A progress line on stderr, with the time."""
    print(f"[{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True)


def run_then_report(run: Callable[[], Any] | None, report: Callable[[], Iterable[Path]]) -> int:
    """A study benchmark's end: run (unless None), then write the report, printing each file; a
    LenpredError is one line on stderr and exit status 1."""
    from lenpred.errors import LenpredError

    try:
        if run is not None:
            run()
        for p in report():
            print(f"wrote {p}")
    except LenpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def sources(a: argparse.Namespace) -> dict[str, Source]:
    share, feats = str(ROOT / "data/runs/smollm2-sharegpt"), str(ROOT / "data/features/smollm2-sharegpt")
    return {
        "sharegpt": Source("sharegpt", share, feats, ("test",)),
        "outlets": Source("outlets", share, feats, ("test",), keys_from="outlets"),
        "alpaca": Source("alpaca", str(ROOT / "data/runs/smollm2-alpaca-eval"),
                         str(ROOT / "data/features/smollm2-alpaca-eval"), a.alpaca_roles),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/policies", help="report folder (policies.json, policies.md, figures)")
    ap.add_argument("--work", default="out/policies", help="cells.jsonl, capacity.json, predictions tables")
    ap.add_argument("--n-requests", type=int, default=6000)
    ap.add_argument("--workloads", default="sharegpt,outlets,alpaca")
    ap.add_argument("--seeds", type=int_list, default=",".join(map(str, SEEDS)))
    ap.add_argument("--arrivals", default=",".join(ARRIVALS))
    ap.add_argument("--loads", type=float_list, default=",".join(f"{x:g}" for x in LOADS))
    ap.add_argument("--outlets", default=None, metavar="TABLE",
                    help="OUTLETS predictions with re-predictions (lenpred outlets predict); default: made from "
                         "--outlets-head on --traj")
    ap.add_argument("--outlets-head", default=str(ROOT / "data/outlets/smollm2-sharegpt/outlets"))
    ap.add_argument("--traj", default=str(ROOT / "data/outlets/traj-test-smollm2-sharegpt"))
    ap.add_argument("--alpaca-roles", default=None, help="roles of the AlpacaEval run's split (default: every prompt)")
    ap.add_argument("--report-only", action="store_true", help="write the report from WORK/cells.jsonl, run nothing")
    a = ap.parse_args(argv)
    a.workloads = [w for w in a.workloads.split(",") if w]
    a.arrivals = [x for x in a.arrivals.split(",") if x]
    a.alpaca_roles = tuple(a.alpaca_roles.split(",")) if a.alpaca_roles else None
    bad = [w for w in a.workloads if w not in ("sharegpt", "outlets", "alpaca")] + \
        [x for x in a.arrivals if x not in ARRIVALS]
    if bad:
        print(f"error: unknown workload or arrival {bad} -- fix: workloads sharegpt, outlets, alpaca; arrivals "
              f"{', '.join(ARRIVALS)}", file=sys.stderr)
        return 1
    return run_then_report(None if a.report_only else lambda: run_study(a, say),
                           lambda: write_report(Path(a.work) / "cells.jsonl", Path(a.out)))


if __name__ == "__main__":
    raise SystemExit(main())
