"""Run a config: every policy arm at every load, on one shared workload, and tabulate.

With ``sweep.load_unit = "capacity"`` the loads are multiples of the cluster's measured saturation
throughput: a probe run sends many requests at once under the baseline arm and counts completions
per second while the decode pool is saturated (:func:`measure_capacity`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lenpred.errors import DataError
from lenpred.predictions import Predictions
from lenpred.sim.config import ClusterConfig, PolicyConfig, PredictionConfig, SimConfig
from lenpred.sim.engine import SimResult, Simulator
from lenpred.sim.profiles import get_profile
from lenpred.sim.summary import latency_arrays, steady_throughput, summarize
from lenpred.sim.workload import Workload, build_workload

Progress = Callable[[str], None]


@dataclass
class Run:
    policy: str
    load: float | None  # as given in the config (req/s or a multiple of capacity); None: times as given
    rate_rps: float | None  # the arrival rate simulated (a kept trace: its mean rate; burst: None)
    summary: dict[str, Any]
    e2e: np.ndarray  # (n,) end-to-end latency per request, NaN if rejected
    short: np.ndarray  # (n,) bool


@dataclass
class SweepResult:
    config: SimConfig
    capacity_rps: float | None
    short_threshold: float
    baseline: str
    runs: list[Run] = field(default_factory=list)
    wall_s: float = 0.0

    def loads(self) -> list[float | None]:
        out: list[float | None] = []
        for r in self.runs:
            if r.load not in out:
                out.append(r.load)
        return out

    def policies(self) -> list[str]:
        return [p.name for p in self.config.policies]

    def get(self, policy: str, load: float | None) -> Run:
        for r in self.runs:
            if r.policy == policy and r.load == load:
                return r
        raise KeyError((policy, load))

    def table(self, metric: str = "e2e", group: str = "short", q: str = "p99") -> list[dict[str, Any]]:
        """One row per load: each arm's ``group`` ``metric`` ``q`` and its change vs the baseline."""
        rows = []
        for load in self.loads():
            base = self.get(self.baseline, load).summary["latency"][group][metric][q]
            row: dict[str, Any] = {"load": load, "rate_rps": self.get(self.baseline, load).rate_rps}
            for p in self.policies():
                v = self.get(p, load).summary["latency"][group][metric][q]
                row[p] = v
                if p != self.baseline:
                    row[f"{p} change"] = (v - base) / base if (v is not None and base) else None
            rows.append(row)
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "profile": get_profile(self.config.cluster.profile).describe(),
            "capacity_rps": self.capacity_rps,
            "short_threshold_tokens": self.short_threshold,
            "baseline": self.baseline,
            "headline": "P99 end-to-end latency of short requests (true output < short_threshold_tokens)",
            "table_short_p99_e2e": self.table(),
            "table_short_p99_ttft": self.table(metric="ttft"),
            "table_all_p99_e2e": self.table(group="all"),
            "runs": [
                {"policy": r.policy, "load": r.load, "rate_rps": r.rate_rps, "summary": r.summary}
                for r in self.runs
            ],
            "wall_s": self.wall_s,
        }

    def write(self, out: str | Path) -> Path:
        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        (path / "results.json").write_text(json.dumps(self.to_json(), indent=2, default=_json_default) + "\n")
        (path / "config.json").write_text(json.dumps(self.config.to_dict(), indent=2) + "\n")
        return path / "results.json"


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class PredictionCache:
    """Predictions tables of one workload, made once per prediction config (they do not depend on
    the load, so every load of a sweep sees the same predictions)."""

    def __init__(self, workload: Workload, seed: int) -> None:
        self.workload = workload
        self.seed = seed
        self._tables: dict[PredictionConfig, Predictions] = {}

    def get(self, prediction: PredictionConfig) -> Predictions:
        if prediction not in self._tables:
            self._tables[prediction] = self.workload.predictions(prediction, self.seed)
        return self._tables[prediction]


@dataclass(frozen=True)
class RunSetup:
    """What a run reads of a config beside its workload and arm: the cluster, the seed, the default
    prediction of an arm without its own, and the saturation probe's size (:func:`measure_capacity`)."""

    cluster: ClusterConfig
    seed: int = 0
    prediction: PredictionConfig = field(default_factory=PredictionConfig)
    probe_requests: int = 4000

    @classmethod
    def of(cls, cfg: SimConfig) -> RunSetup:
        return cls(cfg.cluster, cfg.seed, cfg.prediction, cfg.sweep.probe_requests)


def run_one(setup: RunSetup, workload: Workload, policy: PolicyConfig, rate: float | None,
            prediction: PredictionConfig | None = None, cache: PredictionCache | None = None) -> SimResult:
    """One simulation of ``workload`` at ``rate`` requests/s under ``policy`` (predictions: ``prediction``,
    else the arm's own, else the setup's)."""
    pc = prediction or policy.prediction or setup.prediction
    preds = cache.get(pc) if cache is not None else workload.predictions(pc, setup.seed)
    reqs = workload.requests(rate, preds, with_dist=needs_dist(policy))
    return Simulator(reqs, setup.cluster, policy.policy, seed=setup.seed).run()


def needs_dist(policy: PolicyConfig) -> bool:
    """Whether an arm's queue policies read a predictive distribution (:attr:`PolicyConfig.needs_dist`)."""
    return policy.needs_dist


def check_dist(policy: PolicyConfig, preds: Predictions) -> None:
    """A distribution-aware policy needs a table that carries a distribution: one line naming the
    policy, the missing columns and where they come from."""
    if not needs_dist(policy):
        return
    f = preds.frame
    has = bool(f["spread"].notna().any() or f["q50"].notna().any()
               or ("dist_tokens" in f and f["dist_tokens"].map(len).gt(0).any()))
    if not has:
        raise DataError(
            f"policy {policy.policy.queue.name!r} (arm {policy.name!r}) needs a predictive distribution, and the predictions "
            f"table made by {preds.made_by} has no spread, q10/q50/q90 or dist_tokens column",
            "use a table a trained head wrote (lenpred predict and lenpred outlets predict write spread and "
            "q10/q50/q90), or the prompt's other samples as dist_tokens; point predictors (synthetic noise "
            "models, a request table's predicted_tokens) suit sjf, srpt, hrrn or trail")


def measure_capacity(setup: RunSetup, workload: Workload, policy: PolicyConfig) -> float:
    """Saturation throughput (requests/s) of the cluster on this workload's lengths.

    Sends ``n`` requests at t = 0 (the workload's lengths, repeated if needed) and counts
    completions per second between the 10% point and the moment fewer requests remain than the
    decode pool has batch slots (after that the pool is draining, not saturated); ``n`` is at
    least 5x those slots so that window is long.
    """
    cluster = setup.cluster
    prof = get_profile(cluster.profile).with_overrides(max_batch=cluster.max_batch)
    n_dec = cluster.n_instances if cluster.mode == "colocated" else cluster.n_decode
    slots = n_dec * prof.max_batch
    n = max(setup.probe_requests, 5 * slots)
    probe = Workload.from_lengths(np.resize(workload.prompt, n), np.resize(workload.output, n), np.zeros(n),
                                  source="probe")
    res = run_one(setup, probe, policy, None, PredictionConfig(model="oracle"))
    return steady_throughput(res, lo=0.1, hi=1.0 - slots / n)


def with_default_policy(cfg: SimConfig, has_predictions: bool) -> SimConfig:
    """A config that names no policy (only the default FCFS + round-robin arm) with predictions present runs
    three arms: FCFS + round robin (a reference column), the recommended policy (late binding, no prediction:
    :func:`lenpred.sim.config.recommended_policy`; the baseline every change is measured against) and the
    same late binding ordered by the prediction (:func:`lenpred.sim.arm.prediction_policy`), so the run says
    what the prediction adds over the best scheduler that needs none (issue 37)."""
    from lenpred.sim.arm import prediction_policy
    from lenpred.sim.config import recommended_policy

    if not has_predictions or cfg.policies != (PolicyConfig(),):
        return cfg
    batch = get_profile(cfg.cluster.profile).with_overrides(max_batch=cfg.cluster.max_batch).max_batch
    rec = recommended_policy(batch)
    return cfg.replace(policies=(PolicyConfig(), rec, prediction_policy(batch)), sweep=cfg.sweep.replace(baseline=rec.name))


def replay_config(cfg: SimConfig, path: str | Path, *, loads_given: bool = False) -> tuple[SimConfig, Workload]:
    """The config and workload that replay a request table instead of ``cfg``'s workload.

    The table's arrival times are kept (one run, load None) unless ``loads_given``: then
    ``cfg.sweep.loads`` (in ``cfg.sweep.load_unit``) rescale them to those mean rates. The config's
    own arrival rate describes its own workload and is ignored. Predictions: the table's
    ``predicted_tokens`` (model ``input``) when it has them, unless the config's default prediction
    is a predictions table (``--predictions``).
    """
    from lenpred.sim.config import ArrivalConfig
    from lenpred.sim.workload import workload_from_table

    wl = workload_from_table(path)
    pred = cfg.prediction
    if wl.has_given_predictions and pred.model != "table":
        pred = PredictionConfig(model="input")
    sweep = cfg.sweep if loads_given else cfg.sweep.replace(loads=(), load_unit="req/s")
    workload = cfg.workload.replace(n_requests=wl.n, arrival=ArrivalConfig(process="trace"))
    out = cfg.replace(workload=workload, prediction=pred, sweep=sweep)
    return with_default_policy(out, pred.model in ("table", "input")), wl


def run_sweep(cfg: SimConfig, progress: Progress | None = None, workload: Workload | None = None
              ) -> SweepResult:
    """Simulate every arm at every load; returns the tabulated result (nothing written)."""
    t0 = time.perf_counter()
    say = progress or (lambda _msg: None)
    wl = workload if workload is not None else build_workload(cfg.workload, cfg.seed)
    cache = PredictionCache(wl, cfg.seed)
    setup = RunSetup.of(cfg)
    for pol in cfg.policies:  # every arm's predictions first: a bad table fails before any run
        check_dist(pol, cache.get(cfg.prediction_for(pol)))
    thr = cfg.metrics.short_threshold
    thr = float(np.median(wl.output)) if thr is None else float(thr)
    baseline = cfg.sweep.baseline or cfg.policies[0].name
    base_policy = next(p for p in cfg.policies if p.name == baseline)
    capacity = None
    loads: list[float | None]
    if cfg.sweep.load_unit == "capacity":
        capacity = measure_capacity(setup, wl, base_policy)
        say(f"saturation throughput: {capacity:.2f} requests/s (burst probe, {baseline})")
        loads = list(cfg.sweep.loads) or [1.0]
    elif cfg.sweep.loads:
        loads = list(cfg.sweep.loads)
    else:
        # one run at the configured rate; burst arrivals and a trace without an explicit rate keep
        # their own times (load None)
        loads = [cfg.workload.arrival.effective_rate]
    if cfg.workload.arrival.process == "episode":  # every load's episode must fit the run, before any runs
        from lenpred.sim.episode import check_episode_length

        for load in loads:
            ep_rate = 1.0 if load is None else (load * capacity if capacity is not None else load)
            check_episode_length(cfg.workload.arrival, wl.n, ep_rate)
    result = SweepResult(config=cfg, capacity_rps=capacity, short_threshold=thr, baseline=baseline)
    for load in loads:
        rate = None if load is None else (load * capacity if capacity is not None else load)
        shown = rate if rate is not None else wl.mean_rate()  # a kept trace: its own mean rate
        where = (f"load {load:g} ({rate:.1f} req/s)" if load is not None else
                 "arrivals as given" + (f" ({shown:.1f} req/s on average)" if shown else ""))
        for pol in cfg.policies:
            res = run_one(setup, wl, pol, rate, cache=cache)
            summ = summarize(res, short_threshold=thr, slo_ttft_s=cfg.metrics.slo_ttft_s,
                             slo_tpot_s=cfg.metrics.slo_tpot_s)
            lat = latency_arrays(res)
            result.runs.append(Run(pol.name, load, shown, summ, lat["e2e"], res.output < thr))
            p99 = summ["latency"]["short"]["e2e"]["p99"]
            say(f"{where} {pol.name}: short P99 E2E "
                f"{p99 if p99 is not None else float('nan'):.3f} s, {summ['n_events']} events in {res.wall_s:.2f} s")
    result.wall_s = time.perf_counter() - t0
    return result
