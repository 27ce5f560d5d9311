"""What OUTLETS is worth to a scheduler: trajectory re-predictions into the predictions table, and the
simulator's reproduction experiment on the test prompts' samples.

**Re-predictions** (:func:`outlets_predictions`): one row per sample of the trajectory (``sample_idx``
>= 0): ``pred_tokens`` (and q10 / q50 / q90, spread) is the head's prediction at t = 0 (there the
remaining length is the total), and ``repred_gen`` / ``repred_remaining`` are the trajectory's later
positions t and the head's predicted remaining tokens there. The simulator applies a re-prediction
when a request has generated that many tokens (:meth:`lenpred.sim.request.Request.apply_repredictions`):
the ``srpt`` queue orders by the latest predicted remaining, and a decode instance's outstanding
predicted tokens -- what ``least-predicted-tokens`` dispatch reads -- follow the re-predictions of its
running requests. Offline the positions are the artifact's (0, 32 ... 512, 10-75% of L and a stride
grid); online the head would run at every cycle, so this is a conservative stand-in.

**The experiment** (:func:`run_schedule`, config ``experiments/outlets/schedule.json``): the
reproduction setup (4 prefill + 8 decode instances, the llama8b-h100 profile, loads as multiples of
the measured capacity) on a workload drawn from the *test* prompts' samples that the trajectory
holds, with five arms: (a) FCFS + round robin; (b) the best prefill head, SJF + least predicted
tokens; (c) OUTLETS with re-predictions, shortest predicted remaining + least predicted outstanding
tokens; (d) the prompt-median oracle (median of the prompt's other samples), SJF + least predicted
tokens; (e) true lengths, shortest remaining + least outstanding tokens. Reported per load: short-
request P99 end-to-end latency, overall P99, and the load imbalance across decode instances (max /
mean generated tokens, and the coefficient of variation of the mean batch size).

In the config, the strings ``"{run}"``, ``"{prefill}"`` and ``"{outlets}"`` stand for the run
directory and the two predictions tables; :func:`run_schedule` fills them in. Run it with::

    lenpred outlets schedule --config experiments/outlets/schedule.json --run RUN \\
        --traj TRAJ --outlets-head HEAD --prefill-predictions PREFILL.parquet --out out/outlets/schedule

:func:`run_schedule` writes the data (``results.json``, ``config.json``, ``schedule.json``: the rows of
:func:`schedule_table`); ``schedule.md`` and the plots are :func:`lenpred.report.outlets.write_schedule`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.errors import ConfigError, DataError

__all__ = ["ScheduleRequest", "outlets_predictions", "remaining_predictions", "sample_workload", "fill_placeholders", "run_schedule", "schedule_table"]

PLACEHOLDERS = ("{run}", "{prefill}", "{outlets}")


def outlets_predictions(head: Any, traj: Any, card: Mapping[str, Any] | None = None, *, source: str = "",
                        variant: str = "outlets") -> Any:
    """A predictions table with re-predictions from an outlets head on trajectory rows (every sample
    needs its t = 0 row); each re-prediction carries the head's own 10% / 90% quantiles."""
    d = head.predict_dist(traj)
    return remaining_predictions(traj.index, head.predict(traj), d.q10, d.q50, d.q90, d.spread, card, made_by="outlets",
                                 config={"head": source, "variant": variant},
                                 note="the outlets head's predicted remaining tokens at the trajectory artifact's positions")


def remaining_predictions(idx: pd.DataFrame, point: np.ndarray, q10: np.ndarray, q50: np.ndarray, q90: np.ndarray,
                          spread: np.ndarray | None, card: Mapping[str, Any] | None, *, made_by: str,
                          config: Mapping[str, Any], note: str) -> Any:
    """The predictions table of remaining-length predictions on trajectory rows ``idx`` (the arrays aligned
    with it; ``spread``: the predictive standard deviation, else read off the 80% interval): each sample's
    t = 0 row gives pred_tokens / spread / q10 / q50 / q90, its later rows the re-predictions
    (``repred_gen``, ``repred_remaining`` = the point) and their quantiles (``repred_q10`` / ``repred_q90``,
    widened where needed to hold the point)."""
    from lenpred.outlets.spec import sample_rows
    from lenpred.predictions import Predictions
    from lenpred.stats.quantiles import Z90

    t = idx["t"].to_numpy(dtype=np.int64)
    q10, q50, q90 = (np.asarray(v, dtype=np.float64) for v in (q10, q50, q90))
    sd = (q90 - q10) / (2.0 * Z90) if spread is None else np.asarray(spread, dtype=np.float64)
    point = np.maximum(np.asarray(point, dtype=np.float64), 0.0)
    lo = np.minimum(np.maximum(q10, 0.0), point)
    hi = np.maximum(q90, point)
    rows = []
    for r in sample_rows(idx):
        if r.size == 0:
            continue
        if t[r[0]] != 0:
            first = idx.iloc[r[0]]
            raise DataError(f"sample ({first['prompt_id']}, {int(first['sample_idx'])}) has no t = 0 row in the trajectory",
                            "compute trajectory features with the documented positions (t = 0 is always kept)")
        i0, later = r[0], r[1:]
        rows.append({"prompt_id": str(idx["prompt_id"].iloc[i0]), "sample_idx": int(idx["sample_idx"].iloc[i0]),
                     "pred_tokens": float(point[i0]), "spread": float(sd[i0]), "q10": float(q10[i0]),
                     "q50": float(q50[i0]), "q90": float(q90[i0]),
                     "repred_gen": [int(x) for x in t[later]],
                     "repred_remaining": [float(x) for x in point[later]],
                     "repred_q10": [float(x) for x in lo[later]], "repred_q90": [float(x) for x in hi[later]]})
    return Predictions.from_frame(pd.DataFrame(rows), made_by=made_by, config=dict(config), card=card,
                                  extra={"repredictions": note})


def sample_workload(cfg: Any, run: str | os.PathLike[str], keys: pd.DataFrame, seed: int = 0) -> Any:
    """The experiment's workload: ``cfg.n_requests`` draws (with replacement, seeded as the simulator's
    run-directory workload) from the run's samples listed in ``keys`` (prompt_id, sample_idx), after
    the config's length filters. Synthetic predictors (the prompt-median oracle) see every sample of
    the run, so a prompt's other samples are all there."""
    from lenpred.data.rundir import RunDir
    from lenpred.sim.arrivals import unit_arrivals
    from lenpred.sim.length_sources import filter_lengths, rundir_lengths
    from lenpred.sim.workload import Workload

    all_rows = rundir_lengths(str(run), cfg.lengths)
    k = keys[["prompt_id", "sample_idx"]].astype({"prompt_id": str, "sample_idx": np.int64}).drop_duplicates()
    pool = all_rows.merge(k, on=["prompt_id", "sample_idx"], how="inner")
    if pool.empty:
        raise DataError("no run sample is among the test samples the trajectory holds",
                        "pass the trajectory features of this run")
    pool = filter_lengths(pool, cfg.lengths)
    rng_len = np.random.default_rng([seed, 1])
    rng_arr = np.random.default_rng([seed, 2])
    df = pool.iloc[rng_len.integers(0, len(pool), cfg.n_requests)].reset_index(drop=True)
    population = all_rows[["prompt_id", "sample_idx"]].assign(n_tokens=all_rows["output_tokens"].to_numpy())
    return Workload(prompt=df["prompt_tokens"].to_numpy(dtype=np.int64), output=df["output_tokens"].to_numpy(dtype=np.int64),
                    arrivals=unit_arrivals(cfg.n_requests, cfg.arrival, rng_arr),
                    rid=np.arange(cfg.n_requests, dtype=np.int64), keys=df[["prompt_id", "sample_idx"]].copy(),
                    population=population, card=RunDir.open(str(run)).card, source="rundir")


def fill_placeholders(obj: Any, values: Mapping[str, str]) -> Any:
    """Replace the strings ``"{name}"`` anywhere in a JSON value by ``values[name]``."""
    if isinstance(obj, dict):
        return {k: fill_placeholders(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [fill_placeholders(v, values) for v in obj]
    if isinstance(obj, str) and obj.startswith("{") and obj.endswith("}") and obj[1:-1] in values:
        return values[obj[1:-1]]
    return obj


def schedule_table(res: Any) -> list[dict[str, Any]]:
    """One row per (load, arm): short / overall P99 E2E (s), their change vs the baseline, imbalance."""
    out = []
    for load in res.loads():
        base = res.get(res.baseline, load).summary["latency"]
        for p in res.policies():
            s = res.get(p, load).summary
            lat, imb = s["latency"], s["decode_imbalance"]
            row = {"load": load, "arm": p, "short_p99_e2e_s": lat["short"]["e2e"]["p99"],
                   "all_p99_e2e_s": lat["all"]["e2e"]["p99"], "tokens_max_over_mean": imb["tokens_max_over_mean"],
                   "batch_cv": imb["batch_cv"]}
            for g in ("short", "all"):
                b, v = base[g]["e2e"]["p99"], lat[g]["e2e"]["p99"]
                row[f"{g}_p99_change"] = (v - b) / b if (b and v is not None) else None
            out.append(row)
    return out


@dataclass(frozen=True)
class ScheduleRequest:
    """What ``lenpred outlets schedule`` runs, built once from its flags: the simulator ``config`` (a
    JSON file with placeholders, or its dict), the run, the prefill table, the result folder, where the
    OUTLETS table comes from (``outlets_predictions``, or ``outlets_head`` on ``traj``), the split, and
    the smoke-run overrides of ``workload.n_requests`` and ``sweep.loads``."""

    run: str | os.PathLike[str]
    prefill_predictions: str | os.PathLike[str]
    out: str | os.PathLike[str]
    config: str | os.PathLike[str] | Mapping[str, Any] = "experiments/outlets/schedule.json"
    outlets_head: str | None = None
    traj: str | None = None
    outlets_predictions: str | os.PathLike[str] | None = None
    split: str | None = None
    n_requests: int | None = None
    loads: tuple[float, ...] | None = None


def run_schedule(req: ScheduleRequest, *, keys: pd.DataFrame | None = None,
                 progress: Callable[[str], None] | None = None) -> Any:
    """Fill the config's placeholders, build the test-sample workload (``keys``: default the samples
    of the OUTLETS table ``req.outlets_predictions``), run every arm at every load, write results.json,
    config.json, schedule.json."""
    from lenpred.predictions import read_predictions
    from lenpred.sim.config import SimConfig
    from lenpred.sim.sweep import run_sweep

    config, run, n_requests, loads = req.config, req.run, req.n_requests, req.loads
    outlets_table, prefill_table = req.outlets_predictions, req.prefill_predictions
    if outlets_table is None:
        raise ConfigError("run_schedule needs the OUTLETS predictions table", "pass outlets_predictions=FILE")
    if isinstance(config, str | os.PathLike):
        p = Path(config)
        if not p.is_file():
            raise ConfigError(f"config file {p} not found", "check the path")
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{p} is not valid JSON (line {e.lineno}: {e.msg})", "correct the JSON at that line") from None
    else:
        raw = dict(config)
    raw = fill_placeholders(raw, {"run": str(run), "prefill": str(prefill_table), "outlets": str(outlets_table)})
    cfg = SimConfig.from_dict(raw, "config")
    if n_requests is not None:
        cfg = cfg.nested("workload", n_requests=n_requests)
    if loads is not None:
        cfg = cfg.nested("sweep", loads=loads)
    from lenpred.data.rundir import RunDir

    card = RunDir.open(str(run)).card
    outlets = read_predictions(outlets_table, card=card)
    read_predictions(prefill_table, card=card)  # refuse a table of another run before simulating
    if keys is None:
        keys = outlets.frame[outlets.frame["sample_idx"] >= 0][["prompt_id", "sample_idx"]]
    wl = sample_workload(cfg.workload, run, keys, cfg.seed)
    res = run_sweep(cfg, progress=progress, workload=wl)
    dest = Path(req.out)
    res.write(dest)
    (dest / "schedule.json").write_text(json.dumps(schedule_table(res), indent=2) + "\n")
    return res
