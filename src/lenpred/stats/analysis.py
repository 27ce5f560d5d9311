"""The whole bound analysis of one run (or one table of lengths): every estimator, one typed result.

:func:`analyse_run` reads a run directory, :func:`analyse_lengths` a plain table of lengths (CSV,
Parquet or a DataFrame); both run :func:`analyse` and return a :class:`BoundAnalysis`, whose
``summary`` (a :class:`~lenpred.stats.results.BoundSummary`) is what ``bound.json`` holds.
Presentation (console tables, ``summary.md``, plots) and writing the artifact live in
:mod:`lenpred.report.bound`; this module computes and never prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd

from lenpred import __version__
from lenpred.data.rundir import RunDir
from lenpred.errors import ConfigError, DataError
from lenpred.stats.affine import fit_affine
from lenpred.stats.censoring import MIN_EOS_TAIL, tail_check
from lenpred.stats.config import MIN_SAMPLES_FLOOR, VARIANTS, BoundConfig
from lenpred.stats.hazard import hazard_analysis
from lenpred.stats.lengths import VARIANT_LABELS, RunLengths, build_variant, load_run_lengths
from lenpred.stats.normal import add_normal_columns, normal_law
from lenpred.stats.oracle import summarize_bound
from lenpred.stats.perprompt import describe_variant
from lenpred.stats.results import (
    AffineFit,
    AffineUnavailable,
    AlphaVsSegmentCV,
    AlphaVsSegmentCVUnavailable,
    BoundSummary,
    Counts,
    KRange,
    SegmentCV,
    SegmentsUnavailable,
    TailCheck,
    VariantBound,
    VariantUnavailable,
)
from lenpred.stats.segments import segment_cv
from lenpred.stats.table import is_length_table, read_length_table
from lenpred.stats.verdicts import cautions, verdicts

__all__ = ["BoundAnalysis", "analyse", "analyse_lengths", "analyse_path", "analyse_run", "choose_variants", "open_lengths"]


@dataclass(frozen=True)
class BoundAnalysis:
    """Everything ``lenpred bound`` reports: the figures (``summary``) and the per-prompt tables."""

    summary: BoundSummary
    per_prompt: pd.DataFrame  # the theory variant, one row per prompt (with segment columns)
    lengths: RunLengths
    variants_per_prompt: dict[str, pd.DataFrame] = field(default_factory=dict)

    def per_prompt_table(self) -> pd.DataFrame:
        """One row per prompt and variant (column ``variant``), segment columns included: per_prompt.csv."""
        seg_cols = [c for c in self.per_prompt.columns if c.startswith("seg_")]
        seg = self.per_prompt[["prompt_id", *seg_cols]] if seg_cols else None
        frames = []
        for name, pp in self.variants_per_prompt.items():
            frame = pp.merge(seg, on="prompt_id", how="left") if seg is not None else pp
            frames.append(frame.assign(variant=name))
        table = pd.concat(frames, ignore_index=True)
        return table[["variant", *[c for c in table.columns if c != "variant"]]]


def choose_variants(
    config: BoundConfig,
    tail: TailCheck,
    available: dict[str, pd.DataFrame],
    errors: dict[str, DataError],
    lengths: RunLengths,
) -> tuple[str, str, str]:
    """Which variant carries the headline bound, which one the theory checks, and why.

    ``auto`` keeps truncated samples censored (the design's rule) as long as they look like the upper
    tail of each prompt's length law, which is what the imputation assumes. When they do not (many
    more truncations than any per-prompt tail explains: a separate mode such as repetition loops,
    whose latent length is not defined), the headline bound is the capped one (exact for the lengths
    the engine serves, and a lower bound on any latent-length bound) and the theory, which is about
    responses that end, is checked on the EOS samples.

    Under ``auto`` the theory checks never fall back to the capped lengths while samples were
    truncated (their shape would be the cap's, not the law's): when neither the censoring-aware nor
    the EOS-only variant keeps a prompt, that is an error that says so.
    """
    if not tail.tested:
        auto = (
            "censored",
            "censored",
            f"no prompt has {MIN_EOS_TAIL} or more varied EOS samples to test the tail on, so truncated "
            "samples are treated as censored",
        )
    elif tail.consistent:
        auto = ("censored", "censored", "truncations are consistent with a per-prompt normal tail")
    else:
        auto = (
            "capped",
            "eos",
            f"{tail.observed_truncated} truncations where a per-prompt normal tail predicts "
            f"{tail.expected_truncated:.1f}: they are a separate mode (runaway generations: loops, rambling), so the "
            "headline bound is the capped one and the theory is checked on EOS samples",
        )
    truncated = bool(lengths.samples["censored"].any())
    # under auto, a variant that keeps no prompt gives way to the next one that does
    fallbacks = {"headline": ("capped", "eos"), "theory": ("eos",) if truncated else ("eos", "capped")}
    chosen = []
    for want, auto_pick, role in ((config.headline, auto[0], "headline"), (config.theory, auto[1], "theory")):
        if want != "auto":
            if want not in available:
                raise errors[want]
            chosen.append(want)
            continue
        picks = [p for p in (auto_pick, *fallbacks[role]) if p in available]
        if not picks:
            if role == "theory" and "capped" in available:
                raise _nothing_ends(lengths)
            raise errors[auto_pick]
        chosen.append(picks[0])
    reason = auto[2] if "auto" in (config.headline, config.theory) else "chosen by the configuration"
    return chosen[0], chosen[1], reason


def _nothing_ends(lengths: RunLengths) -> DataError:
    s = lengths.samples
    n, t = len(s), int(s["censored"].sum())
    return DataError(
        f"{lengths.path}: {t} of {n} samples ({t / n:.0%}) stopped at max_new_tokens={lengths.cap} and no prompt "
        f"keeps {MIN_SAMPLES_FLOOR} samples that ended with EOS, so the normal-law, affine and hazard checks "
        "have no lengths to work on",
        "collect more samples per prompt or raise max_new_tokens; or pass --headline capped --theory capped "
        "for the bound on the served (capped) lengths alone",
    )


def _variant_bounds(
    lengths: RunLengths, config: BoundConfig, rng: np.random.Generator
) -> tuple[dict[str, VariantBound | VariantUnavailable], dict[str, pd.DataFrame], dict[str, DataError]]:
    """Every variant's bound (or why it is unavailable), its per-prompt table, and its error."""
    variants: dict[str, VariantBound | VariantUnavailable] = {}
    per_variant: dict[str, pd.DataFrame] = {}
    errors: dict[str, DataError] = {}
    for name in VARIANTS:
        try:
            v = build_variant(lengths, name, config, rng)
        except DataError as err:
            errors[name] = err
            variants[name] = VariantUnavailable(label=VARIANT_LABELS[name], reason=err.problem)
            continue
        pp = add_normal_columns(describe_variant(v))
        per_variant[name] = pp
        variants[name] = summarize_bound(
            pp,
            config.n_boot,
            config.ci,
            rng,
            label=v.label,
            dropped=v.dropped,
            imputed=int(pp["n_truncated"].sum()) if name == "censored" else 0,
        )
    return variants, per_variant, errors


def analyse(lengths: RunLengths, config: BoundConfig | None = None) -> BoundAnalysis:
    """Compute every figure of the bound analysis from the lengths of one run."""
    config = config or BoundConfig()
    # one generator for the whole analysis: the order of the draws below is part of the figures
    rng = np.random.default_rng(config.seed)

    tail = tail_check(
        [
            (g["length"].to_numpy(float), g["censored"].to_numpy(bool))
            for _, g in lengths.samples.groupby("prompt_id")
        ],
        lengths.cap,
    )
    variants, per_variant, errors = _variant_bounds(lengths, config, rng)
    headline, theory, reason = choose_variants(config, tail, per_variant, errors, lengths)

    pp = per_variant[theory]
    affine = fit_affine(
        pp["mean"].to_numpy(),
        pp["sd"].to_numpy(),
        pp["k"].to_numpy(),
        pp["skew"].to_numpy(),
        config,
        rng,
    )
    normal = normal_law(pp, config.n_normal_reference, config.n_boot, config.ci, rng)
    seg, seg_table = segment_cv(
        lengths, config.segment_unit, config.segment_regex, MIN_SAMPLES_FLOOR, config.n_boot, config.ci, rng
    )
    if len(seg_table):
        pp = pp.merge(seg_table, on="prompt_id", how="left")
    hazard = hazard_analysis(
        lengths,
        pd.Series(pp["median"].to_numpy(), index=pp["prompt_id"]),
        config.hazard_bin,
        config.n_buckets,
        config.min_at_risk,
        drop_truncated=theory == "eos",  # the theory is about responses that end: see choose_variants
    )
    counts = _counts(lengths)
    avc = alpha_vs_segment_cv(affine, seg)
    head = variants[headline]
    assert isinstance(head, VariantBound)  # choose_variants picks available variants only
    summary = BoundSummary(
        lenpred_version=__version__,
        run=lengths.path,
        card_hash=lengths.card_hash,
        model=lengths.card.get("model", {}).get("id"),
        sampling=lengths.card.get("sampling", {}),
        config=config,
        counts=counts,
        headline=headline,
        theory_variant=theory,
        variant_choice=reason,
        tail_check=tail,
        variants=variants,
        normal_law=normal,
        affine=affine,
        segments=seg,
        hazard=hazard,
        alpha_vs_segment_cv=avc,
        verdicts=verdicts(
            normal_law=normal, affine=affine, alpha_vs_segment_cv=avc, segments=seg, hazard=hazard
        ),
        cautions=cautions(counts=counts, headline=head, tail_check=tail),
    )
    return BoundAnalysis(summary=summary, per_prompt=pp, lengths=lengths, variants_per_prompt=per_variant)


def analyse_run(run: RunDir | str | PathLike[str], config: BoundConfig | None = None) -> BoundAnalysis:
    """The bound analysis of a run directory (made by ``lenpred collect``)."""
    config = config or BoundConfig()
    return analyse(load_run_lengths(run, config.min_samples), config)


def analyse_lengths(
    table: pd.DataFrame | str | os.PathLike[str],
    config: BoundConfig | None = None,
    *,
    max_new_tokens: int | None = None,
) -> BoundAnalysis:
    """The bound analysis of a plain table of lengths (a CSV or Parquet file, or a DataFrame).

    Columns: ``prompt_id``, ``n_tokens``, optional ``stop_reason`` (``eos``/``stop`` or ``length``),
    ``max_new_tokens`` and ``text``; see :func:`lenpred.stats.table.read_length_table`.
    """
    config = config or BoundConfig()
    return analyse(read_length_table(table, config.min_samples, max_new_tokens=max_new_tokens), config)


def open_lengths(
    source: str | PathLike[str], min_samples: int = MIN_SAMPLES_FLOOR, *, max_new_tokens: int | None = None
) -> RunLengths:
    """The lengths behind a path: a run directory, or a ``.csv`` / ``.parquet`` length table."""
    src = Path(source)
    if not src.exists():
        raise DataError(f"{src} does not exist", "pass a run directory or a .csv / .parquet table of lengths")
    if is_length_table(src):
        return read_length_table(src, min_samples, max_new_tokens=max_new_tokens)
    if src.is_file():
        raise DataError(f"{src} is a file but not a .csv or .parquet table of lengths",
                        "pass a run directory, or a table named *.csv or *.parquet")
    if max_new_tokens is not None:
        raise ConfigError("--max-new-tokens is for a length table", "leave it out: the run's card gives the cap")
    return load_run_lengths(src, min_samples)


def analyse_path(
    source: str | PathLike[str], config: BoundConfig | None = None, *, max_new_tokens: int | None = None
) -> BoundAnalysis:
    """The bound analysis of a run directory or a length table, whichever ``source`` is."""
    config = config or BoundConfig()
    return analyse(open_lengths(source, config.min_samples, max_new_tokens=max_new_tokens), config)


def _counts(lengths: RunLengths) -> Counts:
    s = lengths.samples
    k = s.groupby("prompt_id").size()
    return Counts(
        prompts=lengths.n_prompts,
        prompts_listed=lengths.prompts_listed,
        min_samples=lengths.min_samples,
        prompts_left_out_few_samples=lengths.prompts_left_out,
        samples=len(s),
        samples_per_prompt=KRange(min=int(k.min()), median=float(k.median()), max=int(k.max())),
        truncated_samples=int(s["censored"].sum()),
        truncated_share=float(s["censored"].mean()),
        prompts_all_truncated=int(s.groupby("prompt_id")["censored"].all().sum()),
        max_new_tokens=lengths.cap,
    )


def alpha_vs_segment_cv(
    affine: AffineFit | AffineUnavailable, seg: SegmentCV | SegmentsUnavailable
) -> AlphaVsSegmentCV | AlphaVsSegmentCVUnavailable:
    """Does the affine slope equal the segment-count CV, as the theory says?"""
    if not (isinstance(affine, AffineFit) and isinstance(seg, SegmentCV)):
        return AlphaVsSegmentCVUnavailable()
    a, cv = affine.alpha, seg.cv_mean
    lo, hi = affine.alpha_ci
    clo, chi = seg.cv_mean_ci
    # an interval wider than the value itself cannot confirm or refute anything
    determined = bool(a > 0 and cv > 0 and (hi - lo) <= a and (chi - clo) <= cv and not affine.reliability_floored)
    return AlphaVsSegmentCV(
        alpha=a,
        segment_cv=cv,
        ratio=a / cv if cv > 0 else float("nan"),
        determined=determined,
        # the claim holds when the two agree within 20%; intervals that overlap only fail to refute it
        agree=bool(determined and 0.8 <= a / cv <= 1.25),
        intervals_overlap=bool(lo <= chi and clo <= hi),
    )
