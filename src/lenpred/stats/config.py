"""Configuration of the bound analysis (``lenpred bound``): one frozen pydantic model, validated on creation.

Every field is written into ``bound.json`` (and the artifact's ``meta.json``) so that a figure can
always be traced back to the settings that produced it; the ``lenpred bound`` flags are derived from
these fields (``--n-boot``, ``--min-samples``, ...), their help from the descriptions.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from lenpred.config import Config
from lenpred.errors import FieldError

SEGMENT_UNITS = ("paragraph", "sentence", "line")
VARIANTS = ("censored", "eos", "capped")
CHOICES = ("auto", *VARIANTS)

# The bound needs a held-out sample per prompt: with K samples the leave-one-out median uses K-1 of
# them, so K >= 2 is the hard floor. Below ~8 the per-prompt spread is a very noisy estimate.
MIN_SAMPLES_FLOOR = 2
RECOMMENDED_SAMPLES = 8




Choice = Literal["auto", "censored", "eos", "capped"]


class BoundConfig(Config):
    """Settings of one bound analysis. Constructing it only validates; it has no side effects."""

    headline: Choice = Field(
        "auto",
        description="treatment of truncated samples for the headline bound: censored (normal tail imputed "
        "beyond the cap), eos (EOS samples only), capped (at max_new_tokens), or auto: censored unless the "
        "truncations are not a normal tail (runaway generations), then capped",
    )
    theory: Choice = Field(
        "auto",
        description="variant for the normal-law, affine and hazard checks; auto: censored, or eos when the "
        "truncations are a separate mode",
    )
    min_samples: int = Field(
        MIN_SAMPLES_FLOOR, description="prompts with fewer samples in the run are left out (>= 2)"
    )
    segment_unit: Literal["paragraph", "sentence", "line"] = Field(
        "paragraph", description="response segments for the alpha-vs-segment-CV check"
    )
    segment_regex: str | None = Field(None, description="separator regex for segments (overrides --segment-unit)")
    n_boot: int = Field(2000, description="bootstrap replicates over prompts for every interval")
    # Theil-Sen is O(n^2) per refit, so its intervals use fewer bootstrap replicates
    n_boot_robust: int = Field(200, description="bootstrap replicates of the Theil-Sen fit")
    ci: float = Field(0.95, description="interval level, in [0.5, 1)")
    n_imputations: int = Field(20, description="imputations of the tail beyond max_new_tokens (censored variant)")
    n_normal_reference: int = Field(
        4000, description="simulated exactly-normal prompts that calibrate the normal-law checks at the run's K"
    )
    hazard_bin: int = Field(0, description="tokens per hazard bin (0 = automatic)")
    n_buckets: int = Field(4, description="buckets of prompts by median length for the hazard")
    min_at_risk: int = Field(20, description="samples at risk a hazard bin needs")
    seed: int = Field(0, description="seed of the bootstrap, the imputation and the normal reference")

    @field_validator("min_samples")
    @classmethod
    def _min_samples(cls, v: int) -> int:
        if v < MIN_SAMPLES_FLOOR:
            raise FieldError(
                f"{v} is too small: the bound compares each sample with the median of the prompt's other "
                f"samples, so a prompt needs {MIN_SAMPLES_FLOOR} or more",
                f"use --min-samples {MIN_SAMPLES_FLOOR} or more",
            )
        return v

    @field_validator("segment_regex")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise FieldError(f"{v!r} does not compile ({e})", "pass a Python regular expression") from None
        return v

    @field_validator("ci")
    @classmethod
    def _ci(cls, v: float) -> float:
        if not 0.5 <= v < 1.0:
            raise FieldError(f"{v} must be in [0.5, 1)", "use e.g. --ci 0.95")
        return v

    @field_validator("n_boot", "n_boot_robust", "n_imputations", "n_normal_reference", "n_buckets", "min_at_risk")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise FieldError(f"must be at least 1, got {v}", "pass 1 or more")
        return v

    @field_validator("hazard_bin")
    @classmethod
    def _hazard_bin(cls, v: int) -> int:
        if v < 0:
            raise FieldError(f"{v} must be >= 0", "use 0 to choose the bin width automatically")
        return v
