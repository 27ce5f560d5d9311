"""``summary.md``: the human-readable form of bound.json."""

from __future__ import annotations

import math
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lenpred.data.rundir import atomic_write_bytes

if TYPE_CHECKING:
    from lenpred.stats.report import BoundAnalysis


def fmt(x: Any, spec: str) -> str:
    """``format(x, spec)``, or "n/a" for a missing or non-finite figure."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return format(x, spec)


def prompts_phrase(c: dict[str, Any]) -> str:
    """'96 prompts with >= 24 samples (7 with fewer left out)' or just '96 prompts'."""
    left = c.get("prompts_left_out_few_samples", 0)
    if not left:
        return f"{c['prompts']} prompts"
    return f"{c['prompts']} prompts with >= {c['min_samples']} samples ({left} with fewer left out)"


def _ci(ci: Any, fmt: str = ".1f") -> str:
    lo, hi = ci
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return "n/a"
    return f"[{lo:{fmt}}, {hi:{fmt}}]"


def _normal_table(nl: dict[str, Any]) -> list[str]:
    o, r = nl["observed"], nl["if_normal"]
    return [
        "| check | observed | if exactly normal (same K) |",
        "|---|---|---|",
        f"| sum MAE_i / sum sqrt(2/pi) sd_i | {fmt(o['mae_ratio_aggregate'], '.3f')} {_ci(o['mae_ratio_aggregate_ci'], '.3f')} | {fmt(r['mae_ratio_aggregate'], '.3f')} |",
        f"| prompts with MAE_i within 5% of normal law | {fmt(o['share_within_5pct'], '.1%')} | {fmt(r['share_within_5pct'], '.1%')} |",
        f"| prompts with MAE_i within 10% of normal law | {fmt(o['share_within_10pct'], '.1%')} | {fmt(r['share_within_10pct'], '.1%')} |",
        f"| mean skewness | {fmt(o['skew_mean'], '+.3f')} | {fmt(r['skew_mean'], '+.3f')} |",
        f"| mean excess kurtosis | {fmt(o['excess_kurtosis_mean'], '+.3f')} | {fmt(r['excess_kurtosis_mean'], '+.3f')} |",
        f"| mass within +-1 sd (limit 68.3%) | {fmt(o['central_mass'], '.1%')} | {fmt(r['central_mass'], '.1%')} |",
        f"| Shapiro-Wilk rejects at 5% | {fmt(o['shapiro_reject_share'], '.1%')} | {fmt(r['shapiro_reject_share'], '.1%')} |",
    ]


def markdown(summary: dict[str, Any], plots: list[Path] | None = None) -> str:
    """The human-readable summary of bound.json."""
    c = summary["counts"]
    lvl = round(summary["config"]["ci"] * 100)
    lines = [
        f"# Prefill bound: {summary['run']}",
        "",
        f"Model `{summary['model']}`, card `{summary['card_hash']}`, lenpred {summary['lenpred_version']}. "
        f"{prompts_phrase(c)}, {c['samples']} samples ({c['samples_per_prompt']['min']}-"
        f"{c['samples_per_prompt']['max']} per prompt), {c['truncated_share']:.1%} truncated at "
        f"max_new_tokens={c['max_new_tokens']}; {c['prompts_all_truncated']} prompts have every sample truncated.",
        "",
        "",
        f"Headline bound: **{summary['variants'][summary['headline']]['label']}**; theory checks (normal law, "
        f"affine law) on: **{summary['variants'][summary['theory_variant']]['label']}** ({summary['variant_choice']}). "
        f"Tail check: {summary['tail_check']['observed_truncated']} truncated samples, "
        f"{summary['tail_check']['expected_truncated']:.1f} expected from a per-prompt normal tail.",
        "",
        "## Verdicts",
        "",
    ]
    lines += [f"- **{k.replace('_', ' ')}**: {v}" for k, v in summary["verdicts"].items()]
    if summary.get("cautions"):
        lines += ["", "Read with care:", ""] + [f"- {c}" for c in summary["cautions"]]
    lines += [
        "",
        f"## The bound ({lvl}% bootstrap intervals over prompts)",
        "",
        "| variant | prompts | oracle MAE (tok) | interval | bracket in-sample..LOO | oracle MAE / mean length | "
        "mean abs rel. error | oracle RMSE (tok) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in summary["variants"].items():
        star = " (headline)" if name == summary["headline"] else ""
        if not v.get("available"):
            lines.append(f"| {v['label']}{star} | 0 | n/a | | | | | {v.get('reason', '')} |")
            continue
        lines.append(
            f"| {v['label']}{star} | {v['n_prompts']} | {v['oracle_mae']:.1f} | {_ci(v['oracle_mae_ci'])} | "
            f"{v['oracle_mae_insample']:.1f}..{v['oracle_mae_loo']:.1f} | {v['relative_mae']:.3f} "
            f"{_ci(v['relative_mae_ci'], '.3f')} | {v['mean_relative_error']:.3f} | {v['oracle_rmse']:.1f} |"
        )
    head = summary["variants"][summary["headline"]]
    if head.get("by_k"):
        parts = ", ".join(
            f"K={k}: {b['oracle_mae']:.1f} tok over {b['n_prompts']} prompts (mean length {b['mean_length']:.0f})"
            for k, b in head["by_k"].items()
        )
        lines += ["", f"Headline oracle MAE by samples per prompt: {parts}."]
    af = summary["affine"]
    lines += ["", "## Affine variance law sd = alpha * mu + b", ""]
    if af.get("available"):
        rb = af["robust"]
        lines += [
            "| fit | alpha | interval | b (tok) | interval |",
            "|---|---|---|---|---|",
            f"| OLS (finite-K corrected) | {af['alpha']:.3f} | {_ci(af['alpha_ci'], '.3f')} | {af['b']:.1f} | {_ci(af['b_ci'])} |",
            f"| Theil-Sen | {rb['alpha']:.3f} | {_ci(rb['alpha_ci'], '.3f')} | {rb['b']:.1f} | {_ci(rb['b_ci'])} |",
            f"| naive OLS of s on mean | {af['uncorrected_ols']['alpha']:.3f} | | {af['uncorrected_ols']['b']:.1f} | |",
            "",
            f"R^2 = {af['r2']:.3f} (denoised for the sampling noise of per-prompt sd: {af['r2_denoised']:.3f}); "
            f"reliability of the per-prompt means {af['reliability']:.3f}; {af['n_prompts']} prompts.",
        ]
    seg = summary["segments"]
    lines += ["", "## Segments", ""]
    if seg.get("available"):
        units = ", ".join(f"{u} {v:.3f}" for u, v in seg.get("all_units_cv_mean", {}).items())
        lines += [
            f"CV of the {seg['unit']} count per prompt: mean {seg['cv_mean']:.3f} {_ci(seg['cv_mean_ci'], '.3f')}, "
            f"median {seg['cv_median']:.3f}, {seg['mean_segments']:.1f} segments per response on average "
            f"({seg['n_prompts']} prompts, EOS samples only). Mean CV by unit: {units}.",
            f"On the same prompts the CV of the token length is {fmt(seg.get('length_cv_mean'), '.3f')} and the "
            f"within-prompt correlation of segment count and token length {fmt(seg.get('count_length_corr_mean'), '+.2f')} "
            "(N segments of independent length give CV(L) >= CV(N) and a strong positive correlation).",
        ]
    else:
        lines.append(f"Not available: {seg.get('reason')}.")
    nl = summary["normal_law"]
    lines += ["", "## Normal law", ""]
    if not nl.get("available"):
        lines.append(f"Not available: {nl.get('reason')}.")
    else:
        lines += _normal_table(nl)
    hz = summary["hazard"]
    p = hz["pooled"]
    lines += [
        "",
        "## Hazard",
        "",
        f"Pooled per-token hazard {p['hazard_early']:.4f} between the 10th and 25th length percentiles, "
        f"{p['hazard_late']:.4f} between the 75th and 90th (ratio {p['late_early_ratio']:.2f}); constant-hazard "
        f"equivalent {p['constant_hazard']:.4f}; likelihood ratio vs constant G2 = {p['lr_vs_constant']['g2']:.1f} "
        f"on {p['lr_vs_constant']['dof']} df. Bin width {p['bin_width']} tokens.",
    ]
    nh = hz.get("normalized")
    if nh:
        lines.append(
            f"In normalised time u = t / median: {nh['hazard_early']:.3f} stops per median length for u in "
            f"[0.4, 0.8), {nh['hazard_late']:.3f} for u in [1.2, 1.6) (ratio {nh['late_early_ratio']:.2f}; a "
            f"constant hazard gives {nh['memoryless_value']:.3f} in both); past the median "
            f"{nh['hazard_mid']:.3f} for u in [1.0, 1.4) and {nh['hazard_tail']:.3f} for u in [1.6, 2.4) (ratio "
            f"{nh['tail_mid_ratio']:.2f}; 1 for a constant hazard)."
        )
    for b in hz["buckets"]:
        lo, hi = b["median_range"]
        lines.append(
            f"- prompts with median length {lo:.0f}-{hi:.0f}: late/early hazard ratio {b['late_early_ratio']:.2f}, "
            f"Spearman rho {b['spearman_rho']:+.2f} ({b['n_samples']} samples)"
        )
    lines += ["", "Every figure: bound.json; per prompt: per_prompt.csv.", ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem.replace('_', ' ')}]({Path(p).name})" for p in plots] + [""]
    return "\n".join(lines)


def write_markdown(
    analysis: BoundAnalysis, out_dir: str | PathLike[str], plots: list[Path] | None = None
) -> Path:
    """Write summary.md; ``plots`` (files in ``out_dir``) are embedded as images."""
    path = Path(out_dir) / "summary.md"
    atomic_write_bytes(path, markdown(analysis.summary, plots).encode())
    return path
