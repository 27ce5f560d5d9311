"""What each ``lenpred outlets`` subcommand does once its flags are parsed (the library half of the CLI).

* :func:`features` -- compute (or resume) a run's trajectory features, or merge ``--shard I/N`` outputs;
* :func:`train_variant` -- fit an ``outlets`` head variant (:data:`lenpred.outlets.spec.VARIANTS`) on
  the rows of the split's ``train`` prompts, early stopping and interval calibration on its ``val``
  prompts; test prompts are never read. Saved with the run's model and sampling card and the
  trajectory spec (draft head, target);
* :func:`predict_table` -- a predictions table with re-predictions
  (:func:`lenpred.outlets.schedule.outlets_predictions`) for the simulator;
* :func:`bench` -- every method on the test prompts: on the live series (:mod:`lenpred.outlets.livebench`,
  the headline) and at the fraction-of-L and token points (:mod:`lenpred.outlets.evaluate`), for a report
  folder (an ``outlets-bench`` artifact that :func:`lenpred.report.outlets.write_bench` writes:
  ``outlets_live.json``, ``outlets_bench.json``, its schema, ``outlets_bench.md`` and the plots);
* :func:`schedule` -- the simulator's value-for-scheduling experiment
  (:func:`lenpred.outlets.schedule.run_schedule`), re-predictions made from a head if needed; its
  table and plots are :func:`lenpred.report.outlets.write_schedule`'s.

These return data; ``lenpred.commands.outlets`` hands it to :mod:`lenpred.report.outlets`.

Each raises :class:`~lenpred.errors.LenpredError` before writing anything when an input is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lenpred.errors import ConfigError, DataError
from lenpred.io.artifacts import Rerun, check_out

if TYPE_CHECKING:
    from lenpred.outlets.bench_files import BenchRequest
    from lenpred.outlets.schedule import ScheduleRequest

__all__ = ["default_trajectory_out", "features", "train_variant", "predict_table", "bench", "schedule"]


# ---------------------------------------------------------------- features
def default_trajectory_out(run: str, draft: str, roles: str, shard: str | None) -> str:
    """Where ``lenpred outlets features`` writes without ``--out``: under ``$LENPRED_HOME/trajectories``,
    named by the run, the draft head, the roles and the shard."""
    from lenpred.features.shards import parse_shard
    from lenpred.io.paths import home

    i_sh, n_sh = parse_shard(shard)
    tail = f"-shard-{i_sh}-of-{n_sh}" if n_sh > 1 else ""
    name = f"{Path(run).resolve().name}--{Path(draft).resolve().name}--{roles.replace(',', '-')}{tail}"
    return str(home() / "trajectories" / name)


def features(req: Any, *, merge: Sequence[str] | None = None, log: Callable[[str], None] | None = None) -> str:
    """``lenpred outlets features``: merge the shard outputs ``merge`` into ``req.out``, or compute the
    trajectory features that ``req`` (a :class:`~lenpred.outlets.extract.TrajectoryRequest`) names
    (:func:`~lenpred.outlets.extract.compute_trajectory`). Returns the summary line."""
    from dataclasses import replace

    from lenpred.outlets.extract import compute_trajectory, parse_roles
    from lenpred.outlets.store import merge_trajectories

    out, run, draft, shard = req.out, req.run, req.draft, req.shard
    if merge is not None:
        if out is None:
            raise ConfigError("--merge needs --out (the merged trajectory)", "lenpred outlets features --merge S0 S1 --out TRAJ")
        if run is not None or shard is not None or draft is not None:
            raise ConfigError("--merge combines finished shards; it takes no --run, --draft or --shard",
                              "lenpred outlets features --merge SHARD_OUT... --out TRAJ")
        traj = merge_trajectories(out, merge)
        return f"merged {len(merge)} shard(s): {traj.n} rows -> {out}"
    if run is None or draft is None:
        raise ConfigError("lenpred outlets features needs --run RUN and --draft HEAD (or --merge SHARD...)",
                          "lenpred outlets features --run data/runs/NAME --draft HEAD --out TRAJ")
    for flag, v in (("--max-prompts", req.max_prompts), ("--max-samples-per-prompt", req.max_samples_per_prompt)):
        if v is not None and v < 1:
            raise ConfigError(f"{flag} must be >= 1, got {v}", f"pass {flag} 1 or more, or leave it out for all")
    from lenpred.features.shards import parse_shard

    out = out or default_trajectory_out(run, draft, req.roles, shard)
    res = compute_trajectory(replace(req, out=out, roles=parse_roles(req.roles), shard=parse_shard(shard)), log=log)
    return res.summary()


# ---------------------------------------------------------------- train
def train_variant(traj_path: str, run: str, variant: str, params: dict[str, Any] | None = None,
                  out: str | None = None, split: str | None = None, early_stopping: bool = True) -> tuple[Any, dict[str, Any]]:
    """Fit one variant on the split's train rows (val for early stopping) and save it to ``out``."""
    import numpy as np

    import lenpred.outlets.head  # noqa: F401 - registers the outlets head
    from lenpred.data.rundir import RunDir
    from lenpred.outlets.spec import VARIANTS, row_weights
    from lenpred.outlets.store import role_rows
    from lenpred.predictors.pipeline import run_cap
    from lenpred.predictors.registry import make_predictor

    if variant not in VARIANTS:
        raise ConfigError(f"unknown outlets variant {variant!r}", f"use one of: {', '.join(VARIANTS)}")
    if out is not None:
        check_out(out, kind="head")
    head = make_predictor("outlets", {**VARIANTS[variant], **(params or {})})
    head._check_params()
    rd = RunDir.open(run)
    traj, sp, train = role_rows(traj_path, rd, "train", "compute trajectory features with --roles train,val,test", split)
    sp.check_no_test(train.index["prompt_id"].unique(), what="outlets training rows")
    val = traj.for_prompts(sorted(sp.val)) if early_stopping else None
    if val is not None and val.n == 0:
        val = None
    head.fit(train, X_val=val, cap=run_cap(rd.card))
    val_mae = None
    if val is not None:
        val_mae = float(np.average(np.abs(head.predict(val) - val.index["remaining"].to_numpy(float)),
                                   weights=row_weights(val.index)))
    info = {"variant": variant, "run": str(rd.path), "card_hash": rd.card_hash, "trajectory": str(traj_path),
            "n_rows": int(train.n), "n_samples": int(len(train.index[["prompt_id", "sample_idx"]].drop_duplicates())),
            "val_prompts": int(val.index["prompt_id"].nunique()) if val is not None else 0, "val_mae": val_mae,
            "seconds": float(head.fit_seconds_), "train_log": head.train_log_}
    if out is not None:
        head.save(out, card=rd.card, meta=info)
    return head, info


# ---------------------------------------------------------------- predict
def predict_table(head_path: str, traj_path: str, run: str, roles: Sequence[str] = ("test",),
                  split: str | None = None, prefill: str | None = None) -> Any:
    """The :class:`~lenpred.predictions.Predictions` of an outlets head on the trajectory rows of the
    split's ``roles`` prompts, with re-predictions and their quantiles. ``head_path`` may be a prefill
    anchor (``lenpred outlets anchor``): its OUTLETS head blended with ``prefill`` (``[NAME=]FILE``, the
    prefill head's table on those prompts) carried along the trajectory."""
    import lenpred.outlets.head  # noqa: F401 - registers the outlets head
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import ROLES, load_split
    from lenpred.io.artifacts import load_artifact
    from lenpred.outlets.schedule import outlets_predictions
    from lenpred.outlets.store import load_trajectory
    from lenpred.predictors.io import read_head

    bad = sorted(set(roles) - set(ROLES))
    if bad or not roles:
        raise ConfigError(f"unknown split role(s) {bad or list(roles)}", f"roles are {', '.join(ROLES)}")
    rd = RunDir.open(run)
    is_anchor = load_artifact(head_path, verify=False).meta.get("kind") == "outlets-anchor"
    if prefill is not None and not is_anchor:
        raise ConfigError(f"--prefill-predictions is read only by a prefill anchor or a counter head; {head_path} is neither",
                          "drop --prefill-predictions, or pass the anchor (lenpred outlets anchor) as --head")
    if not is_anchor:
        head, art = read_head(head_path, card=rd.card)
        if head.name != "outlets":
            raise DataError(f"{head_path} is a {head.name} head, not an outlets head", "use `lenpred predict` for prefill heads")
    sp = load_split(rd, split, require_complete=False)
    traj = load_trajectory(traj_path, card=rd.card)
    want = sorted(set().union(*(sp.ids(r) for r in roles)))
    sub = traj.for_prompts(want)
    if sub.n == 0:
        raise DataError(f"trajectory {traj_path} has no row of a prompt of role {', '.join(roles)}",
                        "compute trajectory features for those prompts")
    if is_anchor:
        return _anchored_table(head_path, sub, rd, prefill)
    variant = (art.meta.get("train") or {}).get("variant") or "outlets"
    return outlets_predictions(head, sub, rd.card, source=str(head_path), variant=variant)


def _anchored_table(anchor_path: str, sub: Any, rd: Any, prefill: str | None) -> Any:
    """The predictions table of a prefill anchor on trajectory rows ``sub``."""
    from lenpred.outlets.anchor import load_anchor
    from lenpred.outlets.bench_files import anchored_method, named, prefill_method
    from lenpred.outlets.schedule import remaining_predictions
    from lenpred.predictors.pipeline import run_cap

    want = str(load_anchor(anchor_path, card=rd.card).prefill.get("name"))
    if prefill is None:
        raise ConfigError(f"{anchor_path} is a prefill anchor: it blends its OUTLETS head with the prefill predictions {want!r}",
                          f"pass --prefill-predictions {want.removeprefix('prefill-')}=FILE (lenpred predict on these roles)")
    [(name, path)] = named([prefill])
    pre, _ = prefill_method(name, path, sub.index, rd.card, run_cap(rd.card))
    m = anchored_method(None, anchor_path, [pre], sub, rd.card)
    r = m.remaining
    return remaining_predictions(sub.index, r.q50, r.q10, r.q50, r.q90, None, rd.card, made_by="outlets",
                                 config={"anchor": str(anchor_path), "prefill": str(path)},
                                 note=f"the prefill anchor's remaining tokens ({r.note}) at the trajectory artifact's positions")


# ---------------------------------------------------------------- bench
@dataclass(frozen=True)
class BenchRun:
    """What :func:`bench` computed: the bench, the inputs it records (the artifact's config) and the run's card."""

    result: Any
    config: dict[str, Any]
    card: dict[str, Any]
    live: Any = None  # the live series (lenpred.outlets.livebench.LiveBench): the headline


def bench(req: BenchRequest, out: str) -> BenchRun:
    """Score the heads and the carried prefill tables ``req`` names on the test prompts' trajectory
    rows, once ``out`` is known to be writable (an ``outlets-bench`` report folder, written by
    :func:`lenpred.report.outlets.write_bench`)."""
    from lenpred.data.rundir import RunDir
    from lenpred.outlets.bench_files import run_benches

    check_out(Path(out), kind="outlets-bench")
    if not req.heads and not req.prefill_predictions and not req.anchors and not req.counters:
        raise ConfigError("nothing to bench", "pass --heads HEAD..., --counters HEAD... and/or --prefill-predictions FILE...")
    live, res = run_benches(req)
    return BenchRun(res, req.config(), RunDir.open(req.run).card, live)


# ---------------------------------------------------------------- schedule
def schedule(req: ScheduleRequest, progress: Callable[[str], None] | None = None) -> Any:
    """The value-for-scheduling experiment into ``req.out``: the OUTLETS table is
    ``req.outlets_predictions``, or made here from ``req.outlets_head`` on ``req.traj``'s test rows
    (``out/outlets_predictions.parquet``). Returns the sweep (:func:`lenpred.report.outlets.write_schedule`
    adds ``schedule.md`` and the plots)."""
    from dataclasses import replace

    from lenpred.outlets.schedule import run_schedule

    out_p = Path(req.out)
    inputs = {"--run": req.run, "--prefill-predictions": req.prefill_predictions, "--config": str(req.config),
              "--outlets-head": req.outlets_head, "--traj": req.traj, "--outlets-predictions": req.outlets_predictions}
    # run_schedule's folder is not an artifact (no meta.json): one it wrote is replaced like a rerun
    check_out(out_p, kind="outlets-schedule",
              rerun=Rerun(folder=lambda d: (d / "schedule.json").is_file() or (d / "results.json").is_file()),
              inputs={k: v for k, v in inputs.items() if v is not None})
    table = req.outlets_predictions
    if table is None:
        if req.outlets_head is None or req.traj is None:
            raise ConfigError("no OUTLETS predictions to schedule with",
                              "pass --outlets-head HEAD with --traj TRAJ, or --outlets-predictions FILE")
        preds = predict_table(req.outlets_head, req.traj, req.run, roles=("test",), split=req.split)
        out_p.mkdir(parents=True, exist_ok=True)
        table = str(preds.write(out_p / "outlets_predictions.parquet"))
    return run_schedule(replace(req, outlets_predictions=table), progress=progress)
