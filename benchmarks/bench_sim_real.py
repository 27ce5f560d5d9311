"""What a real prediction is worth: the simulator's reproduction experiment with a head's predictions.

The workload is made of the run's **test prompts' samples** (no prompt any head was trained on; the
run-directory source with ``roles: ["test"]``), drawn with replacement into Poisson arrivals at
multiples of the cluster's measured saturation throughput, on the reproduction's cluster (4 prefill
+ 8 decode instances, ``llama8b-h100`` profile). The arms (``experiments/sim/real_predictions.json``):

* ``fcfs+rr`` -- first come first served, round-robin dispatch (the baseline: no prediction);
* ``sjf+lpt NAME`` -- shortest predicted job first, least-predicted-tokens dispatch, with a real
  predictions table per ``--predictions NAME=FILE`` (``lenpred predict --roles test``) or per
  ``--heads NAME=DIR`` (predicted here on the test prompts, as ``lenpred bench`` does);
* ``sjf+lpt prompt-median`` -- the bound itself as a predictor: each sample predicted by the median of
  its prompt's *other* samples (``lenpred.data.lengths.loo_median``, the bench's prompt-median row);
* ``sjf+lpt true lengths`` -- the oracle;
* ``sjf lognormal relX`` -- the reproduction's synthetic noise model (``true * exp(sigma Z)``) at the
  first table's own relative MAE on these samples (``--no-matched-noise`` leaves it out): same
  error size, the error *shape* of a noise model that sees the truth.

It prints the short-request P99 end-to-end latency table (the baseline's change per arm) and each
arm's prediction error on the workload's samples (MAE averaged over prompts, and over the oracle
bound of the same test prompts), and writes ``OUT/real_predictions.json`` (that summary + the
table), ``OUT/results.json`` / ``config.json`` / ``table.md`` (as ``lenpred simulate``) and plots.

    lenpred train --run data/runs/smollm2-sharegpt --features data/features/smollm2-sharegpt \\
        --predictor moe --out out/heads/moe
    lenpred predict --head out/heads/moe --run data/runs/smollm2-sharegpt \\
        --features data/features/smollm2-sharegpt --roles test --out out/preds/moe.parquet
    python benchmarks/bench_sim_real.py --run data/runs/smollm2-sharegpt \\
        --predictions moe=out/preds/moe.parquet --out out/sim/real_predictions
    # --loads 1,1.05,1.1,1.2  --n-requests 20000  --config FILE  --no-plots
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "experiments" / "sim" / "real_predictions.json"
QUEUE, DISPATCH = "sjf", "least-predicted-tokens"


def _named(items: Sequence[str], what: str) -> list[tuple[str, str]]:
    from lenpred.errors import ConfigError

    out = []
    for it in items:
        name, sep, path = it.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(f"{what} {it!r} is not NAME=PATH", f"e.g. {what} moe=out/preds/moe.parquet")
        out.append((name.strip(), path.strip()))
    return out


def build_config(config: str | Path, run: str, tables: Sequence[tuple[str, str]], *, split: str | None = None,
                 loads: Sequence[float] | None = None, n_requests: int | None = None, seed: int | None = None,
                 plots: bool | None = None) -> Any:
    """The experiment config on ``run`` with one ``sjf+lpt NAME`` arm per predictions table (after the baseline)."""
    from lenpred.errors import ConfigError
    from lenpred.sim.config import PolicyConfig, PredictionConfig, SimConfig

    cfg = SimConfig.load(config)
    lc = cfg.workload.lengths
    if lc.source != "rundir":
        raise ConfigError(f"{config}: workload.lengths.source must be 'rundir', got {lc.source!r}",
                          "use experiments/sim/real_predictions.json or a copy of it")
    lc = lc.replace(path=str(run), **({"split": split} if split is not None else {}))
    cfg = cfg.replace(workload=cfg.workload.replace(lengths=lc, **({"n_requests": n_requests} if n_requests else {})))
    if loads is not None:
        cfg = cfg.nested("sweep", loads=tuple(loads))
    if seed is not None:
        cfg = cfg.replace(seed=seed)
    if plots is not None:
        cfg = cfg.replace(plots=plots)
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


def prediction_errors(cfg: Any, workload: Any) -> list[dict[str, Any]]:
    """Per arm: its predictions' MAE on the workload's distinct samples (averaged over prompts, as the
    bench and the bound average), from the same tables the simulation reads."""
    from lenpred.bench.metrics import per_prompt_mean
    from lenpred.sim.sweep import PredictionCache

    cache = PredictionCache(workload, cfg.seed)
    pop = workload.population  # prompt_id, sample_idx, n_tokens: the samples the workload draws from
    y = pop["n_tokens"].to_numpy(float)
    out = []
    for pol in cfg.policies:
        pc = cfg.prediction_for(pol)
        uses = pol.queue != "fcfs" or pol.dispatch != "round-robin"
        row: dict[str, Any] = {"arm": pol.name, "prediction": pc.to_dict() if uses else None, "mae": None,
                               "rel_mae_samples": None}
        if uses:
            a = cache.get(pc).for_samples(pop[["prompt_id", "sample_idx"]], what=f"predictions of arm {pol.name!r}")
            err = np.abs(a["pred_tokens"].to_numpy(float) - y)
            row["mae"] = float(per_prompt_mean(err, pop["prompt_id"].to_numpy()).mean())
            row["rel_mae_samples"] = float(err.mean() / y.mean())  # what the lognormal model's rel_mae means
        out.append(row)
    return out


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
            arm = PolicyConfig(name=f"{pol.name.split(' ')[0]} lognormal rel{rel:.3f}", queue=pol.queue,
                               dispatch=pol.dispatch, prediction=PredictionConfig(model="lognormal", rel_mae=rel))
            return cfg.replace(policies=tuple(pols[:i + 1] + [arm] + pols[i + 1:]))
    return cfg


def run_experiment(cfg: Any, say: Any = print, matched_noise: bool = True) -> tuple[Any, dict[str, Any]]:
    """Simulate every arm at every load; the sweep result and the summary dictionary (``matched_noise``:
    add :func:`with_matched_noise`'s arm)."""
    from lenpred.bench import evaluate
    from lenpred.sim.sweep import run_sweep
    from lenpred.sim.workload import build_workload

    lc = cfg.workload.lengths
    wl = build_workload(cfg.workload, cfg.seed)
    errors = prediction_errors(cfg, wl)  # every table is checked (card, coverage) before any run
    if matched_noise:
        cfg = with_matched_noise(cfg, errors)
        errors = prediction_errors(cfg, wl)
    bound = None
    if lc.roles is not None and tuple(lc.roles) == ("test",) and lc.include_truncated:
        from lenpred.data.split import load_split

        b = evaluate(lc.path, [], split=load_split(lc.path, lc.split, require_complete=False), n_boot=10).bound
        bound = {"oracle_mae": b.oracle_mae, "n_prompts": b.n_prompts, "n_samples": b.n_samples}
        for e in errors:
            e["mae_over_bound"] = None if e["mae"] is None else e["mae"] / b.oracle_mae
    res = run_sweep(cfg, progress=say, workload=wl)
    summary = {
        "schema": "lenpred.sim_real/1", "run": lc.path, "roles": list(lc.roles or []),
        "workload": {"n_requests": cfg.workload.n_requests, "distinct_samples": int(len(wl.population)),
                     "prompts": int(wl.population["prompt_id"].nunique())},
        "bound": bound, "arms": errors, "capacity_rps": res.capacity_rps, "short_threshold_tokens": res.short_threshold,
        "baseline": res.baseline, "table_short_p99_e2e": res.table(), "table_all_p99_e2e": res.table(group="all"),
        "wall_s": res.wall_s, "config": cfg.to_dict(),
    }
    return res, summary


def print_errors(summary: dict[str, Any]) -> str:
    from rich.console import Console
    from rich.table import Table

    b = summary["bound"]
    w = summary["workload"]
    title = (f"predictions on the workload's {w['distinct_samples']} samples of {w['prompts']} prompts "
             f"(roles {', '.join(summary['roles']) or 'all'})"
             + (f"; oracle bound {b['oracle_mae']:.1f} tokens" if b else ""))
    t = Table(title=title, title_justify="left")
    header = ["arm", "prediction", "MAE (tokens, over prompts)", "MAE / bound", "rel. MAE (samples)"]
    for h in header:
        t.add_column(h, justify="left" if h in ("arm", "prediction") else "right")
    md = ["| " + " | ".join(header) + " |", "|---|---|---:|---:|---:|"]
    for e in summary["arms"]:
        p = e["prediction"]
        what = "-" if p is None else (f"table {Path(p['path']).name}" if p["model"] == "table" else p["model"])
        if p is not None and p["model"] == "lognormal":
            what += f" (rel_mae {p['rel_mae']:g})"
        cells = [e["arm"], what, "-" if e["mae"] is None else f"{e['mae']:.1f}",
                 "-" if e.get("mae_over_bound") is None else f"{e['mae_over_bound']:.3f}",
                 "-" if e["rel_mae_samples"] is None else f"{e['rel_mae_samples']:.3f}"]
        t.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    Console(width=140).print(t)
    return "\n".join([title, "", *md])


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
    ap.add_argument("--loads", default=None, help="comma-separated loads (multiples of capacity) overriding the config")
    ap.add_argument("--n-requests", type=int, default=None, help="requests in the workload (config: 40,000)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--no-matched-noise", action="store_true",
                    help="leave out the lognormal arm at the first table's own relative error")
    ap.add_argument("--out", default="out/sim/real_predictions", help="output folder")
    a = ap.parse_args(argv)

    from lenpred.errors import ConfigError, LenpredError
    from lenpred.fileio import atomic_write_json

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    out = Path(a.out)
    try:
        tables = _named(a.predictions, "--predictions")
        heads = _named(a.heads, "--heads")
        if not tables and not heads:
            raise ConfigError("no predictions to simulate", "pass --predictions NAME=FILE (lenpred predict --roles test) "
                              "or --heads NAME=DIR --features FEATS")
        names = [n for n, _ in tables + heads]
        if len(set(names)) != len(names):
            raise ConfigError(f"predictor names must be unique, got {names}", "pass distinct NAME=... values")
        loads = None
        if a.loads is not None:
            try:
                loads = [float(x) for x in a.loads.split(",") if x.strip()]
            except ValueError:
                raise ConfigError(f"--loads must be comma-separated numbers, got {a.loads!r}") from None
        build_config(a.config, a.run, tables, split=a.split)  # a bad config or run fails before any prediction
        if heads:
            tables += heads_to_tables(heads, a.run, a.features, a.split, out)
        cfg = build_config(a.config, a.run, tables, split=a.split, loads=loads, n_requests=a.n_requests, seed=a.seed,
                           plots=False if a.no_plots else None)
        res, summary = run_experiment(cfg, say=say, matched_noise=not a.no_matched_noise)
    except LenpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from lenpred.commands.simulate import print_table

    path = res.write(out)
    md_err = print_errors(summary)
    md = print_table(res)
    (out / "table.md").write_text(md + "\n\n" + md_err + "\n")
    atomic_write_json(out / "real_predictions.json", summary)
    if cfg.plots:
        from lenpred.sim.plots import write_plots

        for p in write_plots(res, out):
            print(f"plot: {p}")
    print(f"results: {out / 'real_predictions.json'}, {path} ({res.wall_s:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
