"""The whole bound analysis of one run, and its written forms: ``bound.json`` and ``summary.md``.

:func:`analyse_run` runs every estimator of this package on a run directory and returns a
:class:`BoundAnalysis`; :func:`write_json` and :func:`write_markdown` write it down. The verdicts
state plainly, with their figures, which of the theory's claims hold for this run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from lenpred import __version__
from lenpred.data.rundir import RunDir, atomic_write_bytes, atomic_write_json
from lenpred.errors import DataError
from lenpred.stats.affine import fit_affine
from lenpred.stats.bound import summarize_bound
from lenpred.stats.censoring import tail_check
from lenpred.stats.config import VARIANTS, BoundConfig
from lenpred.stats.hazard import hazard_analysis
from lenpred.stats.lengths import VARIANT_LABELS, RunLengths, build_variant, load_run_lengths
from lenpred.stats.normal import add_normal_columns, normal_law
from lenpred.stats.perprompt import describe_variant
from lenpred.stats.segments import all_units_cv, segment_cv

SCHEMA = "lenpred.bound/1"


@dataclass
class BoundAnalysis:
    """Everything ``lenpred bound`` reports. ``summary`` is what bound.json holds."""

    summary: dict[str, Any]
    per_prompt: pd.DataFrame  # the theory variant, one row per prompt (with segment columns)
    hazard: dict[str, Any]  # with DataFrames, for plots
    lengths: RunLengths
    variants_per_prompt: dict[str, pd.DataFrame] = field(default_factory=dict)


def choose_variants(
    config: BoundConfig,
    tail: dict[str, Any],
    available: dict[str, pd.DataFrame],
    errors: dict[str, DataError],
) -> tuple[str, str, str]:
    """Which variant carries the headline bound, which one the theory checks, and why.

    ``auto`` keeps truncated samples censored (the design's rule) as long as they look like the upper
    tail of each prompt's length law, which is what the imputation assumes. When they do not (many
    more truncations than any per-prompt tail explains: a separate mode such as repetition loops,
    whose latent length is not defined), the headline bound is the capped one (exact for the lengths
    the engine serves, and a lower bound on any latent-length bound) and the theory, which is about
    responses that end, is checked on the EOS samples.
    """
    if tail["consistent"]:
        auto = ("censored", "censored", "truncations are consistent with a per-prompt normal tail")
    else:
        auto = (
            "capped",
            "eos",
            f"{tail['observed_truncated']} truncations where a per-prompt normal tail predicts "
            f"{tail['expected_truncated']:.1f}: they are a separate mode (e.g. repetition loops), so the "
            "headline bound is the capped one and the theory is checked on EOS samples",
        )
    # under auto, a variant that keeps no prompt gives way to the next one that does
    fallbacks = {"headline": ("capped", "eos"), "theory": ("eos", "capped")}
    chosen = []
    for want, auto_pick, role in ((config.headline, auto[0], "headline"), (config.theory, auto[1], "theory")):
        if want != "auto":
            if want not in available:
                raise errors[want]
            chosen.append(want)
            continue
        picks = [p for p in (auto_pick, *fallbacks[role]) if p in available]
        if not picks:
            raise errors[auto_pick]
        chosen.append(picks[0])
    reason = auto[2] if "auto" in (config.headline, config.theory) else "chosen by the configuration"
    return chosen[0], chosen[1], reason


def analyse_run(run: RunDir | str | PathLike[str], config: BoundConfig | None = None) -> BoundAnalysis:
    """Compute every figure of the bound analysis for one run directory."""
    config = config or BoundConfig()
    rng = np.random.default_rng(config.seed)
    lengths = load_run_lengths(run, config.min_samples)

    tail = tail_check(
        [
            (g["length"].to_numpy(float), g["censored"].to_numpy(bool))
            for _, g in lengths.samples.groupby("prompt_id")
        ],
        lengths.cap,
    )
    variants: dict[str, dict[str, Any]] = {}
    per_variant: dict[str, pd.DataFrame] = {}
    errors: dict[str, DataError] = {}
    for name in VARIANTS:
        try:
            v = build_variant(lengths, name, config, rng)
        except DataError as err:
            errors[name] = err
            variants[name] = {"label": VARIANT_LABELS[name], "available": False, "reason": err.problem}
            continue
        pp = add_normal_columns(describe_variant(v))
        per_variant[name] = pp
        variants[name] = {
            "label": v.label,
            "available": True,
            "dropped_prompts": v.dropped,
            "imputed_samples": int(pp["n_truncated"].sum()) if name == "censored" else 0,
            **summarize_bound(pp, config.n_boot, config.ci, rng),
        }
    headline, theory, reason = choose_variants(config, tail, per_variant, errors)

    pp = per_variant[theory]
    affine = fit_affine(
        pp["mean"].to_numpy(),
        pp["sd"].to_numpy(),
        pp["k"].to_numpy(),
        pp["skew"].to_numpy(),
        config.n_boot,
        config.n_boot_robust,
        config.ci,
        rng,
    )
    normal = normal_law(pp, config.n_normal_reference, config.n_boot, config.ci, rng)
    seg, seg_table = segment_cv(
        lengths, config.segment_unit, config.segment_regex, config.min_samples, config.n_boot, config.ci, rng
    )
    if len(seg_table):
        pp = pp.merge(seg_table, on="prompt_id", how="left")
    seg["all_units_cv_mean"] = all_units_cv(lengths, config.min_samples)
    hazard = hazard_analysis(
        lengths,
        pd.Series(pp["median"].to_numpy(), index=pp["prompt_id"]),
        config.hazard_bin,
        config.n_buckets,
        config.min_at_risk,
        drop_truncated=theory == "eos",  # the theory is about responses that end: see choose_variants
    )

    s = lengths.samples
    k = s.groupby("prompt_id").size()
    summary: dict[str, Any] = {
        "schema": SCHEMA,
        "lenpred_version": __version__,
        "run": lengths.path,
        "card_hash": lengths.card_hash,
        "model": lengths.card.get("model", {}).get("id"),
        "sampling": lengths.card.get("sampling", {}),
        "config": config.to_dict(),
        "counts": {
            "prompts": lengths.n_prompts,
            "prompts_listed": _n_listed_prompts(lengths),
            "samples": len(s),
            "samples_per_prompt": {"min": int(k.min()), "median": float(k.median()), "max": int(k.max())},
            "truncated_samples": int(s["censored"].sum()),
            "truncated_share": float(s["censored"].mean()),
            "prompts_all_truncated": int(s.groupby("prompt_id")["censored"].all().sum()),
            "max_new_tokens": lengths.cap,
        },
        "headline": headline,
        "theory_variant": theory,
        "variant_choice": reason,
        "tail_check": tail,
        "variants": variants,
        "normal_law": normal,
        "affine": affine,
        "segments": seg,
        "hazard": _hazard_json(hazard),
    }
    summary["alpha_vs_segment_cv"] = _alpha_vs_cv(affine, seg)
    summary["verdicts"] = verdicts(summary)
    summary["cautions"] = cautions(summary)
    return BoundAnalysis(
        summary=summary, per_prompt=pp, hazard=hazard, lengths=lengths, variants_per_prompt=per_variant
    )


def _n_listed_prompts(lengths: RunLengths) -> int | None:
    try:
        return len(RunDir.open(lengths.path).prompts())
    except DataError:
        return None


def _hazard_json(h: dict[str, Any]) -> dict[str, Any]:
    def curve(c: dict[str, Any] | None) -> dict[str, Any] | None:
        if c is None:
            return None
        return {
            key: (val.to_dict(orient="list") if isinstance(val, pd.DataFrame) else val)
            for key, val in c.items()
        }

    return {
        "pooled": curve(h["pooled"]),
        "buckets": [curve(b) for b in h["buckets"]],
        "normalized": curve(h["normalized"]),
    }


def _alpha_vs_cv(affine: dict[str, Any], seg: dict[str, Any]) -> dict[str, Any]:
    if not (affine.get("available") and seg.get("available")):
        return {"available": False}
    a, cv = affine["alpha"], seg["cv_mean"]
    lo, hi = affine["alpha_ci"]
    clo, chi = seg["cv_mean_ci"]
    # an interval wider than the value itself cannot confirm or refute anything
    determined = bool(
        a > 0 and cv > 0 and (hi - lo) <= a and (chi - clo) <= cv and not affine.get("reliability_floored")
    )
    return {
        "available": True,
        "alpha": a,
        "segment_cv": cv,
        "ratio": a / cv if cv > 0 else float("nan"),
        "determined": determined,
        # the claim holds when the two intervals overlap, or the two agree within 20%
        "agree": bool(determined and ((lo <= chi and clo <= hi) or 0.8 <= a / cv <= 1.25)),
    }


# --------------------------------------------------------------------------------------------- verdicts
def _normal_verdict(nl: dict[str, Any], out: dict[str, str]) -> None:
    if not nl.get("available"):
        out["normal_law"] = "NOT TESTED: the normal-law checks need 3 or more samples per prompt."
        return
    obs, ref = nl["observed"], nl["if_normal"]
    r, (rlo, rhi) = obs["mae_ratio_aggregate"], obs["mae_ratio_aggregate_ci"]
    rej, rej_ref = obs["shapiro_reject_share"], ref["shapiro_reject_share"]
    n_shape = obs["n_prompts_shape"]
    agg_ok = math.isfinite(r) and abs(r - ref["mae_ratio_aggregate"]) <= 0.05
    detail = (
        f"sum MAE_i / sum sqrt(2/pi) sd_i = {r:.3f} [{rlo:.3f}, {rhi:.3f}] ({ref['mae_ratio_aggregate']:.3f} if "
        f"exactly normal)"
    )
    if n_shape and math.isfinite(rej) and math.isfinite(rej_ref):
        # is the Shapiro-Wilk rejection rate above what exactly normal prompts with the same K give?
        p_shape = float(
            stats.binomtest(
                int(round(rej * n_shape)), n_shape, min(max(rej_ref, 1e-6), 1 - 1e-6), alternative="greater"
            ).pvalue
        )
        shape_ok: bool | None = p_shape >= 0.01
        detail += (
            f"; Shapiro-Wilk rejects at 5% on {rej:.0%} of prompts ({rej_ref:.0%} if normal); mean skew "
            f"{obs['skew_mean']:+.2f}, mean excess kurtosis {obs['excess_kurtosis_mean']:+.2f}"
        )
    else:
        shape_ok = None
    if not math.isfinite(r):
        out["normal_law"] = f"NOT TESTED: no prompt has a positive spread ({detail})."
    elif shape_ok is None:
        out["normal_law"] = (
            f"NOT TESTED: no prompt has varied enough samples for the shape checks ({detail})."
        )
    elif agg_ok and shape_ok:
        out["normal_law"] = f"HOLDS: per-prompt lengths are consistent with a normal law ({detail})."
    elif agg_ok:
        out["normal_law"] = (
            f"HOLDS ON AGGREGATE ONLY: MAE_i follows the normal law, but shapes depart from it ({detail})."
        )
    else:
        out["normal_law"] = f"DOES NOT HOLD: {detail}."


def verdicts(summary: dict[str, Any]) -> dict[str, str]:
    """One plain sentence per claim of the theory, with the figures that decide it."""
    out: dict[str, str] = {}
    _normal_verdict(summary["normal_law"], out)
    af = summary["affine"]
    if af.get("available"):
        r2d = af["r2_denoised"]
        fig = (
            f"alpha = {af['alpha']:.3f} [{af['alpha_ci'][0]:.3f}, {af['alpha_ci'][1]:.3f}], b = {af['b']:.1f} tokens, "
            f"R^2 = {af['r2']:.2f} (denoised {r2d:.2f}); Theil-Sen alpha = {af['robust']['alpha']:.3f}"
        )
        holds = af["alpha_ci"][0] > 0 and (r2d >= 0.5 if math.isfinite(r2d) else af["r2"] >= 0.5)
        if af["reliability_floored"]:
            out["affine_law"] = (
                "UNRELIABLE: per-prompt means vary less across prompts than their own sampling noise "
                f"(reliability < 0.5), so the slope cannot be corrected; collect more samples per prompt ({fig})."
            )
        else:
            out["affine_law"] = ("HOLDS: " if holds else "WEAK: ") + fig + "."
    else:
        out["affine_law"] = f"NOT TESTED: {af.get('reason')}."

    avc = summary["alpha_vs_segment_cv"]
    seg = summary["segments"]
    if avc.get("available"):
        fig = (
            f"alpha = {avc['alpha']:.3f} vs CV of the {seg['unit']} count = {avc['segment_cv']:.3f} "
            f"[{seg['cv_mean_ci'][0]:.3f}, {seg['cv_mean_ci'][1]:.3f}] (ratio {avc['ratio']:.2f})"
        )
        if not avc["determined"]:
            out["alpha_is_segment_cv"] = f"UNDETERMINED: intervals too wide ({fig})."
        else:
            out["alpha_is_segment_cv"] = ("HOLDS: " if avc["agree"] else "DOES NOT HOLD: ") + fig + "."
    else:
        out["alpha_is_segment_cv"] = f"NOT TESTED: {seg.get('reason', 'affine fit unavailable')}."

    hz = summary["hazard"]
    nh = hz.get("normalized") or {}
    ratio = nh.get("late_early_ratio", float("nan"))
    pooled = hz["pooled"]
    fig = (
        f"stops per median length at u = t/median in [1.2, 1.6) vs [0.4, 0.8): ratio {ratio:.1f} (1 for a constant "
        f"hazard); pooled per-token hazard late/early {pooled['late_early_ratio']:.1f}, Spearman rho "
        f"{pooled['spearman_rho']:+.2f}"
    )
    if not math.isfinite(ratio):
        out["hazard_ramp"] = f"UNDETERMINED: too few samples at risk ({fig})."
    elif ratio >= 2.0:
        out["hazard_ramp"] = f"HOLDS: the stopping probability ramps up ({fig})."
    elif ratio >= 1 / 1.5:
        out["hazard_ramp"] = f"DOES NOT HOLD: the hazard is roughly constant ({fig})."
    else:
        out["hazard_ramp"] = f"DOES NOT HOLD: the hazard falls over time ({fig})."
    return out


def cautions(summary: dict[str, Any]) -> list[str]:
    """Conditions under which the figures should be read with care (printed with them)."""
    out = []
    c = summary["counts"]
    head = summary["variants"][summary["headline"]]
    if head["n_prompts"] < 30:
        out.append(
            f"only {head['n_prompts']} prompts: bootstrap intervals over prompts are unreliable below ~30 "
            "and the across-prompt fits (affine law) are weak"
        )
    if c["samples_per_prompt"]["median"] < 8:
        out.append(
            f"median {c['samples_per_prompt']['median']:.0f} samples per prompt: 8 or more are recommended"
        )
    if c["truncated_share"] > 0.10:
        out.append(
            f"{c['truncated_share']:.0%} of samples were truncated: the censoring-aware figures rest on a normal "
            "tail beyond max_new_tokens; compare with the capped and EOS-only variants"
        )
    tc = summary["tail_check"]
    if not tc["consistent"]:
        out.append(
            f"{tc['observed_truncated']} truncations where a per-prompt normal tail predicts "
            f"{tc['expected_truncated']:.1f}: most truncated samples never end (repetition loops?); their latent "
            "length is undefined, so the censoring-aware figures are a guess and the capped ones are the bound "
            "on what this card serves"
        )
    if c["prompts_listed"] and c["prompts"] < c["prompts_listed"]:
        out.append(
            f"the run is incomplete: {c['prompts']} of {c['prompts_listed']} listed prompts have samples"
        )
    return out


# --------------------------------------------------------------------------------------------- writing
def _jsonable(obj: Any) -> Any:
    """Plain JSON: NaN and infinities become null, numpy scalars and tuples become Python ones."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.bool_ | bool):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    return obj


def write_json(analysis: BoundAnalysis, out_dir: str | PathLike[str]) -> Path:
    path = Path(out_dir) / "bound.json"
    atomic_write_json(path, _jsonable(analysis.summary))
    return path


def write_per_prompt(analysis: BoundAnalysis, out_dir: str | PathLike[str]) -> Path:
    """per_prompt.csv: one row per prompt and variant (column ``variant``), segment columns included."""
    seg_cols = [c for c in analysis.per_prompt.columns if c.startswith("seg_")]
    seg = analysis.per_prompt[["prompt_id", *seg_cols]] if seg_cols else None
    frames = []
    for name, pp in analysis.variants_per_prompt.items():
        frame = pp.merge(seg, on="prompt_id", how="left") if seg is not None else pp
        frames.append(frame.assign(variant=name))
    table = pd.concat(frames, ignore_index=True)
    table = table[["variant", *[c for c in table.columns if c != "variant"]]]
    path = Path(out_dir) / "per_prompt.csv"
    atomic_write_bytes(path, table.to_csv(index=False, float_format="%.6g").encode())
    return path


def fmt(x: Any, spec: str) -> str:
    """``format(x, spec)``, or "n/a" for a missing or non-finite figure."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return format(x, spec)


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


def markdown(summary: dict[str, Any]) -> str:
    """The human-readable summary of bound.json."""
    c = summary["counts"]
    lvl = round(summary["config"]["ci"] * 100)
    lines = [
        f"# Prefill bound: {summary['run']}",
        "",
        f"Model `{summary['model']}`, card `{summary['card_hash']}`, lenpred {summary['lenpred_version']}. "
        f"{c['prompts']} prompts, {c['samples']} samples ({c['samples_per_prompt']['min']}-"
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
    lines += [
        "",
        "Plots: hist_grid.png, sd_vs_mu.png, hazard.png, mae_normal.png. Every figure: bound.json.",
        "",
    ]
    return "\n".join(lines)


def write_markdown(analysis: BoundAnalysis, out_dir: str | PathLike[str]) -> Path:
    path = Path(out_dir) / "summary.md"
    atomic_write_bytes(path, markdown(analysis.summary).encode())
    return path
