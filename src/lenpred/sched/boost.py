"""Boost policies: serve by a *boosted arrival time* ``arrival - b`` (smaller first).

* ``gboost`` -- gamma-Boost with partial information (Yu & Scully, "Strongly Tail-Optimal Scheduling in
  the Light-Tailed M/G/1", SIGMETRICS 2024, arXiv 2404.08826). A job whose label is ``l`` gets the boost

      b(l) = (1 / gamma) * log( E[e^{gamma S} | l] / (E[e^{gamma S} | l] - 1) ),

  gamma the positive root of ``gamma = lambda * (E[e^{gamma S}] - 1)``: the decay rate of the FCFS
  waiting-time tail, P[W > t] ~ C e^{-gamma t}. (With full information, l = S and the boost is
  ``(1/gamma) log(1 / (1 - e^{-gamma S}))``: the same formula for a point mass.) Here the label is the
  request's predictive distribution of its *remaining* length, conditioned on the tokens it has
  generated (L > gen, as the Gittins rank conditions it: :meth:`LengthDist.remaining`), so a
  re-prediction (OUTLETS) that replaces ``req.dist`` refreshes the boost at the next key.
* ``uniboost`` -- the prediction-free boost (the UniBoost idea, Li et al., ICML 2026, "Beyond Prediction:
  Tail-Aware Scheduling for LLM Inference"; the paper's exact rule was not found, see
  docs/policies/README.md): the same boost computed from the *workload's* unconditional length
  distribution conditioned on the request's attained service, ``E[e^{gamma S} | L > gen]``. Every fresh
  request (gen = 0) gets the same boost, so a queue of fresh requests is served in FCFS order; requests
  that return to the queue after generating (preemption) are boosted by how much the workload's
  distribution says they still need.
* ``boost2`` -- a two-class boost (Nudge-like): ``arrival - boost_s`` for a request labelled short (its
  latest predicted total, ``gen + pred_remaining(gen)``, under ``short_threshold`` tokens), else
  ``arrival``; a re-prediction that drops the predicted remaining under the threshold relabels it.

Service time S is in **seconds** of the server: tokens x ``s_per_token``. In the M/G/1 the paper analyses,
a continuous-batching decode instance is one server whose throughput is a full batch per step, so one
token costs it step time / batch: llama8b-h100 (``lenpred.sim.profiles``) steps 256 sequences of mean
context 400 tokens in 16.9 ms, 66 us per token (:data:`S_PER_TOKEN`); then ``rate * E[S]`` is the
instance's load as a fraction of its capacity. The simulator passes its own profile's value and the
measured rate per decode instance through :meth:`BoostPolicy.calibrate`.

**gamma.** The ``gamma`` parameter (1/s) when given; otherwise :func:`solve_gamma` on the arrival rate per
server and the workload's service times (the simulator calls it before a run, from the requests'
arrival span and true lengths: the unconditional size distribution a deployment measures from its
history). The paper assumes rho = rate * E[S] < 1 and states no rule for overload (there is then no
positive root); here at rho >= 1, or when the rate cannot be measured (all requests at once), gamma is
the root at rho = 0.95 (:data:`OVERLOAD_RHO`: the rate 0.95 / E[S]). Uncalibrated, gamma is
:data:`GAMMA`; the router measures the rate, the service times and ``s_per_token`` from its own traffic
and solves gamma online (:mod:`lenpred.route.calibrate`).

Each policy's parameters and their defaults are its ``Params`` model (:class:`BoostParams`,
:class:`Boost2Params`): ``gamma`` and ``s_per_token`` are "auto" (calibrated) or a number (pinned).
All three are non-preemptive by default (``preempt`` overrides it) and take no aging: the boost is
already an aging rule (a request is overtaken only by requests that arrive less than the difference of
their boosts after it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator
from scipy import optimize

from lenpred.errors import ConfigError, DataError, FieldError
from lenpred.sched.dists import levels, normal_points
from lenpred.sched.job import Job
from lenpred.sched.queue import QUEUE_POLICIES, PolicyParams, QueuePolicy, Range
from lenpred.stats import portable

__all__ = [
    "BOOST_S", "Boost2", "Boost2Params", "BoostParams", "BoostPolicy", "Calibration", "GAMMA", "GBoostParams",
    "GammaBoost", "OVERLOAD_RHO", "UniBoostParams", "S_PER_TOKEN", "SHORT_TOKENS", "UniBoost", "boost", "log_mgf", "remaining_points", "solve_gamma",
]

INF = math.inf
# llama8b-h100 at a full batch: decode_time(256, 256 * 400) = 16.94 ms for 256 tokens -> 66 us per token
S_PER_TOKEN = 6.6e-5
# the FCFS decay rate of the synthetic default workload (lognormal output, median 200, sigma 0.9, mean
# 296 tokens: E[S] = 19.6 ms) at 0.95 load with S_PER_TOKEN: 2.49 per second
GAMMA = 2.5
OVERLOAD_RHO = 0.95  # the load gamma is solved at when the measured load is >= 1
RHO_TOL = 1e-9  # a load within this of 1 counts as 1 (the root there is ~1e-9 / s: rounding, not a rate)
# boost2's defaults: the yardstick's episodes (docs/yardstick/) found B = 3 s the only boost on a prefill head
# that never backfired (10 s and 30 s did), and 224 tokens is the median output of the ShareGPT test split
# (set it to your workload's median). They were 10 s / 200 in the simulator and 3 s / 224 in the router
# until both read them from here (issue 39); every committed figure gave both numbers explicitly.
BOOST_S = 3.0
SHORT_TOKENS = 224.0
CACHE_MAX = 200_000  # gboost's boost cache is emptied when it holds this many (distribution, age) entries
UNCOND_POINTS = 256  # uniboost keeps the workload's lengths as at most this many quantile points


def _points(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    """Equal-weight points as a float array; no mass (empty), NaN or a negative value is one line."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise DataError(f"{what}: a distribution with no mass (0 support points)",
                        "give at least one support point in [0, inf)")
    bad = ~np.isfinite(x) | (x < 0)
    if bad.any():
        raise DataError(f"{what}: {int(bad.sum())} of {x.size} support points are not finite numbers >= 0 "
                        f"(first: {float(x[bad][0])!r})", "every point must be a finite number in [0, inf)")
    return x


def log_mgf(points_s: np.ndarray, gamma: float) -> float:
    """log E[e^{gamma S}] of equal-weight points ``points_s`` (seconds), without overflow."""
    z = gamma * points_s
    m = float(z.max())
    return m + math.log(float(portable.exp(z - m).mean()))  # same bits on every CPU: a queue key


def boost(points_s: Sequence[float] | np.ndarray, gamma: float) -> float:
    """The boost ``(1/gamma) log(M / (M - 1))`` of a label with service-time points ``points_s``
    (seconds, equal weights), M = E[e^{gamma S}]: written ``-log(1 - 1/M) / gamma`` with M in logs, so
    a long job (M huge) gets ~0 and a tiny one (M near 1) a large boost; a job of 0 s gets ``inf``."""
    if not (math.isfinite(gamma) and gamma > 0):
        raise ConfigError(f"gamma must be in (0, inf) per second, got {gamma!r}", "set gamma to a positive finite number")
    lm = log_mgf(_points(points_s, "the boost's service distribution"), gamma)
    if lm <= 0.0:
        return INF
    return -math.log(-math.expm1(-lm)) / gamma


def remaining_points(dist: Any, gen: int) -> np.ndarray:
    """Remaining tokens of a :class:`~lenpred.sched.dists.LengthDist` given L > ``gen`` (its points above
    ``gen``, minus ``gen``). Past its largest point, as :meth:`LengthDist.rank` reads it: uniform on
    (gen, cap] (16 levels), or without a cap as long as what was generated."""
    r = dist.remaining(gen)
    if r.size:
        return r
    if dist.cap is not None and dist.cap > gen:
        return levels() * (dist.cap - gen)
    return np.array([float(max(gen, 1))])


def solve_gamma(rate: float, service_samples_s: Sequence[float] | np.ndarray) -> float:
    """The positive root of ``gamma = rate * (E[e^{gamma S}] - 1)`` (1/s) for equal-weight service
    samples (seconds) and an arrival ``rate`` (requests/s, per server): the FCFS waiting-time tail's
    decay rate. The samples' MGF exists for every gamma, so the root is bracketed by doubling and found
    by :func:`scipy.optimize.brentq`. At rho = rate * E[S] >= 1 (to :data:`RHO_TOL`; ``rate`` may be
    ``inf``: not measurable) there is no positive root; the rule used is the root at rho =
    :data:`OVERLOAD_RHO`. (gamma falls to 0 as rho rises to 1, so the rule is discontinuous there.)"""
    s = _points(service_samples_s, "service samples")
    if not (isinstance(rate, int | float) and rate > 0):  # NaN fails too
        raise ConfigError(f"rate must be in (0, inf] requests/s, got {rate!r}", "pass the arrival rate per server")
    mean = float(s.mean())
    if mean <= 0:
        raise DataError("service samples are all 0 s: no work, no waiting tail", "pass the service times in seconds")
    lam = rate if rate * mean < 1.0 - RHO_TOL else OVERLOAD_RHO / mean

    def f(g: float) -> float:
        with np.errstate(over="ignore"):
            return lam * float(portable.expm1(g * s).mean()) - g

    lo, hi = 0.0, 1.0 / mean
    while f(hi) <= 0.0:  # f < 0 on (0, root), > 0 beyond (convex, f(0) = 0, f'(0) = rho - 1 < 0)
        lo, hi = hi, 2.0 * hi
    while not math.isfinite(f(hi)):  # an overflow: bisect down to a finite positive value
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if f(mid) > 0.0 else (mid, hi)
    if lo == 0.0:
        lo = hi
        while f(lo) >= 0.0:
            lo *= 0.5
    return float(optimize.brentq(f, lo, hi, xtol=1e-16 * hi, rtol=4 * np.finfo(float).eps))


@dataclass(frozen=True)
class Calibration:
    """What a boost policy learns of its workload before a run: the arrival ``rate`` per server
    (requests/s; ``inf``: not measurable), the workload's output lengths (tokens: the unconditional
    size distribution) and, optionally, the server's seconds per token (a profile's full batch)."""

    rate: float
    service_tokens: np.ndarray
    s_per_token: float | None = None

    @classmethod
    def from_requests(cls, arrivals: Sequence[float] | np.ndarray, outputs: Sequence[float] | np.ndarray,
                      n_servers: int, s_per_token: float | None = None) -> Calibration:
        """The rate measured as (n - 1) / (last - first arrival) / ``n_servers``."""
        t = np.asarray(arrivals, dtype=np.float64)
        span = float(t.max() - t.min()) if t.size else 0.0
        rate = (t.size - 1) / span / n_servers if t.size > 1 and span > 0 else INF
        return cls(rate, _points(outputs, "workload lengths"), s_per_token)


class BoostParams(PolicyParams):
    """gboost's and uniboost's numbers: "auto" is measured (the simulator: gamma solved from the run's
    arrival rate and lengths, seconds per token from its profile, :meth:`BoostPolicy.calibrate`; the
    router: both measured from its traffic, :mod:`lenpred.route.calibrate`); a number pins it.
    Uncalibrated, "auto" is :data:`GAMMA` / :data:`S_PER_TOKEN`."""

    name: Literal["gboost", "uniboost"]
    gamma: float | Literal["auto"] = Field(
        "auto", description="decay rate of the FCFS waiting-time tail, 1/s: auto (solved from the measured "
                            "arrival rate and service times) or a number > 0")
    s_per_token: float | Literal["auto"] = Field(
        "auto", description="server seconds per generated token at a full batch: auto (the simulator: the "
                            "profile's full-batch step / batch; the router: measured) or a number > 0")

    @model_validator(mode="before")
    @classmethod
    def _auto_or_positive(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for k in ("gamma", "s_per_token"):
            if k not in data:
                continue
            v = data[k]
            if isinstance(v, str) and v.strip().lower() == "auto":
                out[k] = "auto"
            elif isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
                out[k] = float(v)
            else:
                raise FieldError(f'policy {data.get("name")!r}: {k} must be "auto" or a number in (0, inf) '
                                 f"({_EXAMPLES[k]}), got {v!r}", f'set {k} to "auto" (measured) or to a number > 0')
        return out


_EXAMPLES = {"gamma": "1/s, e.g. 0.07 for two one-slot llama.cpp servers",
             "s_per_token": "seconds per generated token of one server at its full batch, e.g. 0.0125"}


class GBoostParams(BoostParams):
    name: Literal["gboost"] = "gboost"


class UniBoostParams(BoostParams):
    name: Literal["uniboost"] = "uniboost"


class BoostPolicy(QueuePolicy):
    """Base of the gamma-parameterised boosts: ``key = arrival - boost(req, gen)``."""

    key_unit = "s"

    def __init__(self, params: PolicyParams | None = None) -> None:
        super().__init__(params)
        p = self.config
        assert isinstance(p, BoostParams)
        self.given = frozenset(k for k in ("gamma", "s_per_token") if getattr(p, k) != "auto")
        self.gamma = GAMMA if p.gamma == "auto" else float(p.gamma)
        self.s_per_token = S_PER_TOKEN if p.s_per_token == "auto" else float(p.s_per_token)
        self.params = {"gamma": self.gamma, "s_per_token": self.s_per_token}

    def calibrate(self, cal: Calibration) -> None:
        """Take the server's seconds per token (unless ``s_per_token`` was given) and solve gamma from
        the rate and the workload's service times (unless ``gamma`` was given)."""
        s = self.s_per_token
        if "s_per_token" not in self.given and cal.s_per_token is not None:
            s = float(cal.s_per_token)
        g = self.gamma if "gamma" in self.given else solve_gamma(cal.rate, cal.service_tokens * s)
        self.use(g, s)

    def use(self, gamma: float, s_per_token: float) -> None:
        """Key with these numbers from now on (the router's online calibration sets them directly);
        boosts computed with the old ones are dropped (:meth:`_forget`)."""
        self.gamma, self.s_per_token = gamma, s_per_token
        self._forget()

    def _forget(self) -> None:
        """Drop what was computed with the previous gamma and s_per_token (subclasses that cache)."""

    def boost_of(self, req: Job, gen: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def key(self, req: Job, gen: int, now: float = 0.0) -> float:
        return req.arrival - self.boost_of(req, gen)


@QUEUE_POLICIES.register("gboost")
class GammaBoost(BoostPolicy):
    """gamma-Boost on the request's predictive distribution of its remaining length (the latest
    re-prediction's), conditioned on the ``gen`` tokens generated. A request without a distribution
    (the router's) is taken as a normal of its predicted remaining and spread (the points of
    :func:`~lenpred.sched.dists.from_spread`, not cached: each is one request's), or a point mass
    without a spread."""

    name = "gboost"
    Params = GBoostParams
    needs_prediction = True
    needs_dist = True
    routable = True

    def __init__(self, params: PolicyParams | None = None) -> None:
        super().__init__(params)
        # (id(dist), gen) -> (dist, boost): requests share distribution objects, and a victim search keys
        # every running request at every step; holding the dist keeps its id from being reused
        self._cache: dict[tuple[int, int], tuple[Any, float]] = {}

    def _forget(self) -> None:
        self._cache = {}

    def boost_of(self, req: Job, gen: int) -> float:
        d = req.dist
        if d is None:
            r = req.pred_remaining(gen)
            pts = normal_points(r, req.spread) if req.spread else np.array([max(r, 1.0)])
            return boost(pts * self.s_per_token, self.gamma)
        k = (id(d), gen)
        hit = self._cache.get(k)
        if hit is not None and hit[0] is d:
            return hit[1]
        b = boost(remaining_points(d, gen) * self.s_per_token, self.gamma)
        if len(self._cache) >= CACHE_MAX:
            self._cache = {}
        self._cache[k] = (d, b)
        return b


@QUEUE_POLICIES.register("uniboost")
class UniBoost(BoostPolicy):
    """Prediction-free boost: the workload's unconditional length distribution (from
    :meth:`calibrate`) given L > ``gen``; the same for every request of the same attained service, so
    fresh requests go in FCFS order. Uncalibrated, it knows no distribution and is FCFS."""

    name = "uniboost"
    Params = UniBoostParams

    def __init__(self, params: PolicyParams | None = None) -> None:
        super().__init__(params)
        self.lengths: np.ndarray | None = None  # sorted unconditional lengths (tokens)
        self._by_gen: dict[int, float] = {}

    def calibrate(self, cal: Calibration) -> None:
        super().calibrate(cal)
        x = np.sort(cal.service_tokens)
        if x.size > UNCOND_POINTS:
            x = np.quantile(x, levels(UNCOND_POINTS))
        self.lengths = x
        self._by_gen = {}

    def _forget(self) -> None:
        self._by_gen = {}

    def boost_of(self, req: Job, gen: int) -> float:
        if self.lengths is None:
            return 0.0
        b = self._by_gen.get(gen)
        if b is None:
            x = self.lengths
            r = x[x > gen] - gen
            if not r.size:
                r = np.array([float(max(gen, 1))])  # past the longest length: as long as what was generated
            b = self._by_gen[gen] = boost(r * self.s_per_token, self.gamma)
        return b


class Boost2Params(PolicyParams):
    name: Literal["boost2"] = "boost2"
    boost_s: Annotated[float, Range(0.0, open_lo=True)] = Field(
        BOOST_S, description="seconds a request predicted short goes ahead of its arrival")
    short_threshold: Annotated[float, Range(0.0, open_lo=True)] = Field(
        SHORT_TOKENS, description="predicted total tokens under which a request is short")


@QUEUE_POLICIES.register("boost2")
class Boost2(QueuePolicy):
    """Two-class boost: ``arrival - boost_s`` (seconds) when the request's latest predicted total
    (``gen + pred_remaining(gen)``) is under ``short_threshold`` tokens, else ``arrival``."""

    name = "boost2"
    Params = Boost2Params
    needs_prediction = True
    key_unit = "s"
    routable = True

    def is_short(self, req: Job, gen: int) -> bool:
        return gen + req.pred_remaining(gen) < self.params["short_threshold"]

    def key(self, req: Job, gen: int, now: float = 0.0) -> float:
        return req.arrival - self.params["boost_s"] if self.is_short(req, gen) else req.arrival
