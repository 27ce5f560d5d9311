"""Plots of the bound analysis (``lenpred bound``): four PNG images beside bound.json.

* ``hist_grid.png``  per-prompt length histograms against the fitted normal, for prompts spread over
  the range of mean lengths (truncated samples drawn apart, at the cap);
* ``sd_vs_mu.png``   per-prompt sd against mean length, with the OLS and Theil-Sen affine fits and the
  slope the segment-count CV predicts;
* ``hazard.png``     per-token stopping probability by length (pooled and by bucket of prompt length)
  and in normalised time t / median, each against the constant hazard with the same stops;
* ``mae_normal.png`` per-prompt oracle MAE against its normal-law value sqrt(2/pi) * sd.

Figures are built on :class:`matplotlib.figure.Figure` with the Agg canvas, never through pyplot,
so plotting has no global state and needs no display. Each function returns the PNG's bytes;
:func:`lenpred.report.bound.rendered_files` hands them to the artifact.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from lenpred.stats.analysis import BoundAnalysis
from lenpred.stats.normal import NORMAL_MAE_FACTOR
from lenpred.stats.results import AffineFit, NormalLaw, SegmentCV

DPI = 110
EOS_COLOR, TRUNC_COLOR, FIT_COLOR, ROBUST_COLOR, REF_COLOR = (
    "#3b75af",
    "#e1812c",
    "#c03d3e",
    "#3a923a",
    "#7f7f7f",
)


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, format="png")
    return buf.getvalue()


def _pick_prompts(pp: pd.DataFrame, n: int) -> pd.DataFrame:
    """Prompts with enough samples for a histogram (8, or the most any has), spread over mean length."""
    rich = pp[pp["k"] >= min(int(pp["k"].max()), 8)].sort_values("mean")
    if len(rich) <= n:
        return rich
    idx = np.unique(np.round(np.linspace(0, len(rich) - 1, n)).astype(int))
    return rich.iloc[idx]


def plot_hist_grid(analysis: BoundAnalysis, n: int = 16) -> bytes:
    pp = analysis.per_prompt
    picks = _pick_prompts(pp, n)
    cols = math.ceil(math.sqrt(len(picks)))
    rows = math.ceil(len(picks) / cols)
    fig = Figure(figsize=(max(3.0 * cols, 7.0), 2.3 * rows + 0.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    samples = analysis.lengths.samples
    cap = analysis.lengths.cap
    for ax, (_, row) in zip(axes, picks.iterrows(), strict=False):
        s = samples[samples["prompt_id"] == row["prompt_id"]]
        x = s["length"].to_numpy(float)
        trunc = s["censored"].to_numpy(bool)
        mu, sd = float(row["mean"]), max(float(row["sd_unbiased"]), 0.5)
        lo, hi = max(0.0, min(x.min(), mu - 3 * sd)), max(x.max(), mu + 3 * sd)  # lengths are >= 0
        nb = max(6, min(20, len(x) // 2))
        edges = np.linspace(lo, hi, nb + 1)
        ax.hist(
            [x[~trunc], np.minimum(x[trunc], cap)], bins=edges, stacked=True, color=[EOS_COLOR, TRUNC_COLOR]
        )
        grid = np.linspace(lo, hi, 200)
        pdf = np.exp(-0.5 * ((grid - mu) / sd) ** 2) / (sd * math.sqrt(2 * math.pi))
        ax.plot(grid, pdf * len(x) * (edges[1] - edges[0]), color=FIT_COLOR, lw=1.5)
        ax.set_title(f"{row['prompt_id']}  K={int(row['k'])}  mu={mu:.0f} sd={sd:.0f}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(picks) :]:
        ax.set_visible(False)
    fig.suptitle(
        "Per-prompt decode lengths (blue: EOS, orange: truncated at the cap) vs fitted normal (red)",
        fontsize=10,
    )
    return _png(fig)


def plot_sd_vs_mu(analysis: BoundAnalysis) -> bytes:
    pp, summ = analysis.per_prompt, analysis.summary
    af, seg = summ.affine, summ.segments
    fig = Figure(figsize=(6.4, 4.8), layout="constrained")
    ax = fig.subplots()
    ax.scatter(
        pp["mean"], pp["sd_unbiased"], s=10, alpha=0.5, color=EOS_COLOR, label="prompts (sd = s / c4(K))"
    )
    grid = np.linspace(0, float(pp["mean"].max()) * 1.05, 50)
    if isinstance(af, AffineFit):
        ax.plot(grid, af.alpha * grid + af.b, color=FIT_COLOR, label=f"OLS: {af.alpha:.3f} mu + {af.b:.1f}")
        rb = af.robust
        ax.plot(
            grid,
            rb.alpha * grid + rb.b,
            color=ROBUST_COLOR,
            ls="--",
            label=f"Theil-Sen: {rb.alpha:.3f} mu + {rb.b:.1f}",
        )
        if isinstance(seg, SegmentCV):
            # the slope the segment model predicts, through the same centre of mass as the OLS line
            cv = seg.cv_mean
            mx, my = float(pp["mean"].mean()), float(pp["sd_unbiased"].mean())
            ax.plot(
                grid,
                my + cv * (grid - mx),
                color=REF_COLOR,
                ls=":",
                label=f"slope = {seg.unit}-count CV {cv:.3f}",
            )
        ax.set_title(f"Affine variance law (R^2 = {af.r2:.2f}, denoised {af.r2_denoised:.2f})", fontsize=10)
    ax.set_xlabel("mean decode length mu_i (tokens)")
    ax.set_ylabel("sd_i (tokens)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return _png(fig)


def _curve(ax: Any, table: pd.DataFrame, x: str, label: str, color: str, band: bool = False) -> None:
    if not len(table):
        return
    ax.step(table[x], table["hazard"], where="post", color=color, label=label, lw=1.4)
    if band and "lo" in table:
        ax.fill_between(table[x], table["lo"], table["hi"], step="post", color=color, alpha=0.2)


def plot_hazard(analysis: BoundAnalysis) -> bytes:
    hz = analysis.summary.hazard
    fig = Figure(figsize=(11, 4.4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    pooled = hz.pooled
    _curve(ax1, pooled.table.frame(), "start", "pooled", "black", band=True)
    cmap = ["#3b75af", "#3a923a", "#e1812c", "#c03d3e", "#8c61b5", "#84584e"]
    for i, b in enumerate(hz.buckets):
        lo, hi = b.median_range or (float("nan"), float("nan"))
        _curve(ax1, b.table.frame(), "start", f"median {lo:.0f}-{hi:.0f}", cmap[i % len(cmap)])
    ax1.axhline(pooled.constant_hazard, color=REF_COLOR, ls="--", label="constant hazard (same stops)")
    ax1.set_xlabel(f"decode step t (bins of {pooled.bin_width} tokens)")
    ax1.set_ylabel("P(stop at t | not stopped before t)")
    ax1.set_title("Per-token stopping probability", fontsize=10)
    ax1.legend(fontsize=7)
    nh = hz.normalized
    if nh is not None and len(nh.table.hazard):
        _curve(ax2, nh.table.frame(), "u_start", "all prompts", "black")
        ax2.axhline(nh.memoryless_value, color=REF_COLOR, ls="--", label="constant per-prompt hazard (ln 2)")
        ax2.set_yscale("log")
    ax2.set_xlabel("normalised time u = t / median_i")
    ax2.set_ylabel("stops per median length")
    ax2.set_title("Normalised time: a ramp rises, a memoryless process stays flat", fontsize=10)
    if ax2.get_legend_handles_labels()[0]:  # nothing to label when too few samples were at risk
        ax2.legend(fontsize=7)
    return _png(fig)


def plot_mae_normal(analysis: BoundAnalysis) -> bytes:
    pp = analysis.per_prompt
    fig = Figure(figsize=(6.0, 5.4), layout="constrained")
    ax = fig.subplots()
    x, y = pp["mae_normal"].to_numpy(float), pp["mae_oracle"].to_numpy(float)
    ax.scatter(x, y, s=10, alpha=0.5, color=EOS_COLOR, label="prompts")
    top = float(np.nanmax(np.concatenate([x, y]))) * 1.05 if len(x) else 1.0
    grid = np.linspace(0, top, 10)
    ax.plot(grid, grid, color=FIT_COLOR, label="normal law: MAE = sqrt(2/pi) sd")
    ax.fill_between(grid, 0.9 * grid, 1.1 * grid, color=FIT_COLOR, alpha=0.12, label="+-10%")
    ax.set_xlabel(f"normal-law MAE_i = {NORMAL_MAE_FACTOR:.3f} * sd_i (tokens)")
    ax.set_ylabel("empirical oracle MAE_i (tokens)")
    nl = analysis.summary.normal_law
    if isinstance(nl, NormalLaw):
        obs, ref = nl.observed, nl.if_normal
        ax.set_title(
            f"sum ratio {obs.mae_ratio_aggregate:.3f} ({ref.mae_ratio_aggregate:.3f} if normal); "
            f"within 10%: {obs.share_within_10pct:.0%} ({ref.share_within_10pct:.0%} if normal)",
            fontsize=9,
        )
    else:
        ax.set_title(f"normal law not tested: {nl.reason}", fontsize=9)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.legend(fontsize=8)
    return _png(fig)


def render_bound_plots(analysis: BoundAnalysis, grid: int = 16) -> dict[str, bytes]:
    """The four plots as PNG bytes, by file name."""
    return {
        "hist_grid.png": plot_hist_grid(analysis, grid),
        "sd_vs_mu.png": plot_sd_vs_mu(analysis),
        "hazard.png": plot_hazard(analysis),
        "mae_normal.png": plot_mae_normal(analysis),
    }
