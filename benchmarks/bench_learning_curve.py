"""The learning curve: each head's MAE / bound on the fixed test split as the training set grows.

For every training-set size (default 400, 1,000 and all of the split's training prompts) a seeded
subset of the split's ``train`` prompts is drawn -- nested: the 400 are the first 400 of the 1,000 --
and every chosen head is trained on it with :func:`lenpred.predictors.pipeline.train_on_run` (early
stopping on the split's unchanged ``val`` prompts), predicted on the test prompts with
:func:`~lenpred.predictors.pipeline.predict_run` and scored by :func:`lenpred.bench.evaluate` -- the
same code as ``lenpred train / predict / bench``; only the split file handed to them is a copy of the
run's with its ``train`` role cut to the subset. The test prompts and the bound never change, so the
curve shows how much of the gap to the bound is a matter of training data.

    python -m benchmarks.bench_learning_curve --run data/runs/smollm2-sharegpt \\
        --features data/features/smollm2-sharegpt --out out/bench/learning-curve
    # --sizes 400,1000,all  --heads constant,prompt-length,ridge,mlp,softlabel,moe  --repeats 3
    # --param mlp.hidden=128 (per head)  --n-boot 1000

Sizes above the number of training prompts the split has are cut to it (and said so). With
``--repeats R`` each size is drawn R times (subset seed ``--seed + r``; heads with a ``seed``
hyperparameter get seed ``r``) and the table gives the mean and sd over repeats (at ``all`` every
draw is the same set of prompts, so there only the heads' own seeds vary). Resumable: every
(repeat, size, head) cell keeps its head, predictions and training report under ``OUT/work/`` and a
rerun skips the cells whose training prompts and hyperparameters are unchanged.

Writes ``OUT/learning_curve.json`` (protocol, bound, one record per cell, the mean per size and
head), ``OUT/learning_curve.md`` (the table) and ``OUT/learning_curve.png`` (MAE / bound against
training prompts, one line per head, the bound at 1.0 and the leave-one-out prompt median dashed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_HEADS = ("constant", "prompt-length", "ridge", "mlp", "softlabel", "moe")
DEFAULT_SIZES = "400,1000,all"
ORACLE_ROW = "prompt-median (oracle)"


# ------------------------------------------------------------------------------------------ plan
def curve_order(train_ids: Sequence[str], seed: int) -> list[str]:
    """The training prompts in a seeded hash order; a size-n subset is the first n (nested subsets).
    A hash of the prompt id (not a permutation of positions) keeps a prompt's place when the run grows."""
    def key(p: str) -> bytes:
        return hashlib.sha256(f"{seed}:curve:{p}".encode()).digest()

    return sorted(train_ids, key=key)


def parse_sizes(spec: str, n_train: int) -> tuple[list[int], list[str]]:
    """Sizes from ``"400,1000,all"`` cut to ``n_train`` (deduplicated, ascending), and notes on the cuts."""
    from lenpred.errors import ConfigError

    sizes: list[int] = []
    notes: list[str] = []
    for tok in (t.strip() for t in spec.split(",") if t.strip()):
        if tok == "all":
            n = n_train
        else:
            try:
                n = int(tok)
            except ValueError:
                raise ConfigError(f"--sizes entry {tok!r} is not a whole number or 'all'", "e.g. --sizes 400,1000,all") from None
            if n < 2:
                raise ConfigError(f"--sizes entry {n} is below 2", "a head needs at least 2 training prompts")
            if n > n_train:
                notes.append(f"size {n} cut to {n_train}: the split has only {n_train} training prompts so far")
                n = n_train
        if n not in sizes:
            sizes.append(n)
    if not sizes:
        raise ConfigError("--sizes is empty", "e.g. --sizes 400,1000,all")
    return sorted(sizes), notes


def parse_head_params(items: Sequence[str], heads: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``HEAD.KEY=VALUE`` -> {head: {key: value}} (values parsed as in ``lenpred train --param``)."""
    from lenpred.errors import ConfigError
    from lenpred.predictors.pipeline import parse_params

    out: dict[str, dict[str, Any]] = {h: {} for h in heads}
    for it in items:
        head, dot, rest = it.partition(".")
        if not dot or head not in out:
            raise ConfigError(f"--param {it!r} is not HEAD.KEY=VALUE for one of the heads ({', '.join(heads)})",
                              "e.g. --param mlp.hidden=128")
        out[head].update(parse_params([rest]))
    return out


def _ids_sha(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Cell:
    repeat: int
    size: int
    head: str
    params: dict[str, Any]
    train_ids: tuple[str, ...]

    @property
    def tag(self) -> str:
        return f"r{self.repeat}-n{self.size}"

    def key(self, card_hash: str, features: str | None) -> dict[str, Any]:
        """What a finished cell must match to be reused."""
        return {"head": self.head, "params": self.params, "n_train": len(self.train_ids),
                "train_ids_sha": _ids_sha(self.train_ids), "card_hash": card_hash,
                "features": None if features is None else str(Path(features).resolve())}


# ------------------------------------------------------------------------------------------ run
def _subset_split(split: Any, train_ids: Sequence[str]) -> Any:
    """The run's split with its train role cut to ``train_ids`` (val and test unchanged)."""
    from lenpred.data.split import Split

    keep = set(train_ids)
    roles = {p: r for p, r in split.roles.items() if r != "train" or p in keep}
    return Split(split.card_hash, split.config, roles)


def _head_params(name: str, params: dict[str, Any], repeat: int) -> dict[str, Any]:
    from lenpred.predictors.registry import PREDICTORS

    p = dict(params)
    if "seed" in PREDICTORS.get(name).param_names() and "seed" not in p and repeat:
        p["seed"] = repeat  # repeat 0 keeps each head's own default seed (the heads lenpred train makes)
    return p


def run_cell(cell: Cell, run: Any, features: str | None, split_path: Path, work: Path) -> tuple[Any, dict[str, Any]]:
    """Train, predict the test prompts, keep both; reuse a finished cell with the same key."""
    from lenpred.predictions import read_predictions
    from lenpred.predictors.pipeline import TrainPrompts, predict_run, train_on_run

    d = work / cell.tag
    head_dir, pred_file, info_file = d / f"{cell.head}.head", d / f"{cell.head}.preds.parquet", d / f"{cell.head}.json"
    key = cell.key(run.card_hash, features)
    if info_file.is_file() and pred_file.is_file():
        info = json.loads(info_file.read_text())
        if info.get("key") == key:
            return read_predictions(pred_file, card=run.card), info
    from lenpred.predictors.registry import PREDICTORS

    needs_features = PREDICTORS.get(cell.head).input_kind == "features"  # proxy reads the prompt texts
    _, rep = train_on_run(cell.head, cell.params, run.path, features if needs_features else None, out=head_dir,
                          prompts=TrainPrompts(split=split_path))
    preds, _ = predict_run(head_dir, run.path, features if needs_features else None, roles=["test"], split=split_path)
    preds.write(pred_file)
    from lenpred.io.fileio import atomic_write_json

    info = {"key": key, "train": {"seconds": rep.seconds, "n_train": rep.n_train, "n_train_samples": rep.n_train_samples,
                                  "n_val": rep.n_val, "val_mae": rep.val_mae,
                                  "epochs": (rep.train_log or {}).get("epochs_run")}}
    atomic_write_json(info_file, info)  # last: a cell without it is redone
    return preds, info


@dataclass(frozen=True)
class CurveConfig:
    """One learning curve: the run and its features, the output folder (``work/`` keeps finished cells),
    the training-set sizes, the heads (and their hyperparameters), the draws and the bootstrap."""

    run: str
    features: str | None
    out: Path
    sizes: str = DEFAULT_SIZES
    heads: Sequence[str] = DEFAULT_HEADS
    params: dict[str, dict[str, Any]] | None = None
    repeats: int = 1
    seed: int = 0
    n_boot: int = 1000
    split: str | None = None


def learning_curve(cfg: CurveConfig, say: Any = print) -> dict[str, Any]:
    """Run every cell and return the result dictionary (its cells kept under ``cfg.out / "work"``)."""
    from lenpred.bench import Bootstrap, evaluate
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split, write_split
    from lenpred.errors import ConfigError
    from lenpred.predictors.registry import PREDICTORS

    heads, repeats, seed = cfg.heads, cfg.repeats, cfg.seed
    if repeats < 1:
        raise ConfigError(f"--repeats must be >= 1, got {repeats}")
    for h in heads:
        PREDICTORS.get(h)  # an unknown name lists the valid ones
    params = cfg.params or {h: {} for h in heads}
    rd = RunDir.open(cfg.run)
    sp = load_split(rd, cfg.split, require_complete=False)
    train_all = sorted(sp.train)
    size_list, notes = parse_sizes(cfg.sizes, len(train_all))
    for n in notes:
        say(n)
    work = cfg.out / "work"
    cells: list[dict[str, Any]] = []
    bound = protocol = None
    oracle: dict[str, Any] | None = None
    t0 = time.perf_counter()
    for r in range(repeats):
        order = curve_order(train_all, seed + r)
        for n in size_list:
            ids = tuple(order[:n])
            sub = _subset_split(sp, ids)
            split_path = work / f"r{r}-n{n}" / "split.json"
            split_path.parent.mkdir(parents=True, exist_ok=True)
            write_split(sub, rd, split_path, force=True)  # a scratch copy: same test and val, fewer train
            preds, infos = [], []
            for h in heads:
                cell = Cell(r, n, h, _head_params(h, params.get(h, {}), r), ids)
                tc = time.perf_counter()
                p, info = run_cell(cell, rd, cfg.features, split_path, work)
                preds.append(p)
                infos.append(info)
                say(f"repeat {r} size {n} {h}: trained in {info['train']['seconds']:.1f} s "
                    f"({time.perf_counter() - tc:.1f} s with prediction)")
            res = evaluate(rd, preds, names=list(heads), split=sp, boot=Bootstrap(cfg.n_boot, seed=seed))
            if bound is None:
                d = res.to_dict()
                bound, protocol = d["bound"], d["protocol"]
                o = res.row(ORACLE_ROW)
                oracle = {"mae": o.metrics.mae, "mae_over_bound": o.mae_over_bound}
            for h, info in zip(heads, infos, strict=True):
                row = res.row(h)
                m = row.metrics
                cells.append({"repeat": r, "size": n, "head": h, "n_train_samples": info["train"]["n_train_samples"],
                              "mae": m.mae, "mae_ci": list(m.mae_ci), "mae_over_bound": row.mae_over_bound,
                              "excess": row.excess_over_bound, "coverage80": m.coverage80, "pinball": m.pinball,
                              "kendall_tau": m.kendall_tau, "r2": m.r2, "train_seconds": info["train"]["seconds"],
                              "epochs": info["train"]["epochs"], "val_mae": info["train"]["val_mae"]})
    result = {
        "schema": "lenpred.learning_curve/1",
        "run": str(rd.path), "features": cfg.features, "heads": list(heads), "sizes": size_list, "size_notes": notes,
        "repeats": repeats, "seed": seed, "n_boot": cfg.n_boot, "params": params,
        "split_train_prompts": len(train_all), "split_counts": sp.counts(),
        "protocol": protocol, "bound": bound, "prompt_median_oracle": oracle,
        "cells": cells, "summary": summarise(cells), "wall_s": time.perf_counter() - t0,
    }
    return result


def summarise(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sd over repeats per (size, head)."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["size"], c["head"]), []).append(c)
    out = []
    for (n, h), cs in groups.items():
        rel = np.array([c["mae_over_bound"] for c in cs], dtype=float)
        mae = np.array([c["mae"] for c in cs], dtype=float)
        cov = [c["coverage80"] for c in cs if c["coverage80"] is not None]
        out.append({"size": n, "head": h, "n": len(cs), "mae": float(mae.mean()),
                    "mae_over_bound": float(rel.mean()), "mae_over_bound_sd": float(rel.std(ddof=1)) if len(cs) > 1 else None,
                    "coverage80": float(np.mean(cov)) if cov else None,
                    "train_seconds": float(np.mean([c["train_seconds"] for c in cs]))})
    return out


# ------------------------------------------------------------------------------------------ report
def _cell_text(s: dict[str, Any]) -> str:
    t = f"{s['mae_over_bound']:.3f}"
    if s.get("mae_over_bound_sd") is not None:
        t += f" ± {s['mae_over_bound_sd']:.3f}"
    return t


def table_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per size, one column per head (MAE / bound), the mean samples used."""
    heads = result["heads"]
    by = {(s["size"], s["head"]): s for s in result["summary"]}
    samples: dict[int, list[int]] = {}
    for c in result["cells"]:
        samples.setdefault(c["size"], []).append(c["n_train_samples"])
    header = ["training prompts", "samples"] + heads
    rows = []
    for n in result["sizes"]:
        rows.append([str(n), f"{np.mean(samples[n]):.0f}"] + [_cell_text(by[(n, h)]) for h in heads])
    return header, rows


def headline(result: dict[str, Any]) -> list[str]:
    b, o = result["bound"], result["prompt_median_oracle"]
    p = result["protocol"]
    return [f"run: {result['run']} (card {p['card_hash']}); test: {p['test_prompts']} prompts, {p['test_samples']} samples; "
            f"split {result['split_counts']}",
            f"oracle bound on the test prompts: {b['oracle_mae']:.1f} tokens "
            f"[{b['oracle_mae_ci'][0]:.1f}, {b['oracle_mae_ci'][1]:.1f}] = 1.000; "
            f"prompt-median (oracle, LOO): {o['mae']:.1f} = {o['mae_over_bound']:.3f} x bound",
            "cells: MAE / bound on the test split" + (f" (mean ± sd over {result['repeats']} draws)" if result["repeats"] > 1 else "")]


def render_markdown(result: dict[str, Any]) -> str:
    header, rows = table_rows(result)
    out = ["# Learning curve: MAE / bound against training prompts", ""] + [f"- {x}" for x in headline(result)]
    out += [f"- {n}" for n in result["size_notes"]] + [""]
    out += ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def render_console(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=160)
    for line in headline(result):
        con.print(line, highlight=False)
    header, rows = table_rows(result)
    t = Table(title="learning curve: MAE / bound (test split)", title_justify="left")
    for c in header:
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(*r)
    con.print(t)


def plot(result: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(s["size"], s["head"]): s for s in result["summary"]}
    sizes = result["sizes"]
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for h in result["heads"]:
        y = np.array([by[(n, h)]["mae_over_bound"] for n in sizes])
        sd = np.array([by[(n, h)]["mae_over_bound_sd"] or 0.0 for n in sizes])
        line, = ax.plot(sizes, y, marker="o", label=h)
        if result["repeats"] > 1:
            ax.fill_between(sizes, y - sd, y + sd, color=line.get_color(), alpha=0.15)
    ax.axhline(1.0, color="black", lw=1.2, label="oracle bound")
    o = result["prompt_median_oracle"]["mae_over_bound"]
    ax.axhline(o, color="grey", lw=1, ls="--", label=f"prompt median, LOO ({o:.2f})")
    if len(sizes) > 1 and sizes[-1] / sizes[0] >= 4:
        ax.set_xscale("log")
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("training prompts")
    ax.set_ylabel("MAE / oracle bound (test split)")
    b = result["bound"]["oracle_mae"]
    ax.set_title(f"learning curve (bound {b:.0f} tokens, {result['protocol']['test_prompts']} test prompts)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write(result: dict[str, Any], out: Path, plots: bool = True) -> list[Path]:
    from lenpred.io.fileio import atomic_write_bytes, atomic_write_json

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "learning_curve.json", out / "learning_curve.md"]
    atomic_write_json(paths[0], result)
    atomic_write_bytes(paths[1], render_markdown(result).encode())
    if plots:
        paths.append(plot(result, out / "learning_curve.png"))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="run directory (its split.json: train / val / test)")
    ap.add_argument("--features", default=None, help="features artifact of --run (hidden-state heads)")
    ap.add_argument("--out", required=True, help="output folder (resumable: work/ keeps every finished cell)")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="training-set sizes, 'all' = every training prompt")
    ap.add_argument("--heads", default=",".join(DEFAULT_HEADS), help="comma-separated registered heads")
    ap.add_argument("--param", action="append", default=[], metavar="HEAD.KEY=VALUE", help="a head hyperparameter")
    ap.add_argument("--repeats", type=int, default=1, help="draws of the subsets per size (mean and sd)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the subset order (repeat r uses seed + r)")
    ap.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples for the MAE intervals")
    ap.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    ap.add_argument("--no-plots", action="store_true")
    a = ap.parse_args(argv)

    from lenpred.errors import LenpredError

    heads = [h.strip() for h in a.heads.split(",") if h.strip()]
    try:
        cfg = CurveConfig(a.run, a.features, Path(a.out), sizes=a.sizes, heads=heads,
                          params=parse_head_params(a.param, heads), repeats=a.repeats, seed=a.seed,
                          n_boot=a.n_boot, split=a.split)
        res = learning_curve(cfg, say=lambda m: print(m, file=sys.stderr))
        paths = write(res, Path(a.out), plots=not a.no_plots)
    except LenpredError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    render_console(res)
    for p in paths:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
