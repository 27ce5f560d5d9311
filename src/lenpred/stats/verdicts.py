"""Plain-language verdicts on the theory's claims, and cautions on how far to trust the figures.

Each verdict is one sentence that starts with HOLDS / DOES NOT HOLD / HOLDS ON AGGREGATE ONLY / WEAK /
NOT REJECTED / UNRELIABLE / UNDETERMINED / NOT TESTED and carries the figures that decide it.
"""

from __future__ import annotations

import math
from typing import Any

from scipy import stats


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
        if math.isfinite(seg.get("length_cv_mean", float("nan"))):
            fig += (
                f"; within a prompt the CV of the length is {seg['length_cv_mean']:.3f} and count and length "
                f"correlate at r = {seg['count_length_corr_mean']:+.2f} (the theory needs CV(L) >= CV(N) and a strong positive r)"
            )
        if not avc["determined"]:
            out["alpha_is_segment_cv"] = f"UNDETERMINED: intervals too wide ({fig})."
        else:
            if avc["agree"]:
                out["alpha_is_segment_cv"] = f"HOLDS: {fig}."
            elif avc["intervals_overlap"]:
                out["alpha_is_segment_cv"] = (
                    f"NOT REJECTED: the intervals overlap but the two differ by more than 20% ({fig})."
                )
            else:
                out["alpha_is_segment_cv"] = f"DOES NOT HOLD: {fig}."
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
            f"{tc['expected_truncated']:.1f}: most truncated samples are runaway generations that would not end (loops, rambling); their latent "
            "length is undefined, so the censoring-aware figures are a guess and the capped ones are the bound "
            "on what this card serves"
        )
    with_samples = c["prompts"] + c.get("prompts_left_out_few_samples", 0)
    if c["prompts_listed"] and with_samples < c["prompts_listed"]:
        out.append(
            f"the run is incomplete: {with_samples} of {c['prompts_listed']} listed prompts have samples"
        )
    return out
