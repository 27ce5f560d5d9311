"""Helpers shared by the stats tests (imported as ``from stats_helpers import covers``)."""

from __future__ import annotations


def covers(ci: tuple[float, float], value: float, slack: float = 0.25) -> bool:
    """``value`` inside the 95% interval widened by ``slack`` of its width on each side (~99% coverage):
    one synthetic run is one draw, and a test must not fail on the 5% of draws a 95% interval misses."""
    lo, hi = ci
    return lo - slack * (hi - lo) < value < hi + slack * (hi - lo)
