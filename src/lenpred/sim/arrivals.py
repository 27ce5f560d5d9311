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
        raise ConfigError(f"arrival process {arrival.process!r} needs a trace's arrival times",
                          "use a trace workload (its arrival times), or process poisson, gamma or burst")
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
