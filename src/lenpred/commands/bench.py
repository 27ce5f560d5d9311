"""`lenpred bench`: score predictions on a run's test split under its fixed card, relative to the bound."""

from __future__ import annotations

import argparse
from pathlib import Path

from lenpred.errors import ConfigError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run directory (its split.json gives the test prompts)")
    p.add_argument("--predictions", nargs="*", default=[], metavar="[NAME=]PATH",
                   help="predictions tables (lenpred predict / Predictions.write); NAME defaults to what made them")
    p.add_argument("--heads", nargs="*", default=[], metavar="[NAME=]DIR",
                   help="trained heads (lenpred train): predicted here on the run's test prompts")
    p.add_argument("--features", default=None,
                   help="features artifact of --run for hidden-state heads (default: computed as needed, under the "
                        "heads' feature spec, into out/features/<run name>; resumable, reused when up to date)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads when features are computed here")
    p.add_argument("--out", default=None, help="report folder (default out/bench/<run name>)")
    p.add_argument("--split", default=None, help="split file (default RUN/split.json)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of prompts for intervals")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-plots", action="store_true")


def _named(items: list[str]) -> list[tuple[str | None, str]]:
    out = []
    for it in items:
        name, sep, path = it.partition("=")
        out.append((name, path) if sep else (None, it))
    return out


def run(a: argparse.Namespace) -> int:
    from lenpred.bench import Bootstrap, evaluate
    from lenpred.checks import check_limit, check_threads
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import load_split
    from lenpred.io.artifacts import ArtifactHeader, check_out, write_artifact
    from lenpred.predictions import read_predictions
    from lenpred.report.bench import render_console, render_markdown, write_plots

    if a.n_boot < 10:
        raise ConfigError(f"--n-boot must be at least 10, got {a.n_boot}", "pass --n-boot 10 or more (default 1000)")
    check_limit("--n-boot", a.n_boot)
    check_threads(a.threads)
    rd = RunDir.open(a.run)
    out = Path(a.out) if a.out else Path("out") / "bench" / rd.path.name
    check_out(out, kind="bench", card=rd.card,
              inputs={"--run": a.run, "--predictions": [p for _, p in _named(a.predictions)],
                      "--heads": [p for _, p in _named(a.heads)], "--features": a.features, "--split": a.split})
    split = load_split(rd, a.split, require_complete=False)
    preds, names = [], []
    feats = a.features
    for name, path in _named(a.predictions):
        p = read_predictions(path, card=rd.card)
        preds.append(p)
        names.append(name or p.made_by)
    if a.heads:
        from lenpred.commands.heads import register_heads
        from lenpred.predictors.pipeline import features_for_heads, predict_run

        register_heads()
        if feats is None:
            default = Path("out") / "features" / rd.path.name
            found = features_for_heads([path for _, path in _named(a.heads)], rd.path, default, threads=a.threads)
            feats = None if found is None else str(found)
        for name, path in _named(a.heads):
            p, rep = predict_run(path, rd.path, feats, ["test"], a.split)
            preds.append(p)
            names.append(name or rep.predictor)
    if not preds:
        raise ConfigError("nothing to bench", "pass --heads DIR... (with --features) and/or --predictions FILE...")
    res = evaluate(rd, preds, names=names, split=split, boot=Bootstrap(a.n_boot, seed=a.seed))
    render_console(res, title=f"bench: {rd.path.name}, test split")
    md = render_markdown(res)
    files = {"bench.md": md.encode()}
    if not a.no_plots:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            for path in write_plots(res, Path(tmp)):
                files[path.name] = path.read_bytes()
    config = {"run": a.run, "predictions": a.predictions, "heads": a.heads, "features": feats, "split": a.split, "n_boot": a.n_boot, "seed": a.seed}
    art = write_artifact(out, ArtifactHeader(kind="bench", schema_version=1, config=config, card=rd.card, card_scope="run"),
                         json_files={"bench.json": res.to_dict()}, files=files)
    print(f"report: {art.path}/bench.md")
    return 0
