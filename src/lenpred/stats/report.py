"""The whole bound analysis of one run, and its written forms: ``bound.json`` and ``summary.md``.

:func:`analyse_run` runs every estimator of this package on a run directory and returns a
:class:`BoundAnalysis`; :func:`write_json`, :func:`write_per_prompt` and
:func:`~lenpred.stats.summary_md.write_markdown` write it down; :mod:`~lenpred.stats.verdicts` says
plainly, with the figures, which of the theory's claims hold for this run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred import __version__
from lenpred.data.rundir import RunDir, atomic_write_bytes, atomic_write_json
from lenpred.errors import DataError
from lenpred.stats.affine import fit_affine
from lenpred.stats.bound import summarize_bound
from lenpred.stats.censoring import tail_check
from lenpred.stats.config import MIN_SAMPLES_FLOOR, VARIANTS, BoundConfig
from lenpred.stats.hazard import hazard_analysis
from lenpred.stats.lengths import VARIANT_LABELS, RunLengths, build_variant, load_run_lengths
from lenpred.stats.normal import add_normal_columns, normal_law
from lenpred.stats.perprompt import describe_variant
from lenpred.stats.segments import all_units_cv, segment_cv
from lenpred.stats.summary_md import fmt, write_markdown
from lenpred.stats.verdicts import cautions, verdicts

SCHEMA = "lenpred.bound/1"
__all__ = ["BoundAnalysis", "analyse_run", "fmt", "write_json", "write_markdown", "write_per_prompt"]


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
            f"{tail['expected_truncated']:.1f}: they are a separate mode (runaway generations: loops, rambling), so the "
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
        lengths, config.segment_unit, config.segment_regex, MIN_SAMPLES_FLOOR, config.n_boot, config.ci, rng
    )
    if len(seg_table):
        pp = pp.merge(seg_table, on="prompt_id", how="left")
    seg["all_units_cv_mean"] = all_units_cv(lengths, MIN_SAMPLES_FLOOR)
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
            "min_samples": lengths.min_samples,
            "prompts_left_out_few_samples": lengths.prompts_left_out,
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
        # the claim holds when the two agree within 20%; intervals that overlap only fail to refute it
        "agree": bool(determined and 0.8 <= a / cv <= 1.25),
        "intervals_overlap": bool(lo <= chi and clo <= hi),
    }


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
