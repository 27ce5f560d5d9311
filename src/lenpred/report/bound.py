"""The bound analysis as a person reads it: tables, sentences, ``summary.md`` and the plots.

Everything here reads a :class:`~lenpred.stats.results.BoundSummary` (and, for plots and
per_prompt.csv, the :class:`~lenpred.stats.analysis.BoundAnalysis` it came from) and computes no
figure. Each table is built once as a :class:`~lenpred.report.table.Table` and rendered both on the
console (:func:`print_bound`) and in Markdown (:func:`markdown`); :func:`rendered_files` hands summary.md
and the plots to :func:`lenpred.stats.artifact.write_bound`, which writes the artifact (kind ``bound``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from lenpred.config import Config
from lenpred.errors import FieldError
from lenpred.io.artifacts import Artifact
from lenpred.report.table import Column, Table, fmt, fmt_ci
from lenpred.stats.analysis import BoundAnalysis
from lenpred.stats.artifact import BOUND_JSON, PER_PROMPT_CSV, SUMMARY_MD
from lenpred.stats.censoring import MIN_EOS_TAIL
from lenpred.stats.results import (
    AffineFit,
    AlphaVsSegmentCV,
    BoundSummary,
    Counts,
    NormalLaw,
    SegmentCV,
    VariantBound,
)

__all__ = ["ReportOptions", "markdown", "print_bound", "rendered_files", "tables", "written_names"]




class ReportOptions(Config):
    """What ``lenpred bound`` writes besides the figures."""

    plots: bool = Field(True, description="write the four PNG plots")
    grid: int = Field(16, description="prompts in the histogram grid")

    @field_validator("grid")
    @classmethod
    def _grid(cls, v: int) -> int:
        if v < 1:
            raise FieldError(f"{v} must be at least 1", "use e.g. --grid 16")
        return v


# --------------------------------------------------------------------------------------------- sentences
def prompts_phrase(c: Counts) -> str:
    """'96 prompts with >= 24 samples (7 with fewer left out)' or just '96 prompts'."""
    if not c.prompts_left_out_few_samples:
        return f"{c.prompts} prompts"
    return f"{c.prompts} prompts with >= {c.min_samples} samples ({c.prompts_left_out_few_samples} with fewer left out)"


def counts_sentence(s: BoundSummary) -> str:
    c = s.counts
    sp = c.samples_per_prompt
    return (
        f"{prompts_phrase(c)}, {c.samples} samples ({sp.min}-{sp.max} per prompt), {c.truncated_samples} "
        f"({c.truncated_share:.1%}) truncated at max_new_tokens={c.max_new_tokens}; {c.prompts_all_truncated} "
        "prompts have every sample truncated."
    )


def tail_sentence(s: BoundSummary) -> str:
    tc = s.tail_check
    if not tc.tested:
        return f"Tail check: not possible (no prompt has {MIN_EOS_TAIL} or more varied EOS samples to fit a tail to)."
    return (
        f"Tail check, on the {tc.n_prompts} prompts with {MIN_EOS_TAIL} or more varied EOS samples: "
        f"{tc.observed_truncated} of their samples truncated, {tc.expected_truncated:.1f} expected from a "
        "per-prompt normal tail."
    )


def choice_sentence(s: BoundSummary) -> str:
    return (
        f"Headline bound: {s.variants[s.headline].label}; theory checks (normal law, affine law, hazard) on: "
        f"{s.variants[s.theory_variant].label} ({s.variant_choice})."
    )


def verdict_lines(s: BoundSummary) -> list[tuple[str, str]]:
    return [(claim.replace("_", " "), str(v)) for claim, v in s.verdicts.items()]


# --------------------------------------------------------------------------------------------- tables
def bound_table(s: BoundSummary) -> Table:
    lvl = round(s.config.ci * 100)
    rows, notes = [], []
    for name, v in s.variants.items():
        label = v.label + (" (headline)" if name == s.headline else "")
        if not isinstance(v, VariantBound):
            rows.append((label, "0", "n/a", "", "", "", "", ""))
            notes.append(f"{v.label}: not available ({v.reason}).")
            continue
        rows.append(
            (
                label,
                str(v.n_prompts),
                f"{v.oracle_mae:.1f}",
                fmt_ci(v.oracle_mae_ci),
                f"{v.oracle_mae_insample:.1f}..{v.oracle_mae_loo:.1f}",
                f"{v.relative_mae:.3f} {fmt_ci(v.relative_mae_ci, '.3f')}",
                f"{v.mean_relative_error:.3f}",
                f"{v.oracle_rmse:.1f}",
            )
        )
    head = s.headline_bound
    if head.by_k:
        parts = ", ".join(
            f"K={k}: {b.oracle_mae:.1f} tok over {b.n_prompts} prompts (mean length {b.mean_length:.0f})"
            for k, b in head.by_k.items()
        )
        notes.append(f"Headline oracle MAE by samples per prompt: {parts}.")
    cols = (
        Column("variant", "left"),
        Column("prompts"),
        Column("oracle MAE (tok)"),
        Column("interval"),
        Column("in-sample..LOO"),
        Column("MAE / mean length"),
        Column("mean |L-m|/L"),
        Column("RMSE (tok)"),
    )
    return Table(f"Prefill oracle bound ({lvl}% bootstrap intervals over prompts)", cols, tuple(rows), tuple(notes))


def affine_table(s: BoundSummary) -> Table:
    af = s.affine
    title = f"Affine law sd = alpha * mu + b ({s.variants[s.theory_variant].label} samples)"
    if not isinstance(af, AffineFit):
        return Table(title, notes=(f"Not available: {af.reason}.",))
    rb = af.robust
    rows = (
        ("OLS (finite-K corrected)", f"{af.alpha:.3f}", fmt_ci(af.alpha_ci, ".3f"), f"{af.b:.1f}", fmt_ci(af.b_ci)),
        ("Theil-Sen", f"{rb.alpha:.3f}", fmt_ci(rb.alpha_ci, ".3f"), f"{rb.b:.1f}", fmt_ci(rb.b_ci)),
        ("naive OLS of s on mean", f"{af.uncorrected_ols.alpha:.3f}", "", f"{af.uncorrected_ols.b:.1f}", ""),
    )
    note = (
        f"R^2 = {fmt(af.r2, '.3f')} (denoised for the sampling noise of per-prompt sd: {fmt(af.r2_denoised, '.3f')}); "
        f"reliability of the per-prompt means {fmt(af.reliability, '.3f')}; {af.n_prompts} prompts."
    )
    cols = (Column("fit", "left"), Column("alpha"), Column("interval"), Column("b (tok)"), Column("interval"))
    return Table(title, cols, rows, (note,))


def segments_table(s: BoundSummary) -> Table:
    seg = s.segments
    if not isinstance(seg, SegmentCV):
        return Table(f"Segments ({seg.unit})", notes=(f"Not available: {seg.reason}.",))
    rows = [
        (f"{seg.unit}-count CV (mean over prompts)", f"{seg.cv_mean:.3f}", fmt_ci(seg.cv_mean_ci, ".3f")),
        (f"{seg.unit}-count CV (median)", f"{seg.cv_median:.3f}", ""),
        ("segments per response", f"{seg.mean_segments:.1f}", ""),
        ("CV of the token length, same prompts", fmt(seg.length_cv_mean, ".3f"), ""),
        ("count-length correlation within a prompt", fmt(seg.count_length_corr_mean, "+.2f"), ""),
    ]
    avc = s.alpha_vs_segment_cv
    if isinstance(avc, AlphaVsSegmentCV):
        rows.append(("alpha / segment-count CV", fmt(avc.ratio, ".2f"), ""))
    rows += [(f"mean CV, {unit}s", fmt(v, ".3f"), "") for unit, v in seg.all_units_cv_mean.items()]
    note = (
        f"{seg.n_prompts} prompts, EOS samples only. N segments of independent length give CV(L) >= CV(N) and "
        "a strong positive count-length correlation."
    )
    return Table(f"Segments ({seg.unit})", (Column("figure", "left"), Column("value"), Column("interval")),
                 tuple(rows), (note,))


def normal_table(s: BoundSummary) -> Table:
    nl = s.normal_law
    title = "Normal law (if normal: the same estimators on exactly normal prompts with the same K)"
    if not isinstance(nl, NormalLaw):
        return Table(title, notes=(f"Not available: {nl.reason}.",))
    o, r = nl.observed, nl.if_normal
    rows = (
        (
            "sum MAE_i / sum sqrt(2/pi) sd_i",
            f"{fmt(o.mae_ratio_aggregate, '.3f')} {fmt_ci(o.mae_ratio_aggregate_ci, '.3f')}",
            fmt(r.mae_ratio_aggregate, ".3f"),
        ),
        ("prompts with MAE_i within 5% of the normal law", fmt(o.share_within_5pct, ".1%"), fmt(r.share_within_5pct, ".1%")),
        ("prompts with MAE_i within 10% of the normal law", fmt(o.share_within_10pct, ".1%"), fmt(r.share_within_10pct, ".1%")),
        ("mean skewness", fmt(o.skew_mean, "+.3f"), fmt(r.skew_mean, "+.3f")),
        ("mean excess kurtosis", fmt(o.excess_kurtosis_mean, "+.3f"), fmt(r.excess_kurtosis_mean, "+.3f")),
        ("mass within +-1 sd (limit 68.3%)", fmt(o.central_mass, ".1%"), fmt(r.central_mass, ".1%")),
        ("Shapiro-Wilk rejects at 5%", fmt(o.shapiro_reject_share, ".1%"), fmt(r.shapiro_reject_share, ".1%")),
    )
    cols = (Column("check", "left"), Column("observed"), Column("if normal"))
    return Table(title, cols, rows, (f"{o.n_prompts} prompts with 3 or more samples.",))


def hazard_table(s: BoundSummary) -> Table:
    hz = s.hazard
    p = hz.pooled
    rows = [
        ("pooled hazard, 10th-25th length percentile", fmt(p.hazard_early, ".4f")),
        ("pooled hazard, 75th-90th length percentile", fmt(p.hazard_late, ".4f")),
        ("late / early", fmt(p.late_early_ratio, ".2f")),
        ("constant hazard with the same stops", fmt(p.constant_hazard, ".4f")),
        ("likelihood ratio vs constant (G2)", f"{fmt(p.lr_vs_constant.g2, '.1f')} on {p.lr_vs_constant.dof} df"),
    ]
    nh = hz.normalized
    if nh is not None:
        rows += [
            ("stops per median length, u = t/median in [0.4, 0.8)", fmt(nh.hazard_early, ".3f")),
            ("stops per median length, u in [1.2, 1.6)", fmt(nh.hazard_late, ".3f")),
            ("ramp ratio (1 for a constant hazard)", fmt(nh.late_early_ratio, ".2f")),
            ("stops per median length, u in [1.0, 1.4)", fmt(nh.hazard_mid, ".3f")),
            ("stops per median length, u in [1.6, 2.4)", fmt(nh.hazard_tail, ".3f")),
            ("past the median: [1.6, 2.4) vs [1.0, 1.4)", fmt(nh.tail_mid_ratio, ".2f")),
        ]
    for b in hz.buckets:
        lo, hi = b.median_range or (float("nan"), float("nan"))
        rows.append(
            (
                f"prompts with median length {fmt(lo, '.0f')}-{fmt(hi, '.0f')}: late / early",
                f"{fmt(b.late_early_ratio, '.2f')} (rho {fmt(b.spearman_rho, '+.2f')}, {b.n_samples} samples)",
            )
        )
    note = f"Bin width {p.bin_width} tokens; a constant per-prompt hazard gives ln 2 = 0.693 stops per median length."
    return Table("Stopping hazard", (Column("figure", "left"), Column("value")), tuple(rows), (note,))


def tables(s: BoundSummary) -> list[Table]:
    return [bound_table(s), affine_table(s), segments_table(s), normal_table(s), hazard_table(s)]


# --------------------------------------------------------------------------------------------- console
def print_bound(s: BoundSummary, written: list[str], out: Path, elapsed: float, console: Any = None) -> None:
    from rich.console import Console
    from rich.text import Text

    con = console or Console()
    if console is None and not con.is_terminal:  # piped or captured: rich would assume 80 columns
        con = Console(width=150)
    con.print(Text.assemble(("lenpred bound", "bold"), f" {s.run}  card {s.card_hash}  model {s.model}"))
    con.print(Text(counts_sentence(s)), highlight=False)
    for t in tables(s):
        t.print(con)
    con.print(Text(choice_sentence(s) + " " + tail_sentence(s)), highlight=False)
    for claim, text in verdict_lines(s):
        con.print(Text.assemble((claim, "bold"), f": {text}"), highlight=False)
    for text in s.cautions:
        con.print(Text.assemble(("caution", "yellow"), f": {text}"), highlight=False)
    con.print(Text(f"wrote {', '.join(written)} to {out} ({elapsed:.1f} s)"), highlight=False)


# --------------------------------------------------------------------------------------------- markdown
def markdown(s: BoundSummary, plots: list[str] | None = None) -> str:
    """summary.md: the human-readable form of bound.json (``plots``: file names beside it)."""
    lines = [
        f"# Prefill bound: {s.run}",
        "",
        f"Model `{s.model}`, card `{s.card_hash}`, lenpred {s.lenpred_version}. {counts_sentence(s)}",
        "",
        f"{choice_sentence(s)} {tail_sentence(s)}",
        "",
        "## Verdicts",
        "",
    ]
    lines += [f"- **{claim}**: {text}" for claim, text in verdict_lines(s)]
    if s.cautions:
        lines += ["", "Read with care:", ""] + [f"- {c}" for c in s.cautions]
    lines.append("")
    for t in tables(s):
        lines += t.to_markdown()
    lines += [f"Every figure: {BOUND_JSON}; per prompt: {PER_PROMPT_CSV}.", ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem.replace('_', ' ')}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- files
def rendered_files(analysis: BoundAnalysis, *, plots: bool = True, grid: int = 16) -> dict[str, bytes]:
    """summary.md and (with ``plots``) the four PNG plots, by file name: what
    :func:`lenpred.stats.artifact.write_bound` writes beside the figures."""
    images: dict[str, bytes] = {}
    if plots:
        from lenpred.report.bound_plots import render_bound_plots

        images = render_bound_plots(analysis, grid)
    return {SUMMARY_MD: markdown(analysis.summary, list(images)).encode(), **images}


def written_names(art: Artifact) -> list[str]:
    """The files a user knows, in the order they matter (meta.json last)."""
    names = list(art.meta.get("files", {}))
    first = [n for n in (BOUND_JSON, PER_PROMPT_CSV, SUMMARY_MD) if n in names]
    return first + [n for n in names if n not in first] + ["meta.json"]
