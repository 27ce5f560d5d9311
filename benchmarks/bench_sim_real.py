"""What a real prediction is worth: the simulator's reproduction experiment with a head's predictions.

The workload is made of the run's **test prompts' samples** (no prompt any head was trained on; the
run-directory source with ``roles: ["test"]``), drawn with replacement into Poisson arrivals at
multiples of the cluster's measured saturation throughput, on the reproduction's cluster (4 prefill
+ 8 decode instances, ``llama8b-h100`` profile). The arms (``experiments/sim/real_predictions.json``
plus the ones added here):

* ``fcfs+rr`` -- first come first served, round-robin dispatch (the baseline: no prediction);
* ``sjf+lpt NAME`` -- shortest predicted job first, least-predicted-tokens dispatch, with a real
  predictions table per ``--predictions NAME=FILE`` (``lenpred predict --roles test``) or per
  ``--heads NAME=DIR`` (predicted here on the test prompts, as ``lenpred bench`` does);
* ``fcfs+lpt NAME`` -- the same predictions used for dispatch only (FCFS queues): what balancing
  alone buys, with no request ever overtaken because of its prediction;
* ``sjf+lpt NAME q10`` -- SJF ordered by the table's lower quantile, ``pred - 1.2816 spread`` (the
  simulator's ``quantile_z``; the head's own q10 column is that, clipped at 0), dispatch by ``pred``;
* ``... agingR`` -- SJF with aging ``R`` tokens per second of waiting (``--aging``, default 100 and
  300) on each table, on the matched noise model and on the true lengths: a request predicted
  ``D`` tokens longer than another is overtaken only by requests arriving less than ``D / R``
  seconds after it;
* ``sjf+lpt prompt-median`` -- the bound itself as a predictor: each sample predicted by the median of
  its prompt's *other* samples (``lenpred.data.lengths.loo_median``, the bench's prompt-median row);
* ``sjf+lpt true lengths`` -- the oracle;
* ``sjf+lpt lognormal relX`` -- the reproduction's synthetic noise model (``true * exp(sigma Z)``) at
  the first table's own relative MAE on these samples (``--no-matched-noise`` leaves it out): same
  error size, the error *shape* of a noise model that sees the truth.

Besides each arm's prediction error (MAE over prompts, over the bound of the same test prompts) it
reports the error's *structure*, which is what a queue order feels: Kendall's tau between the queue
key and the true length (SJF without aging depends on the ranking only), the predictions' spread
over the truth's, and the share of short requests whose prediction sits in the top decile (the
requests SJF leaves to the end under overload; a short-request P99 tolerates 1%). At the highest
load it re-runs the baseline, the first table, the matched noise and the oracle and dissects their
short-request tails (which prompts, how predicted, how long in which queue, overtaken by whom).

Outputs: ``OUT/real_predictions.json`` (summary, per-arm rows, structure, tail anatomy),
``OUT/results.json`` / ``config.json`` (as ``lenpred simulate``), ``OUT/table.md`` and plots.
docs/sim_real.md has the method and the figures.

    lenpred train --run data/runs/smollm2-sharegpt --features data/features/smollm2-sharegpt \\
        --predictor moe --out out/heads/moe
    lenpred predict --head out/heads/moe --run data/runs/smollm2-sharegpt \\
        --features data/features/smollm2-sharegpt --roles test --out out/preds/moe.parquet
    python -m benchmarks.bench_sim_real --run data/runs/smollm2-sharegpt \\
        --predictions moe=out/preds/moe.parquet --out out/sim/real_predictions
    # --loads 1,1.05,1.1,1.2  --n-requests 20000  --aging 100,300|none  --no-extra-arms  --config FILE
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks import ROOT
from benchmarks.flags import float_list
from benchmarks.report.sim_real_report import print_anatomy, print_errors, print_rows
from lenpred.stats.quantiles import Z90

DEFAULT_CONFIG = ROOT / "experiments" / "sim" / "real_predictions.json"
QUEUE, DISPATCH = "sjf", "least-predicted-tokens"
AGING = (100.0, 300.0)  # tokens per second of waiting (``--aging``)
Q10_Z = -Z90  # the 10% quantile of N(0, 1): sjf key pred + z * spread = a normal q10
SHORT_NAMES = {"round-robin": "rr", "least-predicted-tokens": "lpt", "least-requests": "lr", "power-of-two": "p2c"}


def _named(items: Sequence[str], what: str) -> list[tuple[str, str]]:
    from lenpred.errors import ConfigError

    out = []
    for it in items:
        name, sep, path = it.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(f"{what} {it!r} is not NAME=PATH", f"e.g. {what} moe=out/preds/moe.parquet")
        out.append((name.strip(), path.strip()))
    return out


@dataclass(frozen=True)
class SimOverrides:
    """What the command line changes in the experiment config; ``None`` keeps the config's own."""

    split: str | None = None
    loads: Sequence[float] | None = None
    n_requests: int | None = None
    seed: int | None = None
    plots: bool | None = None


def build_config(config: str | Path, run: str, tables: Sequence[tuple[str, str]],
                 over: SimOverrides = SimOverrides()) -> Any:
    """The experiment config on ``run`` with one ``sjf+lpt NAME`` arm per predictions table (after the baseline)."""
    from lenpred.errors import ConfigError
    from lenpred.sim.config import PolicyConfig, PredictionConfig, SimConfig

    cfg = SimConfig.load(config)
    lc = cfg.workload.lengths
    if lc.source != "rundir":
        raise ConfigError(f"{config}: workload.lengths.source must be 'rundir', got {lc.source!r}",
                          "use experiments/sim/real_predictions.json or a copy of it")
    lc = lc.replace(path=str(run), **({"split": over.split} if over.split is not None else {}))
    sized = {"n_requests": over.n_requests} if over.n_requests else {}
    cfg = cfg.replace(workload=cfg.workload.replace(lengths=lc, **sized))
    if over.loads is not None:
        cfg = cfg.nested("sweep", loads=tuple(over.loads))
    if over.seed is not None:
        cfg = cfg.replace(seed=over.seed)
    if over.plots is not None:
        cfg = cfg.replace(plots=over.plots)
    arms = [PolicyConfig(name=f"sjf+lpt {name}", queue=QUEUE, dispatch=DISPATCH,
                         prediction=PredictionConfig(model="table", path=str(path))) for name, path in tables]
    pols = list(cfg.policies)
    base = cfg.sweep.baseline or pols[0].name
    i = next(k for k, p in enumerate(pols) if p.name == base) + 1
    return cfg.replace(policies=tuple(pols[:i] + arms + pols[i:]), sweep=cfg.sweep.replace(baseline=base))


def heads_to_tables(heads: Sequence[tuple[str, str]], run: str, features: str | None, split: str | None,
                    out: Path) -> list[tuple[str, str]]:
    """Predict the run's test prompts with each head (as ``lenpred bench --heads``); tables under OUT/predictions."""
    from lenpred.predictors.pipeline import predict_run

    tables = []
    for name, path in heads:
        preds, _ = predict_run(path, run, features, ["test"], split)
        dest = out / "predictions" / f"{name}.parquet"
        dest.parent.mkdir(parents=True, exist_ok=True)
        preds.write(dest)
        tables.append((name, str(dest)))
    return tables


def _uses_predictions(pol: Any) -> bool:
    return pol.policy.queue.name != "fcfs" or pol.policy.dispatch != "round-robin"


def kendall_tau(key: np.ndarray, y: np.ndarray) -> float | None:
    """Kendall's tau-b of ``key`` against ``y`` (None when either is constant)."""
    from scipy.stats import kendalltau

    t = kendalltau(key, y).statistic
    return None if not np.isfinite(t) else float(t)


def order_structure(key: np.ndarray, y: np.ndarray, short: np.ndarray) -> dict[str, float | None]:
    """What a queue ordered by ``key`` does to the true lengths ``y`` (``short``: y below the threshold):
    Kendall's tau, the spread of the key over that of the truth, and the share of short requests whose
    key is in the top decile (those SJF serves last)."""
    top = key >= np.quantile(key, 0.9)
    return {"kendall_tau": kendall_tau(key, y),
            "sd_ratio": float(key.std() / y.std()) if y.std() > 0 else None,
            "short_in_top_decile": float(top[short].mean()) if short.any() else None}


def short_threshold(cfg: Any, workload: Any) -> float:
    """The short-request threshold the sweep uses (the config's, or the workload's median output)."""
    thr = cfg.metrics.short_threshold
    return float(np.median(workload.output)) if thr is None else float(thr)


def prediction_errors(cfg: Any, workload: Any) -> list[dict[str, Any]]:
    """Per arm: its predictions' MAE on the workload's distinct samples (averaged over prompts, as the
    bench and the bound average), from the same tables the simulation reads, and the structure of its
    queue key (:func:`order_structure`: ``pred``, or ``pred + quantile_z * spread``) on those samples."""
    from lenpred.bench.scoring import per_prompt_mean
    from lenpred.sim.sweep import PredictionCache

    cache = PredictionCache(workload, cfg.seed)
    pop = workload.population  # prompt_id, sample_idx, n_tokens: the samples the workload draws from
    y = pop["n_tokens"].to_numpy(float)
    short = y < short_threshold(cfg, workload)
    out = []
    for pol in cfg.policies:
        pc = cfg.prediction_for(pol)
        uses = _uses_predictions(pol)
        row: dict[str, Any] = {"arm": pol.name, "prediction": pc.to_dict() if uses else None, "mae": None,
                               "rel_mae_samples": None, "kendall_tau": None, "sd_ratio": None,
                               "short_in_top_decile": None}
        if uses:
            a = cache.get(pc).for_samples(pop[["prompt_id", "sample_idx"]], what=f"predictions of arm {pol.name!r}")
            p = a["pred_tokens"].to_numpy(float)
            err = np.abs(p - y)
            row["mae"] = float(per_prompt_mean(err, pop["prompt_id"].to_numpy()).mean())
            row["rel_mae_samples"] = float(err.mean() / y.mean())  # what the lognormal model's rel_mae means
            key = p
            if pol.policy.queue.name == "sjf" and pol.policy.queue.quantile_z:
                sp = a["spread"].to_numpy(float)
                key = np.where(np.isfinite(sp), p + pol.policy.queue.quantile_z * sp, p)
            if pol.policy.queue.name != "fcfs":
                row.update(order_structure(key, y, short))
        out.append(row)
    return out


def workload_structure(cfg: Any, workload: Any) -> dict[str, Any]:
    """What no prompt-only predictor can rank: the share of the true lengths' variance that lies within
    prompts, and Kendall's tau of the prompts' own (in-sample) medians against the samples: a ceiling,
    up to sampling noise, for any ranking that gives all samples of a prompt one key."""
    pop = workload.population
    y = pop["n_tokens"].astype(float)
    g = y.groupby(pop["prompt_id"])
    within = float(((y - g.transform("mean")) ** 2).mean() / y.var(ddof=0)) if y.var(ddof=0) > 0 else None
    med = g.transform("median").to_numpy()
    short = y.to_numpy() < short_threshold(cfg, workload)
    st = order_structure(med, y.to_numpy(), short)
    return {"within_prompt_variance_share": within, "prompt_median_in_sample": st,
            "short_threshold_tokens": short_threshold(cfg, workload)}


def with_matched_noise(cfg: Any, errors: Sequence[dict[str, Any]]) -> Any:
    """``cfg`` plus, after the first predictions-table arm, the synthetic lognormal noise model at that
    table's own relative error on the workload (the reproduction's yardstick, at the same MAE): the
    difference between the two arms is what the *shape* of a real predictor's errors costs."""
    from lenpred.sim.config import PolicyConfig, PredictionConfig

    pols = list(cfg.policies)
    for i, (pol, e) in enumerate(zip(pols, errors, strict=True)):
        pc = cfg.prediction_for(pol)
        if pc.model == "table":
            rel = round(float(e["rel_mae_samples"]), 3)
            arm = PolicyConfig(name=f"{pol.name.split(' ')[0]} lognormal rel{rel:.3f}", queue=pol.policy.queue.name,
                               dispatch=pol.policy.dispatch, prediction=PredictionConfig(model="lognormal", rel_mae=rel))
            return cfg.replace(policies=tuple(pols[:i + 1] + [arm] + pols[i + 1:]))
    return cfg


def with_extra_arms(cfg: Any, aging: Sequence[float] = AGING, extra: bool = True) -> Any:
    """``cfg`` plus, around each plain SJF arm (no aging, no quantile): its aging variants (one per rate
    in ``aging``) when it reads a table, the lognormal noise model or the true lengths; and, with
    ``extra``, for a table arm the dispatch-only arm (``fcfs`` + the same dispatch, before it) and the
    lower-quantile arm (``q10``: ordered by ``pred - 1.2816 spread``, when the table has a spread)."""
    from lenpred.predictions import read_predictions

    out = []
    for pol in cfg.policies:
        pc = cfg.prediction_for(pol)
        plain = _plain(pol)
        _, _, rest = pol.name.partition(" ")
        table = plain and pc.model == "table"
        if table and extra:
            d = pol.policy.dispatch
            out.append(pol.replace(name=f"fcfs+{SHORT_NAMES.get(d, d)} {rest or pol.name}",
                                   queue="fcfs", prefill_queue=None, prediction=pc))
        out.append(pol)
        if plain and pc.model in ("table", "lognormal", "oracle"):
            out.extend(pol.replace(name=f"{pol.name} aging{r:g}", aging=float(r)) for r in aging)
        if table and extra and read_predictions(pc.path).frame["spread"].notna().all():
            out.append(pol.replace(name=f"{pol.name} q10", quantile_z=Q10_Z))
    return cfg.replace(policies=tuple(out))


def tail_anatomy(res: Any, prompt_ids: np.ndarray, threshold: float, q: float = 99.0,
                 max_tail: int = 400, ranked: bool = True) -> dict[str, Any]:
    """Who makes up the short-request tail of one simulation (``res``: a SimResult; ``prompt_ids``
    indexed by request id): the short requests at or above the ``q`` percentile of short E2E, which
    prompts they are samples of, where their prediction ranks among all requests', how long they
    waited in queues, and how many later arrivals started decoding before them (``overtakers``,
    counted for at most ``max_tail`` of them) and how many of those were short themselves.
    ``ranked=False``: the arm does not use its predictions (no prediction percentile)."""
    from lenpred.sim.summary import latency_arrays

    lat = latency_arrays(res)
    e2e = lat["e2e"]
    done = np.isfinite(e2e)
    short = done & (res.output < threshold)
    if not short.any():
        return {"n_short": 0, "n_tail": 0}
    p = float(np.percentile(e2e[short], q))
    tail = np.flatnonzero(short & (e2e >= p))
    pid = np.asarray(prompt_ids)[res.rid]
    counts = pd.Series(pid[tail]).value_counts()
    pred_sorted = np.sort(res.pred)
    pct = np.searchsorted(pred_sorted, res.pred[tail], side="left") / res.n  # share of requests predicted lower
    admit = np.where(np.isfinite(res.t_decode_admit), res.t_decode_admit, res.t_prefill_start)
    n_over, n_over_short = [], 0
    for i in tail[:max_tail]:
        o = (res.arrival > res.arrival[i]) & (admit < admit[i])
        n_over.append(int(o.sum()))
        n_over_short += int((o & (res.output < threshold)).sum())
    wait = lat["queue"][tail]
    return {
        "n_short": int(short.sum()), "short_p99_s": p, "n_tail": int(tail.size), "tail_prompts": int(counts.size),
        "top5_prompts_share": float(counts.iloc[:5].sum() / tail.size),
        "top5_prompts": {str(k): int(v) for k, v in counts.iloc[:5].items()},
        "pred_percentile_median": float(np.median(pct)) if ranked else None, "true_tokens_median": float(np.median(res.output[tail])),
        "e2e_median_s": float(np.median(e2e[tail])), "queue_wait_median_s": float(np.median(wait)),
        "wait_share_median": float(np.median(wait / e2e[tail])),
        "overtakers_median": float(np.median(n_over)),
        "overtakers_short_share": float(n_over_short / max(sum(n_over), 1)),
    }


def anatomy_arms(cfg: Any) -> list[Any]:
    """The arms dissected at the highest load: the baseline, the first table's plain SJF arm, the matched
    noise model and the true lengths (plain SJF), those that exist."""
    base = cfg.sweep.baseline or cfg.policies[0].name
    picked: dict[str, Any] = {}
    for pol in cfg.policies:
        pc = cfg.prediction_for(pol)
        plain = _plain(pol)
        kind = "base" if pol.name == base else (pc.model if plain and pc.model in ("table", "lognormal", "oracle")
                                                 else None)
        if kind is not None and kind not in picked:
            picked[kind] = pol
    return [picked[k] for k in ("base", "table", "lognormal", "oracle") if k in picked]


def predictor_label(cfg: Any, pol: Any, names: dict[str, str]) -> str:
    if not _uses_predictions(pol):
        return "-"
    pc = cfg.prediction_for(pol)
    if pc.model == "table":
        return names.get(str(pc.path), Path(str(pc.path)).stem)
    if pc.model in ("lognormal", "additive"):
        return f"{pc.model} rel {pc.rel_mae:g}" if pc.mae is None else f"{pc.model} mae {pc.mae:g}"
    return {"oracle": "true lengths"}.get(pc.model, pc.model)


def _plain(pol: Any) -> bool:
    """A plain SJF arm: no aging, no quantile."""
    q = pol.policy.queue
    return bool(q.name == QUEUE and q.aging == 0 and not q.quantile_z)


def key_label(pol: Any) -> str:
    q = pol.policy.queue
    if q.name == "fcfs":
        return "arrival"
    if q.name == "sjf" and q.quantile_z:
        return "q10 = pred - 1.28 spread" if abs(q.quantile_z - Q10_Z) < 1e-9 else f"pred {q.quantile_z:+g} spread"
    return "pred" if q.name == "sjf" else q.name


def arm_rows(res: Any, names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per (load, arm): policy, predictor, aging, queue key, short and overall P99 E2E and their
    change vs the baseline."""
    names = names or {}
    short, every = res.table(), res.table(group="all")
    rows = []
    for rs, ra in zip(short, every, strict=True):
        for pol in res.config.policies:
            n = pol.name
            rows.append({
                "load": rs["load"], "arm": n,
                "policy": f"{pol.policy.queue.name}+{SHORT_NAMES.get(pol.policy.dispatch, pol.policy.dispatch)}",
                "predictor": predictor_label(res.config, pol, names), "aging": getattr(pol.policy.queue, "aging", 0.0), "key": key_label(pol),
                "short_p99_s": rs[n], "short_change": rs.get(f"{n} change", 0.0 if n == res.baseline else None),
                "all_p99_s": ra[n], "all_change": ra.get(f"{n} change", 0.0 if n == res.baseline else None),
            })
    return rows


def run_experiment(cfg: Any, say: Any = print, matched_noise: bool = True, aging: Sequence[float] = AGING,
                   extra: bool = True, anatomy: bool = True, names: dict[str, str] | None = None
                   ) -> tuple[Any, dict[str, Any]]:
    """Simulate every arm at every load; the sweep result and the summary dictionary (``matched_noise``:
    add :func:`with_matched_noise`'s arm; ``aging`` / ``extra``: :func:`with_extra_arms`; ``anatomy``:
    dissect the short tails at the highest load, :func:`tail_anatomy`)."""
    from lenpred.bench import Bootstrap, evaluate
    from lenpred.sim.sweep import PredictionCache, RunSetup, run_one, run_sweep
    from lenpred.sim.workload import build_workload

    lc = cfg.workload.lengths
    wl = build_workload(cfg.workload, cfg.seed)
    errors = prediction_errors(cfg, wl)  # every table is checked (card, coverage) before any run
    if matched_noise:
        cfg = with_matched_noise(cfg, errors)
    cfg = with_extra_arms(cfg, aging, extra)
    errors = prediction_errors(cfg, wl)
    bound = None
    if lc.roles is not None and tuple(lc.roles) == ("test",) and lc.include_truncated:
        from lenpred.data.split import load_split

        b = evaluate(lc.path, [], split=load_split(lc.path, lc.split, require_complete=False), boot=Bootstrap(10)).bound
        bound = {"oracle_mae": b.oracle_mae, "n_prompts": b.n_prompts, "n_samples": b.n_samples}
        for e in errors:
            e["mae_over_bound"] = None if e["mae"] is None else e["mae"] / b.oracle_mae
    res = run_sweep(cfg, progress=say, workload=wl)
    tails: list[dict[str, Any]] = []
    if anatomy:
        load = max((x for x in res.loads() if x is not None), default=None)
        rate = None if load is None else (load * res.capacity_rps if res.capacity_rps else load)
        cache = PredictionCache(wl, cfg.seed)
        pids = wl.keys["prompt_id"].to_numpy()
        for pol in anatomy_arms(cfg):
            sim = run_one(RunSetup.of(cfg), wl, pol, rate, cache=cache)
            tails.append({"arm": pol.name, "load": load,
                          **tail_anatomy(sim, pids, res.short_threshold, ranked=_uses_predictions(pol))})
    summary = {
        "schema": "lenpred.sim_real/2", "run": lc.path, "roles": list(lc.roles or []),
        "workload": {"n_requests": cfg.workload.n_requests, "distinct_samples": int(len(wl.population)),
                     "prompts": int(wl.population["prompt_id"].nunique())},
        "bound": bound, "arms": errors, "structure": workload_structure(cfg, wl), "tail_anatomy": tails,
        "capacity_rps": res.capacity_rps, "short_threshold_tokens": res.short_threshold,
        "baseline": res.baseline, "rows": arm_rows(res, names), "table_short_p99_e2e": res.table(),
        "table_all_p99_e2e": res.table(group="all"), "wall_s": res.wall_s, "config": cfg.to_dict(),
    }
    return res, summary


def _rates(text: str | None) -> tuple[float, ...]:
    from lenpred.errors import ConfigError

    if text is None:
        return AGING
    if text.strip().lower() in ("", "none", "0"):
        return ()
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--aging must be comma-separated tokens per second, got {text!r}",
                          "e.g. --aging 100,300, or --aging none") from None
    if any(not (np.isfinite(r) and r > 0) for r in rates):
        raise ConfigError(f"--aging rates must be > 0 tokens per second, got {text!r}", "or --aging none for no aging arms")
    return rates


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="run directory (its split.json gives the test prompts)")
    ap.add_argument("--predictions", action="append", default=[], metavar="NAME=FILE",
                    help="a predictions table of the run's test prompts (lenpred predict --roles test)")
    ap.add_argument("--heads", action="append", default=[], metavar="NAME=DIR",
                    help="a trained head (lenpred train), predicted here on the test prompts (needs --features)")
    ap.add_argument("--features", default=None, help="features artifact of --run (for --heads)")
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="simulator config (a run-directory workload)")
    ap.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    ap.add_argument("--loads", type=float_list, default=None,
                    help="comma-separated loads (multiples of capacity) overriding the config")
    ap.add_argument("--n-requests", type=int, default=None, help="requests in the workload (config: 40,000)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--no-matched-noise", action="store_true",
                    help="leave out the lognormal arm at the first table's own relative error")
    ap.add_argument("--aging", default=None, metavar="R1,R2",
                    help="aging rates (tokens/s) of the aging arms on tables, noise and true lengths "
                         f"(default {','.join(f'{r:g}' for r in AGING)}; 'none': no aging arms)")
    ap.add_argument("--no-extra-arms", action="store_true",
                    help="leave out the dispatch-only (fcfs+lpt) and lower-quantile (q10) arms of each table")
    ap.add_argument("--no-anatomy", action="store_true", help="skip the dissection of the short tails at the top load")
    ap.add_argument("--out", default="out/sim/real_predictions", help="output folder")
    a = ap.parse_args(argv)

    from lenpred.errors import ConfigError, LenpredError
    from lenpred.io.fileio import atomic_write_json

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    out = Path(a.out)
    try:
        aging = _rates(a.aging)
        tables = _named(a.predictions, "--predictions")
        heads = _named(a.heads, "--heads")
        if not tables and not heads:
            raise ConfigError("no predictions to simulate", "pass --predictions NAME=FILE (lenpred predict --roles test) "
                              "or --heads NAME=DIR --features FEATS")
        names = [n for n, _ in tables + heads]
        if len(set(names)) != len(names):
            raise ConfigError(f"predictor names must be unique, got {names}", "pass distinct NAME=... values")
        loads = a.loads
        build_config(a.config, a.run, tables, SimOverrides(split=a.split))  # a bad config or run fails before any prediction
        if heads:
            tables += heads_to_tables(heads, a.run, a.features, a.split, out)
        over = SimOverrides(split=a.split, loads=loads, n_requests=a.n_requests, seed=a.seed,
                            plots=False if a.no_plots else None)
        cfg = build_config(a.config, a.run, tables, over)
        res, summary = run_experiment(cfg, say=say, matched_noise=not a.no_matched_noise, aging=aging,
                                      extra=not a.no_extra_arms, anatomy=not a.no_anatomy,
                                      names={str(p): n for n, p in tables})
    except LenpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    path = res.write(out)
    parts = [print_rows(summary), print_errors(summary), print_anatomy(summary)]
    (out / "table.md").write_text("\n\n".join(x for x in parts if x) + "\n")
    atomic_write_json(out / "real_predictions.json", summary)
    if res.config.plots:
        from lenpred.report.sim_plots import write_plots

        for p in write_plots(res, out):
            print(f"plot: {p}")
    print(f"results: {out / 'real_predictions.json'}, {path} ({res.wall_s:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
