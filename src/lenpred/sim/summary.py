"""Metrics of one simulation: latencies by request class, throughput, goodput, balance, preemptions.

Definitions (seconds unless stated):

* TTFT = first token - arrival (the first token is produced by prefill);
* TPOT = (finish - first token) / (output tokens - 1), for requests with more than one token;
* E2E = finish - arrival;
* queueing delay = (prefill start - arrival) + (decode admission - first token) in disaggregated
  mode (the wait for a prefill slot plus the wait for a decode slot), prefill start - arrival in
  colocated mode; waits after a preemption show up in E2E, not here;
* short / long = true output length below / at-or-above ``short_threshold`` tokens (default: the
  median true output length of the workload; the value used is reported);
* goodput = completed requests per second that met both TTFT <= slo_ttft_s and TPOT <= slo_tpot_s;
  SLO attainment (DistServe) = the share of requests that met both (a request with one output token
  has no TPOT and meets it; a rejected or unfinished request does not attain), per class:
  ``attainment_by_class`` counts every request of the class, ``attainment`` the completed ones; the
  goodput in DistServe's sense -- the highest rate at which >= 90% attain -- is a search over runs
  (:func:`lenpred.sim.yardstick.goodput_search`);
* decode imbalance = max / mean of the tokens each decode instance generated, and the coefficient
  of variation of their time-averaged batch sizes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lenpred.sim.engine import SimResult
from lenpred.sim.kvstats import preemption_stats

QUANTILES = (50, 90, 99)


def _stats(x: np.ndarray) -> dict[str, float | None]:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "n": 0}
    q = np.percentile(x, QUANTILES)
    return {"p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]), "mean": float(x.mean()),
            "n": int(x.size)}


def default_short_threshold(output: np.ndarray) -> float:
    """The median true output length (tokens)."""
    return float(np.median(output))


def latency_arrays(res: SimResult) -> dict[str, np.ndarray]:
    """Per-request TTFT, TPOT, E2E and queueing delay (NaN where undefined)."""
    ttft = res.t_first - res.arrival
    e2e = res.t_finish - res.arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(res.output > 1, (res.t_finish - res.t_first) / (res.output - 1), np.nan)
    queue = res.t_prefill_start - res.arrival
    if res.mode == "disaggregated":
        dwait = res.t_decode_admit - res.t_first
        queue = queue + np.where(np.isfinite(dwait), dwait, 0.0)
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e, "queue": queue}


def slo_attained(res: SimResult, slo_ttft_s: float, slo_tpot_s: float) -> np.ndarray:
    """(n,) bool: the request finished with TTFT <= slo_ttft_s and TPOT <= slo_tpot_s."""
    lat = latency_arrays(res)
    done = np.isfinite(res.t_finish)
    with np.errstate(invalid="ignore"):
        tpot_ok = np.where(res.output > 1, lat["tpot"] <= slo_tpot_s, True)
        return done & (lat["ttft"] <= slo_ttft_s) & tpot_ok


def attainment_by_class(res: SimResult, short_threshold: float, slo_ttft_s: float, slo_tpot_s: float,
                        mask: np.ndarray | None = None) -> dict[str, float | None]:
    """SLO attainment of all, short and long requests (among those in ``mask``; None: all): the
    share of the class's requests that attained, None for an empty class."""
    ok = slo_attained(res, slo_ttft_s, slo_tpot_s)
    sel = np.ones(res.n, dtype=bool) if mask is None else mask
    short = res.output < short_threshold
    out: dict[str, float | None] = {}
    for g, m in (("all", sel), ("short", sel & short), ("long", sel & ~short)):
        k = int(m.sum())
        out[g] = float(ok[m].sum()) / k if k else None
    return out


def summarize(
    res: SimResult,
    *,
    short_threshold: float | None = None,
    slo_ttft_s: float = 0.25,
    slo_tpot_s: float = 0.10,
) -> dict[str, Any]:
    """All metrics of one run as a JSON-ready dict."""
    thr = default_short_threshold(res.output) if short_threshold is None else float(short_threshold)
    lat = latency_arrays(res)
    done = np.isfinite(res.t_finish)
    short = res.output < thr
    groups = {"all": done, "short": done & short, "long": done & ~short}
    latency = {g: {k: _stats(v[m]) for k, v in lat.items()} for g, m in groups.items()}
    n_done = int(done.sum())
    if n_done:
        t0 = float(res.arrival[done].min())
        t1 = float(res.t_finish[done].max())
        makespan = max(t1 - t0, 1e-12)
    else:
        makespan = float("nan")
    ok = slo_attained(res, slo_ttft_s, slo_tpot_s)
    dec = res.instances.get("decode", [])
    tokens = np.array([d["tokens"] for d in dec], dtype=float)
    mean_batch = np.array([d["batch_time"] for d in dec], dtype=float) / makespan if n_done else tokens * 0
    imbalance = {
        "tokens_max_over_mean": float(tokens.max() / tokens.mean()) if tokens.size and tokens.mean() > 0 else None,
        "batch_cv": float(mean_batch.std() / mean_batch.mean()) if mean_batch.size and mean_batch.mean() > 0 else None,
        "mean_batch": [float(x) for x in mean_batch],
    }
    util = {
        "decode_busy": [float(d["busy_s"] / makespan) for d in dec] if n_done else [],
        "prefill_busy": [float(p["busy_s"] / makespan) for p in res.instances.get("prefill", [])] if n_done else [],
    }
    return {
        "n_requests": res.n,
        "n_completed": n_done,
        "n_rejected": int(res.rejected.sum()),
        "makespan_s": makespan,
        "throughput_rps": n_done / makespan if n_done else 0.0,
        "output_tokens_per_s": float(res.output[done].sum()) / makespan if n_done else 0.0,
        "goodput_rps": float(ok.sum()) / makespan if n_done else 0.0,
        "slo": {"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s, "attainment": float(ok.sum()) / max(n_done, 1),
                "attainment_by_class": attainment_by_class(res, thr, slo_ttft_s, slo_tpot_s)},
        "short_threshold_tokens": thr,
        "short_definition": (
            f"true output < {thr:g} tokens"
            + (" (the median true output length)" if short_threshold is None else "")
        ),
        "n_short": int(groups["short"].sum()),
        "latency": latency,
        "preemptions": int(res.n_preempt.sum()),
        "preempted_requests": int((res.n_preempt > 0).sum()),
        "preemption": preemption_stats(res.n_preempt),
        "decode_imbalance": imbalance,
        "utilization": util,
        "peak_kv_decode": [int(d["peak_kv"]) for d in dec],
        "kv_capacity": res.kv_capacity,
        "n_events": res.n_events,
        "wall_s": res.wall_s,
    }


def steady_throughput(res: SimResult, lo: float = 0.1, hi: float = 0.9) -> float:
    """Completions per second between the lo and hi quantiles of finish times (drops the ramp-up
    and drain of an offline run): the saturation throughput when every request arrives at once."""
    t = np.sort(res.t_finish[np.isfinite(res.t_finish)])
    if t.size < 10:
        raise ValueError("too few completed requests to measure a throughput")
    i, j = int(lo * (t.size - 1)), int(hi * (t.size - 1))
    span = t[j] - t[i]
    return float((j - i) / span) if span > 0 else float("inf")
