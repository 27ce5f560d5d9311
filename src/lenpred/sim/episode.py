"""An overload episode in seconds (:class:`Episode`) and the check that a run's requests cover it.

Kept apart from :mod:`lenpred.sim.arrivals` so that the config (:mod:`lenpred.sim.config`) can check an
episode's length without importing the module that imports it: an episode is read from any object
with the config's ``episode`` and ``cv`` (:class:`EpisodeFields`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from lenpred.errors import ConfigError

__all__ = ["Episode", "EpisodeFields", "check_episode_length"]


class EpisodeFields(Protocol):
    """What an episode is read from (:class:`lenpred.sim.config.ArrivalConfig`)."""

    @property
    def episode(self) -> tuple[str, float, float, float, float] | None: ...

    @property
    def cv(self) -> float: ...


@dataclass(frozen=True)
class Episode:
    """An overload episode in seconds: the base rate until ``start``, ``factor`` x it for ``burst``
    seconds, the base rate for ``tail`` seconds, then no more arrivals."""

    factor: float
    start: float
    burst: float
    tail: float

    @classmethod
    def of(cls, arrival: EpisodeFields) -> Episode | None:
        if arrival.episode is None:
            return None
        _, factor, start, burst, tail = arrival.episode
        return cls(factor, start, burst, tail)

    @property
    def burst_end(self) -> float:
        return self.start + self.burst

    @property
    def end(self) -> float:
        """The last moment a request may arrive (s)."""
        return self.burst_end + self.tail

    def expected(self, t: float, rate: float) -> float:
        """Requests expected to arrive by time ``t`` at base rate ``rate`` (Lambda(t))."""
        in_burst = min(max(t - self.start, 0.0), self.burst)
        return rate * (t + (self.factor - 1.0) * in_burst)

    def times(self, unit: np.ndarray, rate: float) -> np.ndarray:
        """Unit-rate (operational-time) arrivals -> real times at base rate ``rate`` (Lambda^-1)."""
        s = np.asarray(unit, dtype=float) / rate  # seconds as if the base rate never changed
        burst_hi = self.start + self.factor * self.burst  # where the burst ends on that clock
        return np.where(s <= self.start, s,
                        np.where(s <= burst_hi, self.start + (s - self.start) / self.factor,
                                 s - (self.factor - 1.0) * self.burst))

    def requests_needed(self, rate: float, cv: float = 1.0) -> int:
        """Requests that cover the whole episode at base rate ``rate`` with a margin of about 5
        standard deviations of the count (a renewal process's count has variance ~ cv^2 x mean)."""
        mean = self.expected(self.end, rate)
        return int(math.ceil(mean + 5.0 * cv * math.sqrt(mean) + 10))


def check_episode_length(arrival: EpisodeFields, n: int, rate: float) -> None:
    """An episode the run's ``n`` requests cannot cover at base ``rate`` (the expected count up to
    its end exceeds n): one line naming both and the n that covers it."""
    ep = Episode.of(arrival)
    if ep is None:
        return
    mean = ep.expected(ep.end, rate)
    if mean > n:
        raise ConfigError(
            f"the episode ends at {ep.end:g} s (burst_start_s + burst_s + tail_s) but workload.n_requests {n} "
            f"at a base rate of {rate:.3g} req/s last only about {_last(ep, n, rate):.0f} s",
            f"raise workload.n_requests to >= {ep.requests_needed(rate, arrival.cv)} or shorten the episode")


def _last(ep: Episode, n: int, rate: float) -> float:
    return float(ep.times(np.array([float(n)]), rate)[0])
