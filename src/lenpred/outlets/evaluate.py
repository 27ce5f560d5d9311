"""Remaining-length prediction scored along the trajectory, on the run's test prompts: the secondary
table. The headline is the live series (:mod:`lenpred.outlets.livebench`: the rows a server meets);
the progress points here place rows at fractions of each sample's true length, which a server never
knows.

What is measured (``lenpred outlets bench``), per method, on the rows of a trajectory artifact that
belong to the split's test prompts:

* **remaining-length MAE at progress points**: ``t0`` (t = 0), ``f10`` / ``f25`` / ``f50`` / ``f75``
  (t = floor(f L) of each sample's own true length L: the row at exactly that position, else the
  sample's nearest row, counted as ``inexact``), and by absolute tokens generated ``t32`` ... ``t512``
  (the rows at exactly that t, so only samples longer than it: the prompt mix changes along that
  series). Series ``progress`` = t0, f10 ... f75; series ``tokens`` = t0, t32 ... t512.
  Averages are over prompts of the per-prompt mean over its samples (as the prefill bench); 95%
  intervals resample prompts (:func:`lenpred.bench.scoring.point_metrics`);
* **80% interval coverage** at each point (share of rows inside [q10, q90]) and the pinball loss;
* **what a scheduler reads**, at each point: Kendall tau-b of the predicted against the true remaining
  length over the rows there (on the tokens series: the requests still running), and the precision and
  recall of the label "short" (t + predicted remaining below the median length of the test samples);
* **paired ratios**: each method's MAE over the reference's (the best carried prefill head: lowest
  MAE at t = 0, or ``reference=``) and over the carried oracle's, at each point and averaged over the
  ``progress`` series, with intervals from resampling prompts jointly (so the comparison is paired);
  ``beats_oracle_from``: the first point of a series from which the method's MAE is below the
  carried oracle's at that point and every later one (``..._ci``: the same with the whole interval
  of the paired ratio below 1), or null when it never is;
* **total length at t = 0**: at t = 0 the remaining length is the total, so the t0 MAE is the
  total-length MAE; it is reported against the prefill oracle bound on the same test prompts
  (:func:`lenpred.stats.oracle.mae_estimates`, capped lengths), with the prefill heads' own point
  predictions (``pred_tokens``) beside their carried median.

Methods: ``outlets*`` (trained heads), ``probe`` (the TRAIL-style probe: the ``probe`` variant of the
head), ``prefill-<name>`` (a prefill predictions table carried by survival conditioning),
``prefill-constant`` (training lengths carried the same way, prompts weighing the same), ``t-only``
(the same with every training sample weighing the same: the rows a server meets at t) and
``oracle-prompt`` (the carried prefill oracle); see :mod:`lenpred.outlets.baselines`. A head's
``made_for`` is the row scheme of the trajectory it was trained on.

The result is an :class:`OutletsBench` (pydantic; :meth:`OutletsBench.json_schema` is the JSON
schema of ``outlets_bench.json``, documented in docs/outlets.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lenpred import __version__
from lenpred.config import Config
from lenpred.errors import ConfigError, DataError
from lenpred.outlets.baselines import Remaining
from lenpred.outlets.spec import sample_codes
from lenpred.stats.bootstrap import Bootstrap

__all__ = [
    "FORMAT", "SCHEMA_VERSION", "FRACTIONS", "TOKENS", "PointSpec", "default_points", "point_rows", "MethodInput",
    "OutletsBench", "MethodResult", "Score", "PointInfo", "score_methods", "short_threshold_of", "bound_on", "Bootstrap",
]

DEFAULT_BOOT = Bootstrap()  # 1,000 resamples of prompts, 95% intervals, seed 0

FORMAT = "lenpred.outlets.bench"
SCHEMA_VERSION = 1
FRACTIONS = (0.1, 0.25, 0.5, 0.75)
TOKENS = (32, 64, 128, 256, 512)
ORACLE = "oracle-prompt"
CONSTANT = "prefill-constant"
Family = Literal["outlets", "probe", "prefill", "oracle", "baseline", "counters"]
Interval = tuple[float | None, float | None]


def _f(x: Any) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _ci(x: Sequence[float]) -> Interval:
    return (_f(x[0]), _f(x[1]))


# ---------------------------------------------------------------- points
@dataclass(frozen=True)
class PointSpec:
    id: str
    kind: str  # start | fraction | tokens
    value: float
    label: str


def default_points(fractions: Sequence[float] = FRACTIONS, tokens: Sequence[int] = TOKENS) -> list[PointSpec]:
    pts = [PointSpec("t0", "start", 0.0, "t=0")]
    pts += [PointSpec(f"f{round(100 * f)}", "fraction", float(f), f"{100 * f:g}%") for f in fractions]
    pts += [PointSpec(f"t{int(a)}", "tokens", float(a), f"{int(a)} tok") for a in tokens]
    return pts


def series_of(points: Sequence[PointSpec]) -> dict[str, list[str]]:
    start = [p.id for p in points if p.kind == "start"]
    return {"progress": start + [p.id for p in points if p.kind == "fraction"],
            "tokens": start + [p.id for p in points if p.kind == "tokens"]}


def point_rows(index: pd.DataFrame, spec: PointSpec) -> tuple[np.ndarray, int, float]:
    """Rows of ``index`` at point ``spec`` (at most one per sample), how many are not at the exact
    position (fraction points only), and the largest offset from it (tokens)."""
    t = index["t"].to_numpy(dtype=np.float64)
    if spec.kind == "start":  # every sample, an empty response (L = 0) included, as a prefill bench has it
        return np.flatnonzero(t == 0), 0, 0.0
    alive = index["remaining"].to_numpy(dtype=np.float64) > 0  # a row at t = L is a finished sample
    if spec.kind == "tokens":
        return np.flatnonzero((t == spec.value) & alive), 0, 0.0
    target = np.floor(spec.value * index["length"].to_numpy(dtype=np.float64))
    d = np.where(alive, np.abs(t - target), np.inf)
    codes = sample_codes(index)
    order = np.lexsort((d, codes))  # by sample, nearest first
    first = order[np.r_[True, np.diff(codes[order]) != 0]]
    first = np.sort(first[np.isfinite(d[first])])
    off = d[first]
    return first, int((off > 0).sum()), float(off.max()) if off.size else 0.0


# ---------------------------------------------------------------- the result (JSON schema)
class Score(Config):
    """One method at one point. MAE in tokens (average over prompts); intervals at ``ci``."""

    n_prompts: int
    n_samples: int
    mae: float | None
    mae_ci: Interval
    coverage80: float | None = Field(description="share of rows inside [q10, q90] (average over prompts)")
    pinball: float | None = Field(description="mean pinball loss of q10 / q50 / q90 (tokens)")
    ratio_vs_reference: float | None = Field(description="MAE / the reference method's MAE (same rows)")
    ratio_vs_reference_ci: Interval
    ratio_vs_oracle: float | None = Field(description="MAE / the carried oracle's MAE (same rows)")
    ratio_vs_oracle_ci: Interval
    kendall_tau: float | None = Field(None, description="Kendall tau-b of predicted vs true remaining length over "
                                                       "the rows at this point (the order a scheduler reads)")
    short_precision: float | None = Field(None, description="of the rows labelled short (t + predicted remaining < "
                                                           "the short threshold), the share truly short")
    short_recall: float | None = Field(None, description="of the truly short rows (length < the threshold), the "
                                                        "share labelled short")


class MethodResult(Config):
    name: str = Field(description="outlets*, probe, prefill-<name>, prefill-constant, oracle-prompt or t-only")
    family: Family
    source: str = Field(description="head directory, predictions file, or 'run' (computed from the run)")
    made_for: str | None = Field(None, description="heads: the rows of the trajectory they were trained on (fraction, "
                                                   "live or both); null for the rest")
    note: str = ""
    fallback_rows: int = Field(0, description="rows that took a fallback value (carried oracle: no other sample left)")
    points: dict[str, Score] = Field(description="point id -> score")
    mean_mae_progress: float | None = Field(description="MAE averaged over the progress series (per prompt, then prompts)")
    ratio_progress_vs_reference: float | None
    ratio_progress_vs_reference_ci: Interval
    beats_oracle_from: dict[str, str | None] = Field(description="series -> first point from which MAE < oracle's")
    beats_oracle_from_ci: dict[str, str | None] = Field(description="series -> the same, paired interval below 1")


class PointInfo(Config):
    id: str
    kind: Literal["start", "fraction", "tokens"]
    value: float = Field(description="fraction of the true length, or tokens generated")
    label: str
    n_prompts: int
    n_samples: int
    inexact: int = Field(0, description="rows not at the exact position (the sample's nearest row was used)")
    max_offset: float = Field(0.0, description="largest distance of such a row from the exact position (tokens)")


class BoundInfo(Config):
    """The prefill oracle bound on the test prompts (all their samples, capped)."""

    n_prompts: int
    n_samples: int
    oracle_mae: float
    oracle_mae_ci: Interval
    oracle_mae_insample: float
    oracle_mae_loo: float


class TotalRow(Config):
    name: str
    mae: float | None = Field(description="total-length MAE at t = 0 (the carried median: q50)")
    mae_ci: Interval
    mae_over_bound: float | None
    mae_point: float | None = Field(None, description="prefill heads: MAE of the table's own pred_tokens")
    mae_point_over_bound: float | None = None


class TotalAtStart(Config):
    bound: BoundInfo | None
    rows: list[TotalRow]


class Protocol(Config):
    run: str
    card_hash: str
    trajectory: str
    trajectory_spec: dict[str, Any]
    cap: float | None
    test_prompts: int
    test_samples: int
    test_rows: int
    reference: str | None = Field(description="the method ratios are taken against (best carried prefill head)")
    short_threshold: float | None = Field(None, description="a sample is short when its length (as served) is below "
                                                           "this: the median length of the test samples")
    n_boot: int
    ci: float
    seed: int
    lenpred_version: str = __version__


class OutletsBench(Config):
    """``outlets_bench.json``: remaining-length prediction along the trajectory (docs/outlets.md)."""

    format: Literal["lenpred.outlets.bench"] = FORMAT
    schema_version: Literal[1] = SCHEMA_VERSION
    protocol: Protocol
    points: list[PointInfo]
    series: dict[str, list[str]] = Field(description="progress: t0 + fractions; tokens: t0 + absolute positions")
    methods: list[MethodResult]
    total_t0: TotalAtStart

    def method(self, name: str) -> MethodResult:
        for m in self.methods:
            if m.name == name:
                return m
        raise KeyError(name)

    def names(self) -> list[str]:
        return [m.name for m in self.methods]


# ---------------------------------------------------------------- scoring
@dataclass
class MethodInput:
    """A method's predictions on every test row of the trajectory (aligned with its index)."""

    name: str
    family: str
    source: str
    remaining: Remaining
    point_total: np.ndarray | None = None  # prefill tables: their own pred_tokens per row
    extra: dict[str, Any] = field(default_factory=dict)


def _family(name: str) -> str:
    if name.startswith("outlets"):
        return "outlets"
    if name.startswith("probe"):
        return "probe"
    if name.startswith("counters"):
        return "counters"
    if name.startswith("prefill-"):
        return "prefill"
    if name.startswith("oracle-"):
        return "oracle"
    if name == "t-only":
        return "baseline"
    raise ConfigError(f"method name {name!r} does not say its family",
                      "name heads outlets* or probe*, counter heads counters*, prefill tables prefill-*")


def bound_on(lengths: pd.DataFrame, n_boot: int, ci: float, seed: int) -> BoundInfo:
    """The prefill oracle bound on the prompts of ``lengths`` with 2+ samples
    (:func:`lenpred.bench.evaluate.oracle_bound`, prompts with one sample left out)."""
    from lenpred.bench.evaluate import oracle_bound

    b = oracle_bound(lengths, n_boot, ci, seed, drop_single=True)
    return BoundInfo(n_prompts=b.n_prompts, n_samples=b.n_samples, oracle_mae=b.oracle_mae,
                     oracle_mae_ci=_ci(b.oracle_mae_ci), oracle_mae_insample=b.oracle_mae_insample,
                     oracle_mae_loo=b.oracle_mae_loo)


def _per_prompt(values: np.ndarray, pids: np.ndarray) -> pd.Series:
    return pd.Series(values).groupby(pids, sort=False).mean()


def _ratio(num: pd.Series, den: pd.Series, n_boot: int, ci: float, seed: int) -> tuple[float | None, Interval]:
    from lenpred.stats.bootstrap import ratio_ci

    a, b = num.to_numpy(float), den.reindex(num.index).to_numpy(float)
    if not b.sum() > 0:
        return None, (None, None)
    return _f(a.sum() / b.sum()), _ci(ratio_ci(a, b, n_boot, ci, np.random.default_rng(seed)))


def _beats(ratios: Sequence[float | None]) -> int | None:
    """Index of the first point from which every ratio is below 1 (None: never)."""
    first = None
    for i in range(len(ratios) - 1, -1, -1):
        r = ratios[i]
        if r is None or r >= 1.0:
            break
        first = i
    return first


def short_threshold_of(index: pd.DataFrame) -> float:
    """The short/long boundary: the median length (as served) of the samples of ``index``."""
    per_sample = index.drop_duplicates(["prompt_id", "sample_idx"])["length"].to_numpy(dtype=np.float64)
    return float(np.median(per_sample)) if per_sample.size else float("nan")


def _score_points(index: pd.DataFrame, methods: Sequence[MethodInput], points: Sequence[PointSpec], boot: Bootstrap,
                  short_threshold: float) -> tuple[list[PointInfo], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The points present in ``index`` and, per method and point, the metrics, the scheduler's order
    figures (Kendall tau, short precision and recall) and the per-prompt absolute errors."""
    from lenpred.bench.scoring import point_metrics, short_label_metrics

    y_all = index["remaining"].to_numpy(dtype=np.float64)
    pid_all = index["prompt_id"].astype(str).to_numpy()
    t_all = index["t"].to_numpy(dtype=np.float64)
    order: dict[str, dict[str, tuple[float | None, float | None, float | None]]] = {m.name: {} for m in methods}
    infos: list[PointInfo] = []
    raw: dict[str, dict[str, Any]] = {m.name: {} for m in methods}
    per_prompt: dict[str, dict[str, pd.Series]] = {m.name: {} for m in methods}
    for p in points:
        rows, inexact, off = point_rows(index, p)
        if rows.size == 0:
            continue
        y, pids = y_all[rows], pid_all[rows]
        infos.append(PointInfo(id=p.id, kind=p.kind, value=p.value, label=p.label, n_prompts=int(len(set(pids))),
                               n_samples=int(rows.size), inexact=inexact, max_offset=off))
        for m in methods:
            r = m.remaining.take(rows)
            pm = point_metrics(y, r.q50, pids, (r.q10, r.q50, r.q90), boot)
            raw[m.name][p.id] = pm
            order[m.name][p.id] = (_f(pm.kendall_tau), *short_label_metrics(y, r.q50, t_all[rows], short_threshold))
            per_prompt[m.name][p.id] = _per_prompt(np.abs(y - r.q50), pids)
    return infos, raw, order, per_prompt


def score_methods(index: pd.DataFrame, methods: Sequence[MethodInput], *, points: Sequence[PointSpec] | None = None,
                  reference: str | None = None, boot: Bootstrap = DEFAULT_BOOT,
                  short_threshold: float | None = None) -> tuple[list[PointInfo], list[MethodResult], str | None]:
    """Score every method at every point (see the module docstring). ``index``: the test rows;
    ``short_threshold``: the short/long boundary (default: the median length of its samples)."""
    points = list(points or default_points())
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise ConfigError(f"method names must be unique, got {names}", "pass distinct names (NAME=PATH)")
    for m in methods:
        if m.remaining.q50.shape[0] != len(index):
            raise DataError(f"method {m.name!r} has {m.remaining.q50.shape[0]} predictions for {len(index)} rows",
                            "predict every row of the trajectory being benched (one prediction per row)")
    if short_threshold is None:
        short_threshold = short_threshold_of(index)
    n_boot, ci, seed = boot.n_boot, boot.ci, boot.seed
    infos, raw, order, per_prompt = _score_points(index, methods, points, boot, short_threshold)
    if not infos:
        raise DataError("no trajectory row of a test prompt lies at any evaluation point",
                        "compute trajectory features with t = 0 and the documented positions")
    first = infos[0].id
    if reference is None:
        cands = [m.name for m in methods if m.family == "prefill" and m.name != CONSTANT]
        cands = cands or [m.name for m in methods if m.name == CONSTANT]
        reference = min(cands, key=lambda n: raw[n][first].mae) if cands else None
    elif reference not in raw:
        raise ConfigError(f"reference {reference!r} is not a method of this bench", f"methods: {', '.join(names)}")
    oracle = ORACLE if ORACLE in raw else None
    ser = series_of([p for p in points if any(i.id == p.id for i in infos)])
    results = []
    for m in methods:
        pts: dict[str, Score] = {}
        for info in infos:
            pm = raw[m.name][info.id]
            mine = per_prompt[m.name][info.id]
            rr, rr_ci = _ratio(mine, per_prompt[reference][info.id], n_boot, ci, seed) if reference else (None, (None, None))
            ro, ro_ci = _ratio(mine, per_prompt[oracle][info.id], n_boot, ci, seed) if oracle else (None, (None, None))
            pts[info.id] = Score(n_prompts=pm.n_prompts, n_samples=pm.n_samples, mae=_f(pm.mae), mae_ci=_ci(pm.mae_ci),
                                 coverage80=_f(pm.coverage80) if pm.coverage80 is not None else None,
                                 pinball=_f(pm.pinball) if pm.pinball is not None else None,
                                 ratio_vs_reference=rr, ratio_vs_reference_ci=rr_ci, ratio_vs_oracle=ro,
                                 ratio_vs_oracle_ci=ro_ci, kendall_tau=order[m.name][info.id][0],
                                 short_precision=order[m.name][info.id][1], short_recall=order[m.name][info.id][2])
        prog = [i for i in ser["progress"] if i in pts]
        avg = pd.concat([per_prompt[m.name][i] for i in prog], axis=1).mean(axis=1) if prog else pd.Series(dtype=float)
        mean_prog = _f(avg.mean()) if len(avg) else None
        rp, rp_ci = (None, (None, None))
        if reference and prog:
            ref_avg = pd.concat([per_prompt[reference][i] for i in prog], axis=1).mean(axis=1)
            rp, rp_ci = _ratio(avg, ref_avg, n_boot, ci, seed)
        beats, beats_ci = {}, {}
        for s, ids in ser.items():
            ids = [i for i in ids if i in pts]
            b = _beats([pts[i].ratio_vs_oracle for i in ids]) if oracle else None
            bc = _beats([pts[i].ratio_vs_oracle_ci[1] for i in ids]) if oracle else None
            beats[s] = ids[b] if b is not None else None
            beats_ci[s] = ids[bc] if bc is not None else None
        results.append(MethodResult(
            name=m.name, family=m.family, source=m.source, note=m.remaining.note,  # type: ignore[arg-type]
            made_for=m.extra.get("made_for") if m.family in ("outlets", "probe", "counters") else None,
            fallback_rows=m.remaining.fallback_rows, points=pts, mean_mae_progress=mean_prog,
            ratio_progress_vs_reference=rp, ratio_progress_vs_reference_ci=rp_ci, beats_oracle_from=beats,
            beats_oracle_from_ci=beats_ci))
    return infos, results, reference


def total_at_start(index: pd.DataFrame, methods: Sequence[MethodInput], bound: BoundInfo | None, *,
                   n_boot: int, ci: float, seed: int) -> TotalAtStart:
    from lenpred.bench.scoring import point_metrics

    rows, _, _ = point_rows(index, PointSpec("t0", "start", 0.0, "t=0"))
    out = []
    if rows.size:
        y = index["length"].to_numpy(dtype=np.float64)[rows]
        pids = index["prompt_id"].astype(str).to_numpy()[rows]
        b = bound.oracle_mae if bound is not None else None
        for m in methods:
            pm = point_metrics(y, m.remaining.q50[rows], pids, boot=Bootstrap(n_boot, ci, seed))
            mp = None
            if m.point_total is not None:
                mp = point_metrics(y, m.point_total[rows], pids, boot=Bootstrap(10, ci, seed)).mae
            out.append(TotalRow(name=m.name, mae=_f(pm.mae), mae_ci=_ci(pm.mae_ci),
                                mae_over_bound=_f(pm.mae / b) if b else None, mae_point=_f(mp) if mp is not None else None,
                                mae_point_over_bound=_f(mp / b) if (b and mp is not None) else None))
    return TotalAtStart(bound=bound, rows=out)
