"""Arrival processes: when requests reach the cluster.

Synthetic processes are generated at a mean rate of 1 request/s and compressed to the load a run
asks for (:meth:`lenpred.sim.workload.Workload.arrival_times`), so every load of a sweep sees the
same arrival pattern (common random numbers). Poisson, gamma (bursty: coefficient of variation
``cv`` of the gaps) and "burst" (everything at t = 0) are generated here; a trace's own timestamps
are normalised by :func:`trace_arrivals`.

An overload episode (:class:`Episode`) is a stationary process (Poisson or gamma) run in the time of
its cumulative rate: arrivals are generated at 1 request/s in "operational time" u and placed at
the real time t with Lambda(t) = u, where Lambda(t) = base * (t + (factor - 1) * |[start, start + burst]
cut at t|) counts the requests expected by t. Inside the burst the process is the same one, only
``factor`` times faster; every load of a sweep still sees the same pattern.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lenpred.errors import ConfigError, DataError
from lenpred.sim.config import ArrivalConfig


def unit_arrivals(n: int, arrival: ArrivalConfig, rng: np.random.Generator) -> np.ndarray:
    """(n,) arrival times in seconds at a mean rate of 1 request/s, starting at 0."""
    if arrival.process == "burst":
        return np.zeros(n)
    process = arrival.episode[0] if arrival.episode is not None else arrival.process
    if process == "poisson":
        gaps = rng.exponential(1.0, n)
    elif process == "gamma":
        shape = 1.0 / arrival.cv**2  # gamma gaps with mean 1 and coefficient of variation cv
        gaps = rng.gamma(shape, 1.0 / shape, n)
    else:
        raise ConfigError(f"arrival process {arrival.process!r} needs a trace's arrival times")
    out = np.empty(n)
    out[0] = 0.0
    np.cumsum(gaps[:-1], out=out[1:])
    return out


def trace_arrivals(times: np.ndarray) -> tuple[np.ndarray, np.ndarray, float | None]:
    """A trace's timestamps (n,) -> (order that sorts them, times from the first arrival in that
    order, the trace's mean rate in requests/s or None when every request arrives at once)."""
    order = np.argsort(times, kind="stable")
    t = times[order]
    arrivals = t - t[0]
    span = float(arrivals[-1])
    rate = (len(t) - 1) / span if span > 0 else None
    return order, arrivals, rate


def require_rate(rate: float | None) -> None:
    """A trace whose requests all arrive at once cannot be rescaled to a load."""
    if rate is None:
        raise DataError("a trace whose requests all arrive at once has no rate to rescale",
                        "use arrival process 'burst', or keep the trace's own times (no load)")


@dataclass(frozen=True)
class Episode:
    """An overload episode in seconds: the base rate until ``start``, ``factor`` x it for ``burst``
    seconds, the base rate for ``tail`` seconds, then no more arrivals."""

    factor: float
    start: float
    burst: float
    tail: float

    @classmethod
    def of(cls, arrival: ArrivalConfig) -> Episode | None:
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


def check_episode_length(arrival: ArrivalConfig, n: int, rate: float) -> None:
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
