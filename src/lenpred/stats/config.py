"""Configuration of the bound analysis (``lenpred bound``): one frozen dataclass, validated on creation.

Every field is written into ``bound.json`` so that a figure can always be traced back to the settings
that produced it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lenpred.errors import ConfigError

SEGMENT_UNITS = ("paragraph", "sentence", "line")
VARIANTS = ("censored", "eos", "capped")
CHOICES = ("auto", *VARIANTS)

# The bound needs a held-out sample per prompt: with K samples the leave-one-out median uses K-1 of
# them, so K >= 2 is the hard floor. Below ~8 the per-prompt spread is a very noisy estimate.
MIN_SAMPLES_FLOOR = 2
RECOMMENDED_SAMPLES = 8


@dataclass(frozen=True)
class BoundConfig:
    """Settings of one bound analysis. Constructing it only validates; it has no side effects."""

    # which of the three treatments of truncated samples carries the headline bound, and which one the
    # normal / affine checks use (see lenpred.stats.lengths and report.choose_variants); "auto" decides
    # from the tail check
    headline: str = "auto"
    theory: str = "auto"
    # prompts with fewer usable samples than this are left out of a variant (>= 2, see above)
    min_samples: int = MIN_SAMPLES_FLOOR
    # segments for the alpha-vs-segment-CV comparison; a regex, when given, overrides the unit
    segment_unit: str = "paragraph"
    segment_regex: str | None = None
    # bootstrap over prompts for every confidence interval
    n_boot: int = 2000
    # Theil-Sen is O(n^2) per refit, so its intercept CI uses fewer bootstrap replicates
    n_boot_robust: int = 200
    ci: float = 0.95
    # multiple imputations of the tail beyond max_new_tokens (censoring-aware variant)
    n_imputations: int = 20
    # simulated exactly-normal prompts that calibrate the normal-law checks at the run's K
    n_normal_reference: int = 4000
    # hazard: tokens per bin (0 = automatic), prompt-length buckets, minimum samples at risk per bin
    hazard_bin: int = 0
    n_buckets: int = 4
    min_at_risk: int = 20
    seed: int = 0

    def __post_init__(self) -> None:
        for role in ("headline", "theory"):
            if getattr(self, role) not in CHOICES:
                raise ConfigError(
                    f"{role} variant {getattr(self, role)!r} is unknown", f"use one of {', '.join(CHOICES)}"
                )
        if self.min_samples < MIN_SAMPLES_FLOOR:
            raise ConfigError(
                f"min_samples={self.min_samples} is too small: the bound needs a held-out sample per prompt",
                f"use --min-samples {MIN_SAMPLES_FLOOR} or more",
            )
        if self.segment_unit not in SEGMENT_UNITS:
            raise ConfigError(
                f"segment unit {self.segment_unit!r} is unknown", f"use one of {', '.join(SEGMENT_UNITS)}"
            )
        if self.segment_regex is not None:
            import re

            try:
                re.compile(self.segment_regex)
            except re.error as e:
                raise ConfigError(f"segment regex {self.segment_regex!r} does not compile ({e})") from e
        if not 0.5 <= self.ci < 1.0:
            raise ConfigError(f"ci={self.ci} must be in [0.5, 1)", "use e.g. --ci 0.95")
        for name in (
            "n_boot",
            "n_boot_robust",
            "n_imputations",
            "n_normal_reference",
            "n_buckets",
            "min_at_risk",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be at least 1")
        if self.hazard_bin < 0:
            raise ConfigError(f"hazard_bin={self.hazard_bin} must be >= 0 (0 chooses it automatically)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
