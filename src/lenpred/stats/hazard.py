"""The hazard: the per-step probability of stopping, h_t = #(L = t, EOS) / #(L >= t).

Truncated samples are handled the way survival analysis handles right-censoring: they are at risk at
every step up to the cap and never count as a stop. Per-token counts are thin, so the hazard is
reported per bin as (stops in the bin) / (sample-steps at risk in the bin), the maximum-likelihood
per-step hazard of a piecewise-constant model.

Three views, because pooling prompts hides the ramp: prompts differ in length, and a mixture of
constant hazards *falls* over time (the short prompts leave first). So besides the pooled curve we
show it by bucket of prompt length, and in normalised time u = t / median_i, where a constant
per-prompt hazard gives a flat line at ln 2 per median length and a ramp rises. Each view carries the
constant hazard with the same number of stops and exposure, the curve a memoryless process would give.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from lenpred.stats.lengths import RunLengths
from lenpred.stats.results import (
    Hazard,
    HazardCurve,
    HazardTable,
    LikelihoodRatio,
    NormalizedHazard,
    NormalizedHazardTable,
)

N_AUTO_BINS = 40
U_MAX, U_BIN = 3.0, 0.1
# normalised-time windows for the ramp figure: before the median and after it. A memoryless process
# has the same hazard in both (ratio 1); a ramp has many times more stops per exposure late.
EARLY_U, LATE_U = (0.4, 0.8), (1.2, 1.6)
# and past the median, a descriptive figure: a constant hazard stays at ratio 1, a normal law's keeps
# climbing (~2 for a CV of 0.3 with known medians; per-prompt medians estimated from 8 samples blur the
# time axis and pull it towards 1, so it is not used for a verdict)
MID_U, TAIL_U = (1.0, 1.4), (1.6, 2.4)


def _counts(length: np.ndarray, event: np.ndarray, t_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Per step t = 0..t_max: stops d_t and samples at risk r_t = #(L >= t)."""
    d = np.bincount(length[event], minlength=t_max + 1)[: t_max + 1]
    n_at = np.bincount(length, minlength=t_max + 1)[: t_max + 1]
    r = n_at[::-1].cumsum()[::-1]
    return d.astype(float), r.astype(float)


def _window_hazard(d: np.ndarray, r: np.ndarray, lo: float, hi: float) -> float:
    sl = slice(int(np.floor(lo)), max(int(np.ceil(hi)), int(np.floor(lo)) + 1))
    exp = r[sl].sum()
    return float(d[sl].sum() / exp) if exp > 0 else float("nan")


def hazard_curve(
    length: np.ndarray, event: np.ndarray, bin_width: int, min_at_risk: int, cap: int
) -> HazardCurve:
    """Binned per-step hazard, its constant-hazard counterpart, and figures of its shape."""
    length = np.asarray(length, dtype=int)
    event = np.asarray(event, dtype=bool)
    t_max = int(max(length.max(), cap))
    d, r = _counts(length, event, t_max)
    starts = np.arange(0, t_max + 1, bin_width)
    rows = []
    for a in starts:
        b = min(a + bin_width, t_max + 1)
        if r[a] < min_at_risk:  # too few samples left for a meaningful rate
            break
        exp, ev = r[a:b].sum(), d[a:b].sum()
        h = ev / exp
        se = np.sqrt(max(h * (1 - h), 1e-12) / exp)
        rows.append((int(a), int(b), ev, exp, int(r[a]), h, max(h - 1.96 * se, 0.0), h + 1.96 * se))
    table = pd.DataFrame(rows, columns=["start", "end", "stops", "exposure", "at_risk", "hazard", "lo", "hi"])
    h0 = float(d.sum() / r.sum())
    # windows between length quantiles: early = [q10, q25), late = [q75, q90)
    q10, q25, q75, q90 = np.quantile(np.minimum(length, cap), [0.1, 0.25, 0.75, 0.9])
    early, late = _window_hazard(d, r, q10, q25), _window_hazard(d, r, q75, q90)
    rho = (
        float(stats.spearmanr(table["start"], table["hazard"]).statistic) if len(table) >= 3 else float("nan")
    )
    # likelihood ratio of the binned (piecewise-constant) hazard against a constant one
    ev, ex = table["stops"].to_numpy(), table["exposure"].to_numpy()
    hb = np.clip(ev / ex, 1e-300, 1 - 1e-12)
    h0c = float(np.clip(ev.sum() / ex.sum(), 1e-300, 1 - 1e-12)) if ex.sum() > 0 else float("nan")
    ll1 = float((ev * np.log(hb) + (ex - ev) * np.log1p(-hb)).sum())
    ll0 = float(ev.sum() * np.log(h0c) + (ex.sum() - ev.sum()) * np.log1p(-h0c))
    g2 = max(2 * (ll1 - ll0), 0.0)
    dof = max(len(table) - 1, 1)
    return HazardCurve(
        bin_width=int(bin_width),
        table=HazardTable.from_frame(table),
        constant_hazard=h0,
        early_window=(float(q10), float(q25)),
        late_window=(float(q75), float(q90)),
        hazard_early=early,
        hazard_late=late,
        late_early_ratio=float(late / early) if early > 0 else float("nan"),
        spearman_rho=rho,
        lr_vs_constant=LikelihoodRatio(g2=g2, dof=dof, p_value=float(stats.chi2.sf(g2, dof))),
    )


def normalized_hazard(
    length: np.ndarray, event: np.ndarray, median: np.ndarray, min_at_risk: int
) -> NormalizedHazard:
    """Hazard per unit of normalised time u = t / median_i (stops per median length).

    A constant per-prompt hazard h_i gives h_i * median_i = ln 2 in every bin whatever h_i is, so
    prompts of different lengths pool without the mixture artefact of the raw-time curve.
    """
    ok = median > 0
    length, event, m = length[ok].astype(float), event[ok], median[ok].astype(float)
    edges = np.round(np.arange(0.0, U_MAX + U_BIN / 2, U_BIN), 10)
    lo_t = np.maximum(np.ceil(edges[:-1, None] * m[None, :]), 1.0)  # (B, n) first step in bin
    hi_t = np.ceil(edges[1:, None] * m[None, :]) - 1.0  # (B, n) last step in bin
    steps = np.clip(np.minimum(hi_t, length[None, :]) - lo_t + 1.0, 0.0, None)  # (B, n) steps at risk
    exposure = (steps / m[None, :]).sum(1)  # in median lengths
    u = length / m
    stops = np.histogram(u[event], bins=edges)[0].astype(float)
    at_risk = (length[None, :] >= lo_t).sum(1)
    keep = at_risk >= min_at_risk
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(exposure > 0, stops / exposure, np.nan)
    table = pd.DataFrame(
        {
            "u_start": edges[:-1],
            "u_end": edges[1:],
            "stops": stops,
            "exposure": exposure,
            "at_risk": at_risk,
            "hazard": h,
        }
    )[keep]

    def window(lo: float, hi: float) -> float:
        w = table[(table["u_start"] >= lo - 1e-9) & (table["u_end"] <= hi + 1e-9)]
        return (
            float(w["stops"].sum() / w["exposure"].sum())
            if len(w) and w["exposure"].sum() > 0
            else float("nan")
        )

    early, late = window(*EARLY_U), window(*LATE_U)
    mid, tail = window(*MID_U), window(*TAIL_U)
    return NormalizedHazard(
        bin_width_u=U_BIN,
        table=NormalizedHazardTable.from_frame(table.reset_index(drop=True)),
        constant_hazard=float(table["stops"].sum() / table["exposure"].sum()) if len(table) else float("nan"),
        memoryless_value=float(np.log(2.0)),
        early_window_u=EARLY_U,
        late_window_u=LATE_U,
        hazard_early=early,
        hazard_late=late,
        late_early_ratio=float(late / early) if early > 0 else float("nan"),
        mid_window_u=MID_U,
        tail_window_u=TAIL_U,
        hazard_mid=mid,
        hazard_tail=tail,
        tail_mid_ratio=float(tail / mid) if mid > 0 else float("nan"),
    )


def hazard_analysis(
    lengths: RunLengths,
    medians: pd.Series,
    bin_width: int,
    n_buckets: int,
    min_at_risk: int,
    drop_truncated: bool = False,
) -> Hazard:
    """Pooled, by-bucket and normalised hazard. ``medians``: per-prompt median, indexed by prompt_id.

    ``drop_truncated`` leaves truncated samples out instead of keeping them at risk: right when they are
    a runaway mode that would never stop (loops), which would otherwise dilute the late hazard of the
    responses that do end; wrong (biased low at late steps) when they are a genuine tail.
    """
    s = lengths.samples
    if drop_truncated:
        s = s[~s["censored"]]
    length = np.minimum(s["length"].to_numpy(int), lengths.cap)
    event = ~s["censored"].to_numpy(bool)
    if bin_width <= 0:
        bin_width = max(1, round(float(np.quantile(length, 0.95)) / N_AUTO_BINS))
    pooled = hazard_curve(length, event, bin_width, min_at_risk, lengths.cap)
    med = s["prompt_id"].map(medians).to_numpy(float)
    have = np.isfinite(med)
    buckets = []
    if have.sum() and medians.nunique() >= n_buckets:
        edges = np.unique(np.quantile(medians.to_numpy(float), np.linspace(0, 1, n_buckets + 1)))
        which = np.clip(np.searchsorted(edges, med, side="right") - 1, 0, len(edges) - 2)
        for j in range(len(edges) - 1):
            sel = have & (which == j)
            if sel.sum() < min_at_risk:
                continue
            curve = hazard_curve(length[sel], event[sel], bin_width, max(min_at_risk // 2, 5), lengths.cap)
            buckets.append(
                curve.model_copy(
                    update={"median_range": (float(edges[j]), float(edges[j + 1])), "n_samples": int(sel.sum())}
                )
            )
    normalized = normalized_hazard(length[have], event[have], med[have], min_at_risk) if have.any() else None
    return Hazard(pooled=pooled, buckets=buckets, normalized=normalized)
