"""Typed results of the bound analysis: what every estimator of :mod:`lenpred.stats` returns.

Each figure of ``bound.json`` is a field of one of these models, so a reader (the console report,
``summary.md``, the plots, the demo, a user's notebook) gets attributes with types instead of
string keys, and a typo is an ``AttributeError`` instead of a silent ``KeyError`` three layers up.

* :class:`Result` is the base: frozen pydantic models that refuse unknown keys. ``to_json_dict()``
  gives plain JSON (a NaN or an infinity becomes ``null``, as in every bound.json so far) and
  ``from_json_dict()`` reads it back (``null`` becomes NaN).
* A part that could not be computed is a small ``...Unavailable`` model with ``available=False``
  and the reason; ``available`` is the tag that tells the two apart when JSON is read back.
* :class:`BoundSummary` is bound.json.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal, Self

import pandas as pd
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from lenpred.stats.config import BoundConfig

SCHEMA = "lenpred.bound/1"
VariantName = Literal["censored", "eos", "capped"]


def _none_to_nan(v: Any) -> Any:
    return float("nan") if v is None else v


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


# A float that is NaN (or infinite) where the figure is undefined; JSON has no NaN, so it is null there.
Num = Annotated[float, BeforeValidator(_none_to_nan), PlainSerializer(_finite_or_none, when_used="json")]
Interval = tuple[Num, Num]


class Result(BaseModel):
    """Base of every result model: frozen, unknown keys refused, JSON without NaN."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True)
    # fields left out of the JSON when they are None (optional parts that bound.json never had as null)
    _omit_if_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: SerializerFunctionWrapHandler) -> Any:
        out = handler(self)
        if self._omit_if_none and isinstance(out, dict):
            for name in self._omit_if_none:
                if out.get(name, 0) is None:
                    del out[name]
        return out

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_json_dict(cls, data: Any) -> Self:
        return cls.model_validate(data)

    def __getitem__(self, key: str) -> Any:
        """Read a field by its bound.json key (``summary["variants"]``): kept for code written against
        the bound.json dict; new code reads attributes."""
        name = {f.alias: n for n, f in type(self).model_fields.items() if f.alias}.get(key, key)
        if name not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, name)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


# --------------------------------------------------------------------------------------------- counts
class KRange(Result):
    """Samples per prompt: min, median, max."""

    min: int
    median: float
    max: int


class Counts(Result):
    prompts: int
    prompts_listed: int | None  # prompts the run lists (None for a plain length table)
    min_samples: int
    prompts_left_out_few_samples: int
    samples: int
    samples_per_prompt: KRange
    truncated_samples: int
    truncated_share: Num
    prompts_all_truncated: int
    max_new_tokens: int


class TailCheck(Result):
    """Are the truncations the upper tail of each prompt's normal length law? (see censoring.tail_check)"""

    n_prompts: int  # prompts with enough EOS samples to fit a tail; 0 = the check could not run
    observed_truncated: int  # truncated samples *of those prompts*
    expected_truncated: Num
    ratio: Num
    p_value: Num
    consistent: bool

    @property
    def tested(self) -> bool:
        return self.n_prompts > 0


# --------------------------------------------------------------------------------------------- the bound
class ByK(Result):
    n_prompts: int
    oracle_mae: Num
    mean_length: Num


class VariantBound(Result):
    """The oracle bound under one treatment of truncated samples (lenpred.stats.oracle.summarize_bound)."""

    _omit_if_none = frozenset({"by_k"})

    label: str
    available: Literal[True] = True
    dropped_prompts: dict[str, int]
    imputed_samples: int
    n_prompts: int
    n_samples: int
    samples_per_prompt: KRange
    mean_length: Num
    median_length: Num
    oracle_mae: Num
    oracle_mae_ci: Interval
    # the bracket in expectation: in-sample <= oracle <= leave-one-out
    oracle_mae_insample: Num
    oracle_mae_loo: Num
    oracle_mae_loo_ci: Interval
    relative_mae: Num  # oracle MAE / mean length, as a ratio of prompt averages
    relative_mae_ci: Interval
    mean_relative_error: Num  # mean over prompts and samples of |L - median| / L
    mean_relative_error_ci: Interval
    mean_relative_error_loo: Num
    oracle_mse: Num
    oracle_mse_ci: Interval
    oracle_rmse: Num
    oracle_rmse_ci: Interval
    ci_level: float
    by_k: dict[str, ByK] | None = None  # only when prompts differ in K


class VariantUnavailable(Result):
    label: str
    available: Literal[False] = False
    reason: str


Variant = Annotated[VariantBound | VariantUnavailable, Field(discriminator="available")]


# --------------------------------------------------------------------------------------------- normal law
class NormalMetrics(Result):
    _omit_if_none = frozenset({"mae_ratio_aggregate_ci"})

    n_prompts: int
    mae_ratio_aggregate: Num  # sum MAE_i / sum sqrt(2/pi) sd_i
    mae_ratio_median: Num
    share_within_5pct: Num
    share_within_10pct: Num
    skew_mean: Num
    skew_median: Num
    excess_kurtosis_mean: Num
    excess_kurtosis_median: Num
    central_mass: Num
    shapiro_reject_share: Num
    n_prompts_shape: int
    mae_ratio_aggregate_ci: Interval | None = None  # on the observed prompts only

    def with_ci(self, ci: tuple[float, float]) -> NormalMetrics:
        return self.model_copy(update={"mae_ratio_aggregate_ci": ci})


class NormalLaw(Result):
    available: Literal[True] = True
    prompts_left_out: int
    observed: NormalMetrics
    observed_uncensored_prompts: NormalMetrics | None
    if_normal: NormalMetrics
    central_mass_limit: float
    note: str


class NormalLawUnavailable(Result):
    available: Literal[False] = False
    reason: str
    prompts_left_out: int


NormalLawResult = Annotated[NormalLaw | NormalLawUnavailable, Field(discriminator="available")]


# --------------------------------------------------------------------------------------------- affine law
class RobustFit(Result):
    method: str
    alpha: Num
    alpha_ci: Interval
    b: Num
    b_ci: Interval


class Line(Result):
    alpha: Num
    b: Num


class AffineFit(Result):
    """sd = alpha * mu + b over prompts (lenpred.stats.affine.fit_affine)."""

    available: Literal[True] = True
    n_prompts: int
    alpha: Num
    alpha_ci: Interval
    b: Num
    b_ci: Interval
    r2: Num
    r2_denoised: Num
    robust: RobustFit
    uncorrected_ols: Line  # the naive fit of s on the sample means, for comparison
    reliability: Num
    reliability_floored: bool
    sd_estimator: str


class AffineUnavailable(Result):
    n_prompts: int
    available: Literal[False] = False
    reason: str


AffineResult = Annotated[AffineFit | AffineUnavailable, Field(discriminator="available")]


# --------------------------------------------------------------------------------------------- segments
class SegmentCV(Result):
    unit: str
    available: Literal[True] = True
    n_prompts: int
    mean_segments: Num
    cv_mean: Num
    cv_mean_ci: Interval
    cv_median: Num
    length_cv_mean: Num
    count_length_corr_mean: Num
    all_units_cv_mean: dict[str, Num] = Field(default_factory=dict)


class SegmentsUnavailable(Result):
    unit: str
    available: Literal[False] = False
    reason: str
    all_units_cv_mean: dict[str, Num] = Field(default_factory=dict)


SegmentsResult = Annotated[SegmentCV | SegmentsUnavailable, Field(discriminator="available")]


class AlphaVsSegmentCV(Result):
    available: Literal[True] = True
    alpha: Num
    segment_cv: Num
    ratio: Num
    determined: bool  # both intervals narrower than their values
    agree: bool  # determined and within 20%
    intervals_overlap: bool


class AlphaVsSegmentCVUnavailable(Result):
    available: Literal[False] = False


AlphaVsCVResult = Annotated[AlphaVsSegmentCV | AlphaVsSegmentCVUnavailable, Field(discriminator="available")]


# --------------------------------------------------------------------------------------------- hazard
class _Columns(Result):
    """A small column table (one list per column), as bound.json stores it."""

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({name: getattr(self, name) for name in type(self).model_fields})

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> Self:
        return cls.model_validate(df.to_dict(orient="list"))


class HazardTable(_Columns):
    start: list[int]
    end: list[int]
    stops: list[Num]
    exposure: list[Num]
    at_risk: list[int]
    hazard: list[Num]
    lo: list[Num]
    hi: list[Num]


class NormalizedHazardTable(_Columns):
    u_start: list[Num]
    u_end: list[Num]
    stops: list[Num]
    exposure: list[Num]
    at_risk: list[int]
    hazard: list[Num]


class LikelihoodRatio(Result):
    g2: Num
    dof: int
    p_value: Num


class HazardCurve(Result):
    """Binned per-step hazard over decode steps (lenpred.stats.hazard.hazard_curve)."""

    _omit_if_none = frozenset({"median_range", "n_samples"})

    bin_width: int
    table: HazardTable
    constant_hazard: Num
    early_window: Interval
    late_window: Interval
    hazard_early: Num
    hazard_late: Num
    late_early_ratio: Num
    spearman_rho: Num
    lr_vs_constant: LikelihoodRatio
    median_range: Interval | None = None  # for a bucket of prompts by median length
    n_samples: int | None = None


class NormalizedHazard(Result):
    """Hazard per median length in normalised time u = t / median_i."""

    bin_width_u: float
    table: NormalizedHazardTable
    constant_hazard: Num
    memoryless_value: float
    early_window_u: Interval
    late_window_u: Interval
    hazard_early: Num
    hazard_late: Num
    late_early_ratio: Num
    mid_window_u: Interval
    tail_window_u: Interval
    hazard_mid: Num
    hazard_tail: Num
    tail_mid_ratio: Num


class Hazard(Result):
    pooled: HazardCurve
    buckets: list[HazardCurve]
    normalized: NormalizedHazard | None


# --------------------------------------------------------------------------------------------- verdicts
Status = Literal[
    "HOLDS",
    "HOLDS ON AGGREGATE ONLY",
    "DOES NOT HOLD",
    "WEAK",
    "NOT REJECTED",
    "UNRELIABLE",
    "UNDETERMINED",
    "NOT TESTED",
]
# longest first, so that "HOLDS ON AGGREGATE ONLY: ..." is not read as "HOLDS"
_STATUSES: tuple[str, ...] = tuple(sorted(Status.__args__, key=len, reverse=True))  # type: ignore[attr-defined]


class Verdict(Result):
    """One claim of the theory: its status and the sentence with the figures that decide it.

    In JSON it is the one string ``"STATUS: sentence"`` (as bound.json always had it).
    """

    status: Status
    detail: str

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, data: Any) -> Any:
        if isinstance(data, str):
            for s in _STATUSES:
                if data.startswith(s + ": "):
                    return {"status": s, "detail": data[len(s) + 2 :]}
            raise ValueError(f"a verdict starts with one of {', '.join(_STATUSES)}, got {data[:40]!r}")
        return data

    @model_serializer(mode="plain")
    def _as_text(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return f"{self.status}: {self.detail}"


# --------------------------------------------------------------------------------------------- bound.json
class BoundSummary(Result):
    """Everything ``bound.json`` holds."""

    schema_: str = Field(SCHEMA, alias="schema")
    lenpred_version: str
    run: str  # the run directory, or the length table it was computed from
    card_hash: str
    model: str | None
    sampling: dict[str, Any]
    config: BoundConfig
    counts: Counts
    headline: VariantName
    theory_variant: VariantName
    variant_choice: str
    tail_check: TailCheck
    variants: dict[str, Variant]
    normal_law: NormalLawResult
    affine: AffineResult
    segments: SegmentsResult
    hazard: Hazard
    alpha_vs_segment_cv: AlphaVsCVResult
    verdicts: dict[str, Verdict]
    cautions: list[str]

    @property
    def headline_bound(self) -> VariantBound:
        """The variant that carries the headline bound (always available)."""
        v = self.variants[self.headline]
        assert isinstance(v, VariantBound)
        return v
