"""The live bench: remaining-length prediction scored at the rows a live server meets.

A server never knows a request's length L. It re-predicts at t = 0 and then at every re-prediction
point the request actually reaches: t = 16, 32, 64, 128, ... tokens generated (doubling; or every K
tokens), only while t < L. So the rows scored here are, per test sample, t = 0 and each live point
below its own L -- nothing placed with the answer (the fraction-of-L points of
:mod:`lenpred.outlets.evaluate` read L: they stay as the secondary table).

**Two averages.** *Per row*: every (sample, t) row weighs the same, as a server meets them (a request
that runs longer is met more often: this is the headline). *Per sample*: each sample's mean error over
its rows, then samples weigh the same. Both are pooled over the test samples (not averaged per prompt
first), and 95% intervals resample prompts (one resample matrix for every figure, so ratios are paired).

**Per point** t: MAE over the samples still running at t, the ratio to the reference (paired), the
share of rows inside the 80% interval [q10, q90], and the label "short" (t + predicted remaining <
the test samples' median length) as precision / recall against the true class (L below it).

**Baselines** (built by :mod:`lenpred.outlets.bench_files`, named here as a live server would say it):
``t-only`` (the training samples' lengths conditioned on L > t: the median remaining length among the
training rows at that t, no prompt, no state -- a server can compute it), ``carried-<name>`` (a prefill
head's distribution conditioned on survival L > t: the "t + prompt head" baseline), ``carried-oracle``
(median of {L_j - t : L_j > t} over the prompt's other samples).

**Which series a head was made for.** An OUTLETS head records the trajectory spec it was trained on;
its row scheme (``positions.rows``: ``fraction``, ``live`` or ``both``; older specs are ``fraction``)
is reported beside its figures as ``made_for``; ``strict=True`` refuses a head trained on rows that
do not include the live series instead.

The result is a :class:`LiveBench` (``outlets_live.json``); its per-method ratio is written under
``ratio_vs_<reference>`` (``ratio_vs_carried_mlp`` with the default reference), with ``ci``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from lenpred import __version__
from lenpred.config import Config
from lenpred.errors import ConfigError, DataError
from lenpred.outlets.features import LIVE_FIRST, live_tokens, rows_of
from lenpred.stats.bootstrap import Bootstrap, percentile_ci

__all__ = ["LIVE_FORMAT", "T_ONLY", "LiveBench", "LiveMethod", "LivePoint", "LiveRequest", "check_live_rows",
           "live_name", "live_point_set", "live_rows", "score_live"]

LIVE_FORMAT = "lenpred.outlets.live"
T_ONLY = "t-only"
SHORT_AT = 64  # the point whose "short" label the summary reports (the 64 tokens)
Interval = tuple[float | None, float | None]


def _f(x: Any) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _ci(c: Sequence[float]) -> Interval:
    return (_f(c[0]), _f(c[1]))


def live_name(name: str) -> str:
    """A bench method's name as the live table says it: ``prefill-mlp`` -> ``carried-mlp``,
    ``oracle-prompt`` -> ``carried-oracle``; others unchanged."""
    if name.startswith("prefill-") and name != "prefill-constant":
        return "carried-" + name.removeprefix("prefill-")
    return {"oracle-prompt": "carried-oracle"}.get(name, name)


# ---------------------------------------------------------------- the points and their rows
@dataclass(frozen=True)
class LiveRequest:
    """Which live series to score: ``points`` (token counts; 0 is always added), else ``every`` K
    tokens (0, K, 2K, ... below the cap), else the trajectory's own live scheme (doubling from 16, and
    its every-K grid if it has one); ``strict``: refuse heads not trained on live rows."""

    points: tuple[int, ...] | None = None
    every: int | None = None
    strict: bool = False


def live_point_set(req: LiveRequest, spec: Mapping[str, Any], cap: float | None, max_length: int) -> list[int]:
    """The sorted live points (0 first) to score, up to the cap (or the longest sample)."""
    limit = int(cap) if cap is not None else int(max_length) + 1
    if req.points is not None and req.every is not None:
        raise ConfigError("--live-points and --live-every both name the live series", "pass one of them")
    if req.points is not None:
        bad = [p for p in req.points if p < 0]
        if bad:
            raise ConfigError(f"--live-points must be token counts >= 0, got {bad[0]}", "e.g. --live-points 16,32,64")
        return sorted({0, *(int(p) for p in req.points)})
    if req.every is not None:
        if req.every < 1:
            raise ConfigError(f"--live-every must be >= 1, got {req.every}", "pass --live-every K with K >= 1 tokens")
        return list(range(0, limit, req.every))
    live = ((spec.get("positions") or {}).get("live") or {})
    pts = {0, *live_tokens(limit, int(live.get("first") or LIVE_FIRST))}
    if live.get("every"):
        pts |= set(range(0, limit, int(live["every"])))
    return sorted(pts)


def live_rows(index: pd.DataFrame, points: Sequence[int]) -> np.ndarray:
    """Rows of ``index`` a live server meets: t in ``points`` and (t = 0 or t < L)."""
    t = index["t"].to_numpy(dtype=np.int64)
    alive = (t == 0) | (index["remaining"].to_numpy() > 0)
    return np.flatnonzero(np.isin(t, np.asarray(points, dtype=np.int64)) & alive)


def check_live_rows(index: pd.DataFrame, points: Sequence[int], spec: Mapping[str, Any], where: str) -> None:
    """Every sample must have a row at each live point it reaches (t = 0 and every point below its L);
    otherwise the error names the flag that writes those rows."""
    keys = index[["prompt_id", "sample_idx", "length"]].drop_duplicates(["prompt_id", "sample_idx"])
    have = set(zip(index["prompt_id"].astype(str), index["sample_idx"].astype(int), index["t"].astype(int),
                   strict=True))
    missing: dict[int, int] = {}
    for pid, sid, length in zip(keys["prompt_id"].astype(str), keys["sample_idx"].astype(int),
                                keys["length"].astype(int), strict=True):
        for p in points:
            if (p == 0 or p < length) and (pid, sid, int(p)) not in have:
                missing[int(p)] = missing.get(int(p), 0) + 1
    if missing:
        p0 = min(missing)
        raise DataError(
            f"trajectory {where} has no row at t = {p0} for {missing[p0]} sample(s) that reach it (rows made with "
            f"--rows {rows_of(spec)}; {sum(missing.values())} live row(s) missing in all): it cannot score the live "
            "series",
            "compute the trajectory with live rows (lenpred outlets features --rows live, or --rows both), or "
            "score only the points it holds (lenpred outlets bench --live-points ...)")


# ---------------------------------------------------------------- the result
class LivePoint(Config):
    """One method at one live point t (the samples still running at t; every sample at t = 0)."""

    n_prompts: int
    n_samples: int
    mae: float | None
    mae_ci: Interval
    ratio: float | None = Field(description="MAE / the reference's MAE on the same rows")
    ratio_ci: Interval
    ratio_vs_oracle: float | None = None
    ratio_vs_oracle_ci: Interval = (None, None)
    ratio_vs_t_only: float | None = None
    ratio_vs_t_only_ci: Interval = (None, None)
    coverage80: float | None = Field(None, description="share of rows inside [q10, q90]")
    short_precision: float | None = Field(None, description="rows labelled short (t + predicted < threshold): share "
                                                           "truly short (L < threshold)")
    short_recall: float | None = Field(None, description="truly short rows: share labelled short")


class LiveAverage(Config):
    mae: float | None
    mae_ci: Interval
    ratio: float | None
    ci: Interval


class LiveMethod(Config):
    """One method over the live series. ``ratio`` / ``ci``: the per-row average's MAE over the reference's
    (written as ``ratio_vs_<reference>`` in the JSON)."""

    family: str
    source: str
    made_for: str = Field(description="the rows the method was made for: fraction / live / both (heads: the "
                                      "trajectory spec they were trained on), prefill (a carried t = 0 prediction), "
                                      "lengths (computed from training lengths at every t), or oracle")
    note: str = ""
    ratio: float | None
    ci: Interval
    mae: float | None = Field(description="per-row average: every (sample, t) row weighs the same")
    mae_ci: Interval
    per_sample: LiveAverage = Field(description="each sample's mean over its rows, samples weighing the same")
    short_at_64: dict[str, float | None] = Field(description="precision / recall of the label short at t = 64")
    clear_below_from: dict[str, int | None] = Field(
        description="baseline -> first point t from which the paired ratio's interval is below 1 at t and every "
                    "later point (null: never)")
    points: dict[str, LivePoint] = Field(description="t (as a string) -> figures")


class LiveBench(Config):
    """``outlets_live.json``: the live series (docs/outlets.md, "The live bench")."""

    format: Literal["lenpred.outlets.live"] = "lenpred.outlets.live"
    schema_version: Literal[1] = 1
    series: Literal["tokens"] = "tokens"
    points: list[int]
    n_prompts: int
    n_samples: int
    rows: int
    reference: str
    short_threshold: float | None
    weighting: str = ("headline ratio_vs_<reference> / ci and mae: per row (each (sample, t) row weighs the same, as "
                      "a server meets them); per_sample: each sample's mean over its rows, samples weigh the same")
    run: str
    card_hash: str
    trajectory: str
    trajectory_rows: str
    n_boot: int
    ci_level: float
    seed: int
    lenpred_version: str = __version__
    methods: dict[str, LiveMethod]

    def ratio_key(self) -> str:
        return "ratio_vs_" + self.reference.replace("-", "_")

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON of ``outlets_live.json``: each method's ``ratio`` written as ``ratio_vs_<reference>``."""
        d = self.to_dict()
        key = self.ratio_key()
        for m in d["methods"].values():
            m[key] = m.pop("ratio")
        return d

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any], where: str = "outlets_live.json") -> LiveBench:
        d = dict(data)
        ref = str(d.get("reference", ""))
        key = "ratio_vs_" + ref.replace("-", "_")
        d["methods"] = {k: {("ratio" if kk == key else kk): vv for kk, vv in dict(v).items()}
                        for k, v in dict(d.get("methods") or {}).items()}
        return cls.from_dict(d, where=where)


# ---------------------------------------------------------------- scoring
def _made_for(m: Any) -> str:
    if m.family in ("outlets", "probe", "counters"):
        return str(m.extra.get("made_for", "fraction"))
    if m.name == T_ONLY or m.name == "prefill-constant":
        return "lengths"
    if m.family == "oracle":
        return "oracle"
    return "prefill"


def check_strict(methods: Sequence[Any], series: str) -> None:
    """``--strict-series``: refuse a head trained on rows that do not include ``series`` (live / fraction)."""
    for m in methods:
        made = _made_for(m)
        if made in ("fraction", "live") and made != series:
            what = {"fraction": "fraction rows (t = floor(f L): placed with the true length)",
                    "live": "live rows (t = 0, 16, 32, ... tokens)"}[made]
            raise ConfigError(f"head {m.source} ({m.name}) was trained on {what}, not on the {series} series it is "
                              "scored on (--strict-series)",
                              f"retrain it on {series} rows (lenpred outlets features --rows {series} or both, then "
                              "lenpred outlets train), or drop --strict-series to score it labelled")


class _Resampler:
    """Paired bootstrap over prompts: one (B, P) matrix of resample counts for every figure."""

    def __init__(self, prompts: np.ndarray, boot: Bootstrap) -> None:
        self.uniq, self.code = np.unique(prompts, return_inverse=True)
        n = self.uniq.size
        rng = np.random.default_rng(boot.seed)
        self.w = rng.multinomial(n, np.full(n, 1.0 / n), size=boot.n_boot).astype(np.float64)  # (B, P)
        self.ci = boot.ci

    def sums(self, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(P,) per-prompt sums of ``values`` over ``rows``."""
        return np.bincount(self.code[rows], weights=values, minlength=self.uniq.size)

    def ratio(self, num: np.ndarray, den: np.ndarray) -> tuple[float | None, Interval]:
        """sum(num) / sum(den) over prompts (each (P,)) and its percentile interval."""
        if not den.sum() > 0:
            return None, (None, None)
        with np.errstate(divide="ignore", invalid="ignore"):
            draws = (self.w @ num) / (self.w @ den)
        return _f(num.sum() / den.sum()), _ci(percentile_ci(draws, self.ci))


def _clear_from(points: Sequence[int], upper: Sequence[float | None]) -> int | None:
    """The first point from which every interval's upper end is below 1 (None: never)."""
    first = None
    for p, u in zip(reversed(points), reversed(upper), strict=True):
        if u is None or u >= 1.0:
            break
        first = p
    return first


def score_live(index: pd.DataFrame, methods: Sequence[Any], points: Sequence[int], *, reference: str | None,
               boot: Bootstrap, short_threshold: float, protocol: Mapping[str, Any]) -> LiveBench:
    """Score ``methods`` (:class:`lenpred.outlets.evaluate.MethodInput`, predictions on every row of
    ``index``) on the live rows of ``index`` (see the module docstring). ``reference``: a method name as
    the live table says it (default ``carried-mlp`` if present, else the best carried head at t = 0)."""
    rows = live_rows(index, points)
    if rows.size == 0:
        raise DataError("no trajectory row of a test prompt lies at a live point",
                        "compute the trajectory with live rows (lenpred outlets features --rows live)")
    names = {live_name(m.name): m for m in methods if m.name != "prefill-constant"}
    y = index["remaining"].to_numpy(dtype=np.float64)[rows]
    t = index["t"].to_numpy(dtype=np.int64)[rows]
    length = index["length"].to_numpy(dtype=np.float64)[rows]
    pids = index["prompt_id"].astype(str).to_numpy()[rows]
    skey = pd.factorize(pids + "\x00" + index["sample_idx"].astype(str).to_numpy()[rows])[0]
    per_sample_n = np.bincount(skey)
    rs = _Resampler(pids, boot)
    all_rows = np.arange(rows.size)
    pts = [int(p) for p in points if (t == p).any()]
    err = {n: np.abs(y - m.remaining.q50[rows]) for n, m in names.items()}
    if reference is None:
        carried = [n for n in names if n.startswith("carried-") and n != "carried-oracle"]
        if "carried-mlp" in names:
            reference = "carried-mlp"
        elif carried:
            reference = min(carried, key=lambda n: float(err[n][t == 0].mean()))
        else:
            reference = T_ONLY if T_ONLY in names else next(iter(names))
    elif reference not in names:
        reference = live_name(reference)
        if reference not in names:
            raise ConfigError(f"reference {reference!r} is not a method of this bench", f"methods: {', '.join(names)}")
    # per-prompt sums for the two averages: rows, and each sample's mean (a row weighs 1 / its sample's rows)
    row_sum = {n: rs.sums(e, all_rows) for n, e in err.items()}
    samp_sum = {n: rs.sums(e / per_sample_n[skey], all_rows) for n, e in err.items()}
    n_rows_p = rs.sums(np.ones(rows.size), all_rows)
    n_samp_p = rs.sums(1.0 / per_sample_n[skey], all_rows)
    at = {p: np.flatnonzero(t == p) for p in pts}
    at_sum = {n: {p: rs.sums(err[n][r], r) for p, r in at.items()} for n in names}
    at_n = {p: rs.sums(np.ones(r.size), r) for p, r in at.items()}
    oracle = "carried-oracle" if "carried-oracle" in names else None
    out: dict[str, LiveMethod] = {}
    for n, m in names.items():
        q = m.remaining
        q10, q50, q90 = q.q10[rows], q.q50[rows], q.q90[rows]
        lp: dict[str, LivePoint] = {}
        for p, r in at.items():
            mae, mae_ci = rs.ratio(at_sum[n][p], at_n[p])
            ratio, ratio_ci = rs.ratio(at_sum[n][p], at_sum[reference][p])
            ro, ro_ci = rs.ratio(at_sum[n][p], at_sum[oracle][p]) if oracle else (None, (None, None))
            rt, rt_ci = rs.ratio(at_sum[n][p], at_sum[T_ONLY][p]) if T_ONLY in names else (None, (None, None))
            ok = np.isfinite(q10[r]) & np.isfinite(q90[r])
            cov = _f(((y[r] >= q10[r]) & (y[r] <= q90[r]))[ok].mean()) if ok.any() else None
            true_s, pred_s = length[r] < short_threshold, t[r] + q50[r] < short_threshold
            prec = _f((true_s & pred_s).sum() / pred_s.sum()) if pred_s.any() else None
            rec = _f((true_s & pred_s).sum() / true_s.sum()) if true_s.any() else None
            lp[str(p)] = LivePoint(n_prompts=int(np.unique(pids[r]).size), n_samples=int(r.size), mae=mae, mae_ci=mae_ci,
                                   ratio=ratio, ratio_ci=ratio_ci, ratio_vs_oracle=ro, ratio_vs_oracle_ci=ro_ci,
                                   ratio_vs_t_only=rt, ratio_vs_t_only_ci=rt_ci, coverage80=cov,
                                   short_precision=prec, short_recall=rec)
        mae, mae_ci = rs.ratio(row_sum[n], n_rows_p)
        ratio, ci = rs.ratio(row_sum[n], row_sum[reference])
        s_mae, s_mae_ci = rs.ratio(samp_sum[n], n_samp_p)
        s_ratio, s_ci = rs.ratio(samp_sum[n], samp_sum[reference])
        s64 = lp.get(str(SHORT_AT))
        clear = {}
        for base, attr in ((oracle, "ratio_vs_oracle_ci"), (T_ONLY if T_ONLY in names else None, "ratio_vs_t_only_ci")):
            if base is not None and base != n:
                clear[base] = _clear_from(pts, [getattr(lp[str(p)], attr)[1] for p in pts])
        out[n] = LiveMethod(family=m.family, source=m.source, made_for=_made_for(m), note=q.note, ratio=ratio, ci=ci,
                            mae=mae, mae_ci=mae_ci,
                            per_sample=LiveAverage(mae=s_mae, mae_ci=s_mae_ci, ratio=s_ratio, ci=s_ci),
                            short_at_64={"precision": s64.short_precision if s64 else None,
                                         "recall": s64.short_recall if s64 else None},
                            clear_below_from=clear, points=lp)
    return LiveBench(points=pts, n_prompts=int(np.unique(pids).size), n_samples=int(per_sample_n.size),
                     rows=int(rows.size), reference=reference, short_threshold=_f(short_threshold),
                     n_boot=boot.n_boot, ci_level=boot.ci, seed=boot.seed, methods=out, **protocol)
