"""Plain-language verdicts on the theory's claims, and cautions on how far to trust the figures.

Each verdict is a :class:`~lenpred.stats.results.Verdict`: a status (HOLDS / DOES NOT HOLD / HOLDS ON
AGGREGATE ONLY / WEAK / NOT REJECTED / UNRELIABLE / UNDETERMINED / NOT TESTED) and one sentence that
carries the figures that decide it. The rules are here and nowhere else; the report only prints them.
"""

from __future__ import annotations

import math

from scipy import stats

from lenpred.stats.results import (
    AffineFit,
    AffineUnavailable,
    AlphaVsSegmentCV,
    AlphaVsSegmentCVUnavailable,
    Counts,
    Hazard,
    NormalLaw,
    NormalLawUnavailable,
    SegmentCV,
    SegmentsUnavailable,
    TailCheck,
    VariantBound,
    Verdict,
)

# the normal law holds on aggregate when sum MAE_i / sum sqrt(2/pi) sd_i is this close to its value
# for exactly normal prompts with the same K
NORMAL_AGGREGATE_TOL = 0.05
# the shape checks fail when Shapiro-Wilk rejects more often than for normal prompts at this level
SHAPE_P = 0.01
AFFINE_MIN_R2 = 0.5
RAMP_RATIO = 2.0  # hazard late/early in normalised time for "ramps up"
FALLING_RATIO = 1 / 1.5  # below this the hazard falls


def _f(x: float, spec: str) -> str:
    """A figure in a sentence; "n/a" where it is undefined (never "nan")."""
    return format(x, spec) if x is not None and math.isfinite(x) else "n/a"


def normal_verdict(nl: NormalLaw | NormalLawUnavailable) -> Verdict:
    if not isinstance(nl, NormalLaw):
        return Verdict(status="NOT TESTED", detail="the normal-law checks need 3 or more samples per prompt.")
    obs, ref = nl.observed, nl.if_normal
    r = obs.mae_ratio_aggregate
    rlo, rhi = obs.mae_ratio_aggregate_ci or (float("nan"), float("nan"))
    rej, rej_ref = obs.shapiro_reject_share, ref.shapiro_reject_share
    n_shape = obs.n_prompts_shape
    agg_ok = math.isfinite(r) and abs(r - ref.mae_ratio_aggregate) <= NORMAL_AGGREGATE_TOL
    detail = (
        f"sum MAE_i / sum sqrt(2/pi) sd_i = {_f(r, '.3f')} [{_f(rlo, '.3f')}, {_f(rhi, '.3f')}] "
        f"({_f(ref.mae_ratio_aggregate, '.3f')} if exactly normal)"
    )
    shape_ok: bool | None = None
    if n_shape and math.isfinite(rej) and math.isfinite(rej_ref):
        # is the Shapiro-Wilk rejection rate above what exactly normal prompts with the same K give?
        p_shape = float(
            stats.binomtest(
                int(round(rej * n_shape)), n_shape, min(max(rej_ref, 1e-6), 1 - 1e-6), alternative="greater"
            ).pvalue
        )
        shape_ok = p_shape >= SHAPE_P
        detail += (
            f"; Shapiro-Wilk rejects at 5% on {rej:.0%} of prompts ({rej_ref:.0%} if normal); mean skew "
            f"{_f(obs.skew_mean, '+.2f')}, mean excess kurtosis {_f(obs.excess_kurtosis_mean, '+.2f')}"
        )
    if not math.isfinite(r):
        return Verdict(status="NOT TESTED", detail=f"no prompt has a positive spread ({detail}).")
    if shape_ok is None:
        return Verdict(
            status="NOT TESTED", detail=f"no prompt has varied enough samples for the shape checks ({detail})."
        )
    if agg_ok and shape_ok:
        return Verdict(status="HOLDS", detail=f"per-prompt lengths are consistent with a normal law ({detail}).")
    if agg_ok:
        return Verdict(
            status="HOLDS ON AGGREGATE ONLY",
            detail=f"MAE_i follows the normal law, but shapes depart from it ({detail}).",
        )
    return Verdict(status="DOES NOT HOLD", detail=f"{detail}.")


def affine_verdict(af: AffineFit | AffineUnavailable) -> Verdict:
    if not isinstance(af, AffineFit):
        return Verdict(status="NOT TESTED", detail=f"{af.reason}.")
    r2d = af.r2_denoised
    fig = (
        f"alpha = {af.alpha:.3f} [{_f(af.alpha_ci[0], '.3f')}, {_f(af.alpha_ci[1], '.3f')}], b = {af.b:.1f} "
        f"tokens, R^2 = {_f(af.r2, '.2f')} (denoised {_f(r2d, '.2f')}); Theil-Sen alpha = {_f(af.robust.alpha, '.3f')}"
    )
    if af.reliability_floored:
        return Verdict(
            status="UNRELIABLE",
            detail="per-prompt means vary less across prompts than their own sampling noise "
            f"(reliability < 0.5), so the slope cannot be corrected; collect more samples per prompt ({fig}).",
        )
    holds = af.alpha_ci[0] > 0 and (r2d >= AFFINE_MIN_R2 if math.isfinite(r2d) else af.r2 >= AFFINE_MIN_R2)
    return Verdict(status="HOLDS" if holds else "WEAK", detail=f"{fig}.")


def segment_verdict(
    avc: AlphaVsSegmentCV | AlphaVsSegmentCVUnavailable, seg: SegmentCV | SegmentsUnavailable
) -> Verdict:
    if not isinstance(avc, AlphaVsSegmentCV) or not isinstance(seg, SegmentCV):
        reason = seg.reason if isinstance(seg, SegmentsUnavailable) else "affine fit unavailable"
        return Verdict(status="NOT TESTED", detail=f"{reason}.")
    fig = (
        f"alpha = {avc.alpha:.3f} vs CV of the {seg.unit} count = {avc.segment_cv:.3f} "
        f"[{_f(seg.cv_mean_ci[0], '.3f')}, {_f(seg.cv_mean_ci[1], '.3f')}] (ratio {_f(avc.ratio, '.2f')})"
    )
    if math.isfinite(seg.length_cv_mean):
        fig += (
            f"; within a prompt the CV of the length is {seg.length_cv_mean:.3f} and count and length "
            f"correlate at r = {_f(seg.count_length_corr_mean, '+.2f')} (the theory needs CV(L) >= CV(N) and a "
            "strong positive r)"
        )
    if not avc.determined:
        return Verdict(status="UNDETERMINED", detail=f"intervals too wide ({fig}).")
    if avc.agree:
        return Verdict(status="HOLDS", detail=f"{fig}.")
    if avc.intervals_overlap:
        return Verdict(
            status="NOT REJECTED", detail=f"the intervals overlap but the two differ by more than 20% ({fig})."
        )
    return Verdict(status="DOES NOT HOLD", detail=f"{fig}.")


def hazard_verdict(hz: Hazard) -> Verdict:
    ratio = hz.normalized.late_early_ratio if hz.normalized is not None else float("nan")
    fig = (
        f"stops per median length at u = t/median in [1.2, 1.6) vs [0.4, 0.8): ratio {_f(ratio, '.1f')} (1 for a "
        f"constant hazard); pooled per-token hazard late/early {_f(hz.pooled.late_early_ratio, '.1f')}, Spearman "
        f"rho {_f(hz.pooled.spearman_rho, '+.2f')}"
    )
    if not math.isfinite(ratio):
        return Verdict(status="UNDETERMINED", detail=f"too few samples at risk ({fig}).")
    if ratio >= RAMP_RATIO:
        return Verdict(status="HOLDS", detail=f"the stopping probability ramps up ({fig}).")
    if ratio >= FALLING_RATIO:
        return Verdict(status="DOES NOT HOLD", detail=f"the hazard is roughly constant ({fig}).")
    return Verdict(status="DOES NOT HOLD", detail=f"the hazard falls over time ({fig}).")


def verdicts(
    *,
    normal_law: NormalLaw | NormalLawUnavailable,
    affine: AffineFit | AffineUnavailable,
    alpha_vs_segment_cv: AlphaVsSegmentCV | AlphaVsSegmentCVUnavailable,
    segments: SegmentCV | SegmentsUnavailable,
    hazard: Hazard,
) -> dict[str, Verdict]:
    """One verdict per claim of the theory, with the figures that decide it."""
    return {
        "normal_law": normal_verdict(normal_law),
        "affine_law": affine_verdict(affine),
        "alpha_is_segment_cv": segment_verdict(alpha_vs_segment_cv, segments),
        "hazard_ramp": hazard_verdict(hazard),
    }


def cautions(*, counts: Counts, headline: VariantBound, tail_check: TailCheck) -> list[str]:
    """Conditions under which the figures should be read with care (printed with them)."""
    out = []
    c = counts
    if headline.n_prompts < 30:
        out.append(
            f"only {headline.n_prompts} prompts: bootstrap intervals over prompts are unreliable below ~30 "
            "and the across-prompt fits (affine law) are weak"
        )
    if c.samples_per_prompt.median < 8:
        out.append(f"median {c.samples_per_prompt.median:.0f} samples per prompt: 8 or more are recommended")
    if c.truncated_share > 0.10:
        out.append(
            f"{c.truncated_share:.0%} of samples were truncated: the censoring-aware figures rest on a normal "
            "tail beyond max_new_tokens; compare with the capped and EOS-only variants"
        )
    tc = tail_check
    if not tc.consistent:
        out.append(
            f"{tc.observed_truncated} truncations where a per-prompt normal tail predicts "
            f"{tc.expected_truncated:.1f}: most truncated samples are runaway generations that would not end "
            "(loops, rambling); their latent length is undefined, so the censoring-aware figures are a guess "
            "and the capped ones are the bound on what this card serves"
        )
    elif not tc.tested and c.truncated_samples:
        out.append(
            f"{c.truncated_samples} samples were truncated but no prompt has 3 or more varied EOS samples, so "
            "the tail check could not tell a normal tail from runaway generations"
        )
    with_samples = c.prompts + c.prompts_left_out_few_samples
    if c.prompts_listed and with_samples < c.prompts_listed:
        out.append(f"the run is incomplete: {with_samples} of {c.prompts_listed} listed prompts have samples")
    return out
