"""Where a length prediction adds value (issue 37 part 3): real predictions against the best scheduler that
needs none, in the regimes where a prediction could matter.

Regimes (each on the reference run's ShareGPT test prompts, ``llama8b-h100``, recompute preemption, 25 GB/s
link; loads are multiples of the capacity a burst probe measures on the regime's own cluster and workload
under late-binding FCFS, a prediction-free arm):

* ``hetero``: 4 prefill + 8 decode instances, batch 16, the decode instances at two speeds 1:2
  (``decode_speeds`` 1,1,1,1,2,2,2,2: half of them step twice as fast);
* ``bimodal``: 4 + 8, batch 16, a bimodal workload: 80% of the requests drawn from the samples whose true
  output is <= its median (short chat), 20% from those >= its 0.85 quantile (long generation;
  ``LengthConfig.mix_short_share``). The mix is chosen by the true output: it makes a workload, it
  evaluates no predictor. "Short" is the chat class here;
* ``kv``: bench_kv.py's KV-bound decode: 1 + 2, batch 256, each decode instance's KV budget
  ``K = 0.5 x 256 x mean(prompt + output / 2)`` of the seed-0 workload (a full batch would need 2 K).

Arms. Prediction-free: FCFS with round robin (a reference column only, never the reference), least-requests
(JSQ), power-of-two, least-observed-load, least-kv, late binding (one queue per pool, ``max_outstanding`` =
the batch limit, least-requests dispatch); ``hetero`` adds the speed-aware ``least-requests-per-speed``
(early and late binding); ``kv`` adds watermark admission (``kv_reserve`` 0.05 / 0.1 / 0.2, JSQ). Predictor arms,
built on the prediction-free dispatchers, at each information level (``mlp``: the committed prefill head on
the prompts; ``outlets``: the committed OUTLETS re-predictions; ``true``: the true lengths, the ceiling): late
binding with an SJF queue aged at 100 tokens/s (and at 300: gentler to the long requests' tail), least-requests-predicted (JSQ, ties by predicted tokens),
least-predicted-tokens; ``hetero`` adds least-predicted-time (predicted tokens / speed) and late SJF with it;
``kv`` adds predicted-horizon admission (JSQ) alone and with the predicted-remaining victim (true:
true-peak, and true-horizon with the true-remaining victim). Beside them the per-prompt oracle
(``prompt-median``: the median of the prompt's other samples, the best a prompt-level predictor can do) with
the late SJF queues.

The reference of each (regime, load, seed) is :func:`lenpred.sim.yardstick.best_free` over the prediction-free
arms (round robin left out). Figures over the steady window (arrivals between the 10% and 90% points), and
batch means over it (k = 10) for the ratio intervals. One JSON row per (regime, load, seed, arm) appended to
``WORK/cells.jsonl`` at once (resumable: a row present is skipped); the report ``OUT/value.json`` and
``OUT/cells.jsonl`` (a copy). The README (docs/value/README.md) is written by hand from value.json.

    .venv/bin/python -m benchmarks.bench_value --dry-run
    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python -m benchmarks.bench_value --seeds 0,1,2 --max-minutes 60
    .venv/bin/python -m benchmarks.bench_value --evidence          # per-request evidence, then the report
    .venv/bin/python -m benchmarks.bench_value --report-only
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_policies import ROOT, make_tables, prediction, run_then_report, say, sim_config, sources
from benchmarks.flags import float_list, int_list

PROG = "python -m benchmarks.bench_value"
LOADS = (0.9, 0.95, 0.99)
SEEDS = (0, 1, 2, 3, 4)
N_REQUESTS = 16_000
BATCHES_K = 10
AGING = 100.0
GOAL_SHORT, GOAL_OVERALL = 0.8, 1.05  # the goal: short P99 <= 0.8x the reference at overall P99 <= 1.05x
REAL = ("mlp", "outlets")
OUTLETS_TABLE = ROOT / "data" / "outlets" / "predictions-test-smollm2-sharegpt.parquet"
KEY = ("regime", "load", "seed", "arm", "n_requests")
# seconds of CPU per simulated request and arm, by regime (measured on this machine, 2026-12-04)
CPU_PER_REQUEST = {"hetero": 1 / 4400, "bimodal": 1 / 5000, "kv": 1 / 7000}


@dataclass(frozen=True)
class Regime:
    name: str
    n_prefill: int
    n_decode: int
    batch: int
    speeds: tuple[float, ...] | None = None
    mix: tuple[float, float, float] | None = None  # (short share, short class quantile, long class quantile)
    kv_share: float | None = None  # KV budget K = share x batch x mean(prompt + output / 2)


REGIMES = {
    "hetero": Regime("hetero", 4, 8, 16, speeds=(1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0)),
    "bimodal": Regime("bimodal", 4, 8, 16, mix=(0.8, 0.5, 0.85)),
    "kv": Regime("kv", 1, 2, 256, kv_share=0.5),
}


@dataclass(frozen=True)
class VArm:
    """One arm: its label ``queue[ params] @dispatch[ late][ rules]/predictor``."""

    label: str
    predictor: str  # "-": none; mlp, outlets, true
    queue: str = "fcfs"
    dispatch: str = "least-requests"
    late: bool = False
    params: tuple[tuple[str, Any], ...] = ()
    admission: str = "fits-now"
    victim: str = "policy"
    kv_reserve: float | None = None
    reference_only: bool = False  # round robin: a column, never the reference

    @property
    def name(self) -> str:
        return f"{self.label}/{self.predictor}"

    @property
    def free(self) -> bool:
        return self.predictor == "-"

    def config(self, tables: dict[str, str], batch: int) -> Any:
        from lenpred.sim.config import PolicyConfig

        extra: dict[str, Any] = dict(self.params)
        if self.late:
            extra["max_outstanding"] = batch
        if self.kv_reserve is not None:
            extra["kv_reserve"] = self.kv_reserve
        return PolicyConfig(name=self.name, queue=self.queue, dispatch=self.dispatch, admission=self.admission,
                            victim=self.victim, prediction=prediction(self.predictor, tables, None), **extra)


SJF = (("aging", AGING),)


def arms_for(regime: str) -> list[VArm]:
    """The arms of a regime: the prediction-free set first (round robin first), then the predictor arms."""
    out = [VArm("fcfs @rr", "-", dispatch="round-robin", reference_only=True), VArm("fcfs @jsq", "-"),
           VArm("fcfs @p2", "-", dispatch="power-of-two"), VArm("fcfs @lol", "-", dispatch="least-observed-load"),
           VArm("fcfs @lkv", "-", dispatch="least-kv"), VArm("fcfs late", "-", late=True)]
    if regime == "hetero":
        out += [VArm("fcfs @rps", "-", dispatch="least-requests-per-speed"),
                VArm("fcfs late @rps", "-", dispatch="least-requests-per-speed", late=True)]
    if regime == "kv":
        out += [VArm(f"fcfs @jsq wm{r:g}", "-", admission="watermark", kv_reserve=r) for r in (0.05, 0.1, 0.2)]
    for p in (*REAL, "true"):
        out += [VArm("sjf aging100 late", p, "sjf", late=True, params=SJF),
                VArm("sjf aging300 late", p, "sjf", late=True, params=(("aging", 300.0),)),
                VArm("fcfs @jsq+pred", p, dispatch="least-requests-predicted"),
                VArm("fcfs @lpt", p, dispatch="least-predicted-tokens")]
        if regime == "hetero":
            out += [VArm("fcfs @lptime", p, dispatch="least-predicted-time"),
                    VArm("sjf aging100 late @lptime", p, "sjf", dispatch="least-predicted-time", late=True, params=SJF)]
        if regime == "kv" and p != "true":
            out += [VArm("fcfs @jsq horizon", p, admission="predicted-horizon", victim="latest"),
                    VArm("fcfs @jsq victim+horizon", p, admission="predicted-horizon", victim="predicted-remaining")]
        if regime == "kv" and p == "true":
            out += [VArm("fcfs @jsq true-peak", p, admission="true-peak", victim="latest"),
                    VArm("fcfs @jsq victim+horizon", p, admission="true-horizon", victim="true-remaining")]
    # the per-prompt oracle (the median of the prompt's other samples): the best any prompt-level predictor can do
    out += [VArm("sjf aging100 late", "prompt-median", "sjf", late=True, params=SJF),
            VArm("sjf aging300 late", "prompt-median", "sjf", late=True, params=(("aging", 300.0),))]
    return out


# ---------------------------------------------------------------- setup of a regime
def regime_config(reg: Regime, n: int, seed: int, kv_tokens: int | None = None) -> Any:
    """The simulator config of a regime (ShareGPT test prompts, Poisson arrivals)."""
    src = sources(argparse.Namespace(alpaca_roles=None))["sharegpt"]
    cfg = sim_config(src, n, seed, "poisson")
    cluster = cfg.cluster.replace(n_prefill=reg.n_prefill, n_decode=reg.n_decode, max_batch=reg.batch,
                                  decode_speeds=reg.speeds, kv_capacity_tokens=kv_tokens)
    lengths = cfg.workload.lengths
    if reg.mix is not None:
        share, below, above = reg.mix
        lengths = lengths.replace(mix_short_share=share, mix_short_below=below, mix_long_above=above)
    # the capacity probe: 8,000 requests (bench_policies.py's), fewer for a run of fewer
    return cfg.replace(name=f"value-{reg.name}", cluster=cluster, workload=cfg.workload.replace(lengths=lengths),
                       sweep=cfg.sweep.replace(probe_requests=min(8000, max(1000, n))))


def short_threshold(reg: Regime, wl: Any) -> float:
    """Output tokens below which a request is short: the workload's median; bimodal: the chat class
    (true output <= the pool's ``mix_short_below`` quantile, ``Workload.mix_bounds``), so "short" is the 80%."""
    if reg.mix is None:
        return float(np.median(wl.output))
    assert wl.mix_bounds is not None
    return float(np.floor(wl.mix_bounds[0])) + 1.0


_WORKLOADS: dict[tuple[Any, int], Any] = {}


def workload(cfg: Any, seed: int) -> Any:
    """The workload of a config and seed, built once per process (a run directory is read once)."""
    from lenpred.sim.workload import build_workload

    key = (cfg.workload, seed)
    if key not in _WORKLOADS:
        _WORKLOADS.clear()  # one at a time: a study's workloads are used seed by seed
        _WORKLOADS[key] = build_workload(cfg.workload, seed)
    return _WORKLOADS[key]


def tables_for(work: Path) -> dict[str, str]:
    """The mlp head's predictions on the test prompts (made once under WORK/tables) and the OUTLETS table."""
    src = sources(argparse.Namespace(alpaca_roles=None))["sharegpt"]
    tables = make_tables(src, work, None, "", "", say)
    tables["outlets"] = str(OUTLETS_TABLE)
    return tables


def setup(a: argparse.Namespace, reg: Regime, tables: dict[str, str]) -> dict[str, Any]:
    """The regime's KV budget (kv) and capacity (requests/s; burst probe on the seed-0 workload under
    late-binding FCFS), measured once and kept in WORK/setup.json."""
    from lenpred.sim.sweep import RunSetup, measure_capacity

    path = Path(a.work) / "setup.json"
    have: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    key = f"{reg.name}|n{a.n_requests}"
    if key in have:
        return have[key]
    cfg = regime_config(reg, a.n_requests, 0)
    wl = workload(cfg, 0)
    kv = None
    if reg.kv_share is not None:
        kv = int(round(reg.kv_share * reg.batch * float(np.mean(wl.prompt + wl.output / 2.0))))
        cfg = regime_config(reg, a.n_requests, 0, kv)
    probe = VArm("fcfs late", "-", late=True)
    cap = measure_capacity(RunSetup.of(cfg), wl, probe.config(tables, reg.batch))
    st = {"capacity_rps": cap, "kv_capacity_tokens": kv, "probe_arm": probe.name, "n_prefill": reg.n_prefill,
          "n_decode": reg.n_decode, "batch": reg.batch, "decode_speeds": reg.speeds, "mix": reg.mix,
          "kv_rule": None if kv is None else f"{reg.kv_share:g} x batch x mean(prompt + output/2)"}
    have[key] = st
    path.write_text(json.dumps(have, indent=2) + "\n")
    say(f"{reg.name}: capacity {cap:.2f} requests/s" + (f", KV budget {kv} tokens" if kv else ""))
    return st


# ---------------------------------------------------------------- per-run figures and evidence
def run_figures(res: Any, thr: float) -> dict[str, Any]:
    """The steady window's figures (lenpred.sim.yardstick.cell_figures), its batch figures (k = 10) and the
    short requests' waiting: of the short requests in the window's tail (e2e >= their P95), the mean share
    of their latency spent waiting (for prefill, for a decode slot, preempted) and the mean wait for a
    decode slot (s)."""
    from lenpred.sim.config import MetricsConfig
    from lenpred.sim.summary import latency_arrays
    from lenpred.sim.yardstick import batch_figures, cell_figures, steady_mask

    mask = steady_mask(res)
    fig = cell_figures(res, thr, MetricsConfig(), mask)
    e2e = latency_arrays(res)["e2e"]
    sh = mask & np.isfinite(e2e) & (res.output < thr)
    pre_wait = res.t_prefill_start - res.arrival
    dec_wait = res.t_decode_admit - res.t_first
    waited = res.waited if res.waited is not None else np.zeros(res.n)
    tail = sh & (e2e >= np.percentile(e2e[sh], 95)) if sh.any() else sh
    wait = np.nan_to_num(pre_wait) + np.nan_to_num(dec_wait) + np.nan_to_num(waited)
    fig.update({
        "short_tail_n": int(tail.sum()),
        "short_tail_wait_share": float(np.mean(wait[tail] / e2e[tail])) if tail.any() else None,
        "short_tail_decode_wait_s": float(np.nanmean(dec_wait[tail])) if tail.any() else None,
        "short_decode_wait_p99_s": float(np.nanpercentile(dec_wait[sh], 99)) if sh.any() else None,
        "batches": batch_figures(res, thr, mask, BATCHES_K),
    })
    return fig


def ranking(res: Any, thr: float, preds: dict[str, np.ndarray]) -> dict[str, Any]:
    """How well each predictor orders the requests that actually waited for a decode slot (> 10 ms) in this
    run: the AUC of short vs long (the chance a short request is predicted shorter than a long one, ties
    half), the Spearman correlation of predicted and true output, and the share of the short requests predicted
    above the long requests' median prediction, over those requests and over all."""
    from scipy import stats

    mask = np.isfinite(res.t_finish)
    queued = mask & ((res.t_decode_admit - res.t_first) > 0.01)
    out: dict[str, Any] = {"n_queued": int(queued.sum()), "share_queued": float(queued.mean())}
    for name, p in preds.items():
        for where, m in (("queued", queued), ("all", mask)):
            short = res.output[m] < thr
            pr = p[m]
            if short.all() or not short.any():
                out[f"{name}_{where}_auc"] = None
                continue
            r = stats.rankdata(pr)
            n1, n0 = int((~short).sum()), int(short.sum())
            auc = (r[~short].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)  # P(long predicted longer than short)
            out[f"{name}_{where}_auc"] = float(auc)
            out[f"{name}_{where}_spearman"] = float(stats.spearmanr(pr, res.output[m]).statistic)
            # short requests a size order puts among the long ones: predicted above the long ones' median
            out[f"{name}_{where}_short_above_long_median"] = float(np.mean(pr[short] > np.median(pr[~short])))
    return out


def reorderable(res: Any, thr: float) -> dict[str, Any]:
    """Per-request evidence in one central queue (late binding: a request enters the pool's queue at its first
    token, ``t_first``, and leaves it at ``t_decode_admit``): for each short request in the steady window's tail
    (e2e >= the short requests' P95), the requests queued ahead of it when it entered (entered before it, admitted
    after), how many of them were long, and the part of its wait that passing the long ones ahead would have
    removed, ``wait x long ahead / all ahead`` (each request ahead costs it one freed slot). Not a bound on
    SJF: a size order also lets it pass longer short requests and changes which requests form the tail. Means
    over the tail, as shares of its latency."""
    from lenpred.sim.summary import latency_arrays
    from lenpred.sim.yardstick import steady_mask

    e2e = latency_arrays(res)["e2e"]
    short = res.output < thr
    sh = steady_mask(res) & np.isfinite(e2e) & short
    tail = np.flatnonzero(sh & (e2e >= np.percentile(e2e[sh], 95)))
    enter, admit = res.t_first, res.t_decode_admit
    order = np.argsort(enter, kind="stable")
    e_sorted, a_sorted, short_sorted = enter[order], admit[order], short[order]
    wait_share, reorder_share, n_long, n_short = [], [], [], []
    for i in tail:
        k = int(np.searchsorted(e_sorted, enter[i], side="left"))
        ahead = a_sorted[:k] > enter[i]
        kl, ks = int((ahead & ~short_sorted[:k]).sum()), int((ahead & short_sorted[:k]).sum())
        w = float(admit[i] - enter[i])
        wait_share.append(w / e2e[i])
        reorder_share.append(w * kl / (kl + ks) / e2e[i] if kl + ks else 0.0)
        n_long.append(kl)
        n_short.append(ks)
    m = (lambda x: float(np.mean(x)) if x else None)  # noqa: E731
    return {"tail_n": int(tail.size), "decode_wait_share": m(wait_share), "reorderable_share": m(reorder_share),
            "long_ahead": m(n_long), "short_ahead": m(n_short)}


def run_evidence(a: argparse.Namespace) -> None:
    """WORK/evidence.jsonl: :func:`reorderable` on late-binding FCFS (the one central queue, no prediction) in
    every (regime, load, seed) of WORK/cells.jsonl that has none yet (one simulation each)."""
    from lenpred.sim.predictions import aligned
    from lenpred.sim.sweep import PredictionCache, RunSetup, run_one

    work = Path(a.work)
    ev = work / "evidence.jsonl"
    have = {(r["regime"], r["load"], r["seed"]) for r in read_rows(ev)}
    rows = read_rows(work / "cells.jsonl")
    todo = sorted({(r["regime"], r["load"], r["seed"]) for r in rows if r["n_requests"] == a.n_requests
                   and r["regime"] in a.regimes} - have, key=lambda c: (c[2], c[0], c[1]))
    tables = tables_for(work)
    arm = VArm("fcfs late", "-", late=True)
    for rn, load, seed in todo:
        reg = REGIMES[rn]
        st = setup(a, reg, tables)
        cfg = regime_config(reg, a.n_requests, seed, st["kv_capacity_tokens"])
        wl = workload(cfg, seed)
        thr = short_threshold(reg, wl)
        cache = PredictionCache(wl, seed)
        res = run_one(RunSetup.of(cfg), wl, arm.config(tables, reg.batch), load * st["capacity_rps"], cache=cache)
        preds = {p: aligned(cache.get(prediction(p, tables, None)), wl.keys)["pred_tokens"].to_numpy()[res.rid]
                 for p in (*REAL, "prompt-median")}
        row = {"regime": rn, "load": load, "seed": seed, "arm": arm.name, **reorderable(res, thr),
               "ranking": ranking(res, thr, preds)}
        with ev.open("a") as f:
            f.write(json.dumps(row) + "\n")
        say(f"evidence {rn} s{seed} {load:g}x: tail decode-wait share {row['decode_wait_share']:.2f}, reorderable "
            f"{row['reorderable_share']:.2f} ({row['long_ahead']:.1f} long / {row['short_ahead']:.1f} short ahead)")


# ---------------------------------------------------------------- the grid
def read_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a kill: that arm runs again
    return rows


def run_grid(a: argparse.Namespace) -> bool:
    """Every missing row, seed by seed (every regime's first seed first); False when --max-minutes stopped it."""
    from lenpred.sim.predictions import aligned
    from lenpred.sim.sweep import PredictionCache, RunSetup, run_one

    t_end = time.monotonic() + 60.0 * a.max_minutes
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    jl = work / "cells.jsonl"
    have = {tuple(r[k] for k in KEY) for r in read_rows(jl)}
    tables = tables_for(work)
    for seed in a.seeds:
        for rn in a.regimes:
            reg = REGIMES[rn]
            arms = [x for x in arms_for(rn) if a.arms is None or x.name in a.arms]
            todo = [(load, x) for load in a.loads for x in arms if (rn, load, seed, x.name, a.n_requests) not in have]
            if not todo:
                continue
            st = setup(a, reg, tables)
            cfg = regime_config(reg, a.n_requests, seed, st["kv_capacity_tokens"])
            wl = workload(cfg, seed)
            thr = short_threshold(reg, wl)
            cache = PredictionCache(wl, seed)
            run_setup = RunSetup.of(cfg)
            real = {p: aligned(cache.get(prediction(p, tables, None)), wl.keys)["pred_tokens"].to_numpy() for p in REAL}
            for load, x in todo:
                if time.monotonic() > t_end:
                    say("stopped by --max-minutes: run again to continue")
                    return False
                c0 = time.process_time()
                rate = load * st["capacity_rps"]
                res = run_one(run_setup, wl, x.config(tables, reg.batch), rate, cache=cache)
                row: dict[str, Any] = {"regime": rn, "load": load, "seed": seed, "arm": x.name, "n_requests": a.n_requests,
                                       "predictor": x.predictor, "free": x.free, "reference_only": x.reference_only,
                                       "rate_rps": rate, "short_threshold_tokens": thr, **run_figures(res, thr)}
                if x.name in ("fcfs late/-", "fcfs @jsq/-"):
                    # the workload's rows are request ids 0..n-1; a result's rows are in arrival order
                    row["ranking"] = ranking(res, thr, {p: v[res.rid] for p, v in real.items()})
                row["cpu_s"] = time.process_time() - c0
                with jl.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                say(f"{rn} s{seed} {load:g}x {x.name}: short P99 {row['short_p99_s']:.2f} s, P99 {row['p99_s']:.2f} s "
                    f"({row['cpu_s']:.1f} s CPU)")
    return True


# ---------------------------------------------------------------- the report
@dataclass
class Line:
    """A regime's one line: the best arm of a level against the reference, over seeds."""

    regime: str
    level: str
    arm: str | None = None
    load: float | None = None
    seeds: list[int] = field(default_factory=list)
    ratios: dict[str, list[float]] = field(default_factory=dict)
    meets: int = 0


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not b else a / b


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (regime, load, seed): the reference (best_free over the prediction-free arms, round robin left
    out) and every arm's ratios to it (plain and by batch means); per regime and information level the
    best (arm, load): the most seeds meeting the goal, then the lowest worst-seed short-P99 ratio."""
    from lenpred.sim.yardstick import batch_ratio, best_free

    out: dict[str, Any] = {"goal": {"short_p99_ratio_max": GOAL_SHORT, "p99_ratio_max": GOAL_OVERALL},
                           "regimes": {}}
    for rn in REGIMES:
        at = [r for r in rows if r["regime"] == rn]
        if not at:
            continue
        free_order = [x.name for x in arms_for(rn) if x.free and not x.reference_only]
        cells: dict[str, Any] = {}
        for load in sorted({r["load"] for r in at}):
            for seed in sorted({r["seed"] for r in at if r["load"] == load}):
                arms = {r["arm"]: r for r in at if r["load"] == load and r["seed"] == seed}
                if not any(f in arms for f in free_order):
                    continue
                ref = best_free(arms, free_order)
                rr = arms[ref]
                cell: dict[str, Any] = {"reference": ref, "arms": {}}
                for name, r in arms.items():
                    figs = {k: r.get(k) for k in ("short_p99_s", "p99_s", "p50_s", "short_p50_s", "attain_all",
                                                  "attain_short", "ttft_p99_s", "preemptions_per_req",
                                                  "short_tail_wait_share", "short_tail_decode_wait_s")}
                    rat = {k: _ratio(r.get(k), rr.get(k)) for k in ("short_p99_s", "p99_s", "p50_s")}
                    rat["attain_all_diff"] = (None if r.get("attain_all") is None or rr.get("attain_all") is None
                                              else r["attain_all"] - rr["attain_all"])
                    bm = {k: batch_ratio(r["batches"][k], rr["batches"][k]) for k in ("short_p99_s", "p99_s")}
                    rat.update({f"{k}_batch": None if b is None else [b.mean, b.lo, b.hi] for k, b in bm.items()})
                    rat["meets_goal"] = bool(rat["short_p99_s"] is not None and rat["p99_s"] is not None
                                             and rat["short_p99_s"] <= GOAL_SHORT and rat["p99_s"] <= GOAL_OVERALL)
                    cell["arms"][name] = {**figs, "predictor": r["predictor"], "ratio": rat,
                                          **({"ranking": r["ranking"]} if "ranking" in r else {})}
                cells[f"{load:g}|s{seed}"] = {"load": load, "seed": seed, **cell}
        lines = [best_line(rn, cells, lv) for lv in (*REAL, "prompt-median", "true", "real")]
        out["regimes"][rn] = {"cells": cells, "lines": [vars(x) for x in lines if x.arm is not None]}
    return out


def _rank(line: Line) -> tuple[int, bool, float]:
    """Better first: more seeds meeting the goal; then overall P99 <= 1.05x in every seed; then the lowest
    worst-seed short-P99 ratio."""
    return (line.meets, max(line.ratios["p99_s"]) <= GOAL_OVERALL, -max(line.ratios["short_p99_s"]))


def best_line(rn: str, cells: dict[str, Any], level: str) -> Line:
    """The best (arm, load) of an information level (``real``: mlp or outlets) by :func:`_rank`; its ratios over
    the seeds."""
    best: Line | None = None
    cands = {(c["arms"][n]["predictor"], n, c["load"]) for c in cells.values() for n in c["arms"]}
    for pred, name, load in sorted(cands, key=str):
        if not (pred == level or (level == "real" and pred in REAL)):
            continue
        at = [c for c in cells.values() if c["load"] == load and name in c["arms"]]
        if len(at) < sum(1 for c in cells.values() if c["load"] == load):
            continue  # an arm not run in every seed of the load is no line
        rat = [c["arms"][name]["ratio"] for c in at]
        if any(r["short_p99_s"] is None or r["p99_s"] is None for r in rat):
            continue
        line = Line(rn, pred if level != "real" else f"real ({pred})", name, load, [c["seed"] for c in at],
                    {k: [r[k] for r in rat] for k in ("short_p99_s", "p99_s", "p50_s", "attain_all_diff")},
                    sum(r["meets_goal"] for r in rat))
        if best is None or _rank(line) > _rank(best):
            best = line
    return best or Line(rn, level)


def write_report(work: Path, out: Path) -> list[Path]:
    rows = read_rows(work / "cells.jsonl")
    if not rows:
        from lenpred.errors import DataError

        raise DataError(f"no rows in {work / 'cells.jsonl'}", f"run {PROG} first (without --report-only)")
    out.mkdir(parents=True, exist_ok=True)
    summ = summarize(rows)
    setup_path = work / "setup.json"
    summ["setup"] = json.loads(setup_path.read_text()) if setup_path.is_file() else {}
    for e in read_rows(work / "evidence.jsonl"):
        cell = summ["regimes"].get(e["regime"], {}).get("cells", {}).get(f"{e['load']:g}|s{e['seed']}")
        if cell is not None:
            cell["reorderable"] = e
    summ["n_rows"] = len(rows)
    summ["cpu_s"] = float(sum(r.get("cpu_s", 0.0) for r in rows))
    p = out / "value.json"
    p.write_text(json.dumps(summ, indent=1) + "\n")
    written = [p]
    if (work / "cells.jsonl").stat().st_size < 2_000_000:
        shutil.copyfile(work / "cells.jsonl", out / "cells.jsonl")
        written.append(out / "cells.jsonl")
    md = out / "value.md"
    md.write_text(render_md(summ))
    written.append(md)
    for rn, reg in summ["regimes"].items():
        for ln in reg["lines"]:
            r = ln["ratios"]
            say(f"{rn} {ln['level']}: {ln['arm']} at {ln['load']:g}x: short P99 x{min(r['short_p99_s']):.2f}-"
                f"{max(r['short_p99_s']):.2f}, P99 x{min(r['p99_s']):.2f}-{max(r['p99_s']):.2f}, goal in "
                f"{ln['meets']}/{len(ln['seeds'])} seeds")
    return written


def _mm(xs: Sequence[float | None], fmt: str = "{:.2f}") -> str:
    v = [x for x in xs if x is not None]
    if not v:
        return "-"
    lo, hi = min(v), max(v)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def render_md(summ: dict[str, Any]) -> str:
    """The tables: per regime its lines (the best arm of each information level), the reference arms, the
    evidence (waiting in the reference's short tail, the predictors' ranking of the queued requests) and per
    load every arm's ratios to the reference, min-max over seeds."""
    L = ["# Where a prediction adds value: tables (written by benchmarks/bench_value.py)", "",
         f"Goal: short P99 <= {GOAL_SHORT}x the reference at overall P99 <= {GOAL_OVERALL}x, in every seed. "
         "Ratios are to the reference of the same load and seed (best_free over the prediction-free arms, round "
         "robin left out); min-max over seeds. `batch<1`: seeds whose batch-means 95% interval of the short-P99 "
         "ratio lies wholly below 1.", ""]
    for rn, reg in summ["regimes"].items():
        st = summ.get("setup", {})
        setup = next((v for k, v in st.items() if k.startswith(f"{rn}|")), {})
        L += [f"## {rn}", "", f"capacity {setup.get('capacity_rps', float('nan')):.2f} req/s; setup "
              f"`{json.dumps({k: v for k, v in setup.items() if k != 'capacity_rps'})}`", ""]
        L += ["| level | best arm | load | short P99 x | P99 x | P50 x | attainment diff | goal seeds |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
        for ln in reg["lines"]:
            r = ln["ratios"]
            L.append(f"| {ln['level']} | {ln['arm']} | {ln['load']:g} | {_mm(r['short_p99_s'])} | {_mm(r['p99_s'])} | "
                     f"{_mm(r['p50_s'])} | {_mm(r['attain_all_diff'], '{:+.3f}')} | {ln['meets']}/{len(ln['seeds'])} |")
        cells = list(reg["cells"].values())
        for load in sorted({c["load"] for c in cells}):
            at = [c for c in cells if c["load"] == load]
            refs = [f"s{c['seed']}: {c['reference']}" for c in at]
            ev_share = [c["arms"][c["reference"]].get("short_tail_wait_share") for c in at]
            ev_wait = [c["arms"][c["reference"]].get("short_tail_decode_wait_s") for c in at]
            ro = [c["reorderable"] for c in at if "reorderable" in c]
            rk = [c["arms"][n]["ranking"] for c in at for n in ("fcfs late/-",) if n in c["arms"]
                  and "ranking" in c["arms"][n]]
            L += ["", f"### {rn}, load {load:g}", "", f"references: {'; '.join(refs)}", "",
                  f"evidence: in the reference arm, the short requests at or beyond their P95 spent "
                  f"{_mm(ev_share)} of their latency waiting (prefill queue, decode slot, preempted); their mean "
                  f"wait for a decode slot {_mm(ev_wait)} s." + (
                      f" Late-binding FCFS queued {_mm([x['share_queued'] for x in rk])} of the requests for a "
                      f"decode slot (> 10 ms); on those, short-vs-long AUC mlp {_mm([x.get('mlp_queued_auc') for x in rk])}, "
                      f"outlets {_mm([x.get('outlets_queued_auc') for x in rk])} (Spearman mlp "
                      f"{_mm([x.get('mlp_queued_spearman') for x in rk])}, outlets "
                      f"{_mm([x.get('outlets_queued_spearman') for x in rk])})." if rk else "") + (
                      f" Per request (late-binding FCFS, the short tail): {_mm([x['decode_wait_share'] for x in ro])} of "
                      f"the latency is the wait in the pool's queue, with {_mm([x['long_ahead'] for x in ro], '{:.1f}')} "
                      f"long and {_mm([x['short_ahead'] for x in ro], '{:.1f}')} short requests ahead; passing the long ones "
                      f"ahead would have removed about {_mm([x['reorderable_share'] for x in ro])} of it. Short requests "
                      f"queued there predicted above the queued long ones' median: mlp "
                      f"{_mm([x['ranking'].get('mlp_queued_short_above_long_median') for x in ro])}, outlets "
                      f"{_mm([x['ranking'].get('outlets_queued_short_above_long_median') for x in ro])}, the per-prompt "
                      f"oracle {_mm([x['ranking'].get('prompt-median_queued_short_above_long_median') for x in ro])}."
                      if ro else ""), "",
                  "| arm | short P99 s | short P99 x | P99 x | P50 x | attainment diff | goal | batch<1 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
            names = list(dict.fromkeys(n for c in at for n in c["arms"]))
            for n in names:
                a = [c["arms"][n] for c in at if n in c["arms"]]
                rat = [x["ratio"] for x in a]
                below = sum(1 for x in rat if x.get("short_p99_s_batch") and x["short_p99_s_batch"][2] < 1.0)
                L.append(f"| {n} | {_mm([x['short_p99_s'] for x in a])} | {_mm([x['short_p99_s'] for x in rat])} | "
                         f"{_mm([x['p99_s'] for x in rat])} | {_mm([x['p50_s'] for x in rat])} | "
                         f"{_mm([x['attain_all_diff'] for x in rat], '{:+.3f}')} | "
                         f"{sum(x['meets_goal'] for x in rat)}/{len(rat)} | {below}/{len(rat)} |")
        L.append("")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------- command line
def dry_run(a: argparse.Namespace) -> int:
    total_cpu, total_runs = 0.0, 0
    for rn in a.regimes:
        arms = [x for x in arms_for(rn) if a.arms is None or x.name in a.arms]
        runs = len(arms) * len(a.loads) * len(a.seeds)
        cpu = runs * a.n_requests * CPU_PER_REQUEST[rn]
        total_cpu += cpu
        total_runs += runs
        print(f"{rn}: {len(arms)} arms x {len(a.loads)} loads x {len(a.seeds)} seeds = {runs} runs of "
              f"{a.n_requests} requests, ~{cpu / 60:.0f} CPU-min")
        for x in arms:
            print(f"    {x.name}{'  (reference column)' if x.reference_only else ''}")
    print(f"total: {total_runs} runs, ~{total_cpu / 60:.0f} CPU-min (+ one capacity probe per regime)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/value", help="report folder (value.json, cells.jsonl)")
    ap.add_argument("--work", default="out/value", help="cells.jsonl (resumable), setup.json, predictions tables")
    ap.add_argument("--n-requests", type=int, default=N_REQUESTS)
    ap.add_argument("--regimes", default=",".join(REGIMES))
    ap.add_argument("--seeds", type=int_list, default=",".join(map(str, SEEDS)))
    ap.add_argument("--loads", type=float_list, default=",".join(f"{x:g}" for x in LOADS))
    ap.add_argument("--arms", default=None, help="only these arms (comma-separated names as the dry run lists them)")
    ap.add_argument("--max-minutes", type=float, default=600.0, help="stop starting runs after this many minutes")
    ap.add_argument("--dry-run", action="store_true", help="print the cells, arms and estimated CPU; run nothing")
    ap.add_argument("--report-only", action="store_true", help="write the report from WORK/cells.jsonl, run nothing")
    ap.add_argument("--evidence", action="store_true", help="only the per-request evidence (WORK/evidence.jsonl: "
                    "late-binding FCFS re-run in every cell of WORK/cells.jsonl), then the report")
    a = ap.parse_args(argv)
    a.regimes = [r for r in a.regimes.split(",") if r]
    bad = [r for r in a.regimes if r not in REGIMES]
    if bad:
        ap.error(f"unknown regime(s) {bad} -- fix: use one or more of {', '.join(REGIMES)}")
    a.arms = None if a.arms is None else {x for x in a.arms.split(",") if x}
    if a.arms is not None:
        known = {x.name for rn in a.regimes for x in arms_for(rn)}
        if a.arms - known:
            ap.error(f"unknown arm(s) {sorted(a.arms - known)} -- fix: use names from --dry-run")
    if a.n_requests < 100:
        ap.error(f"--n-requests {a.n_requests} is too few for a P99 -- fix: pass 100 or more (16000 for the study)")
    if a.dry_run:
        return dry_run(a)
    run = None if a.report_only else (lambda: run_evidence(a)) if a.evidence else (lambda: run_grid(a))
    return run_then_report(run,
                           lambda: write_report(Path(a.work), Path(a.out)))


if __name__ == "__main__":
    raise SystemExit(main())
