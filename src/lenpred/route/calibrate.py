"""gboost calibrated online: the router measures ``s_per_token`` and ``gamma`` from its own traffic.

gamma-Boost (:mod:`lenpred.sched.boost`) keys a request by ``arrival - b``, ``b = (1/gamma) log(M / (M - 1))``,
``M = E[e^{gamma S}]`` over its predicted length, S = tokens x ``s_per_token``. Both numbers belong to the
deployment: ``s_per_token`` is the seconds one *server* (in the M/G/1 sense: a continuous batch is one
server whose throughput is the whole batch) spends per generated token, and gamma is the root of
``gamma = rate * (E[e^{gamma S}] - 1)`` for the arrival rate per server and the service times. What
:class:`OnlineCalibrator` measures, all of it O(1) per request (a deque append) and none of it on a
request's path (the recomputation runs in a later event-loop turn, :meth:`OnlineCalibrator.completion`
only says when one is due):

* **s_per_token**: each completed request's per-token interval (streamed: first data event to the end,
  divided by the tokens after the first event; not streamed: the backend's whole answer time divided by
  ``usage.completion_tokens``, so prefill is counted in it) divided by the time-mean number of requests in
  flight on its backend over that span (:meth:`lenpred.route.backends.Backend.busy_area`): k requests
  sharing a batch each see one token per step, so the server makes k tokens per interval. The median of
  the last ``window`` such samples, pooled over backends (one per-server figure). In flight counts what the
  router sent on: with ``max_outstanding`` above the server's slots (llama.cpp's ``--parallel``), requests
  waiting inside the server are counted as if they ran, and the figure is too small; set
  ``max_outstanding`` to the slots. A request of ``n`` > 1 sequences gives no sample (its tokens are
  not one sequence's steps).
* **rate**: the arrivals of the last ``rate_window_s`` seconds over that span, divided by the number of
  healthy backends (requests/s per server).
* **service samples**: the last ``window`` completed requests' output tokens x ``s_per_token``; gamma =
  :func:`lenpred.sched.boost.solve_gamma` of the rate and the samples (its rule at rho >= 1: the root at
  rho = :data:`lenpred.sched.boost.OVERLOAD_RHO`).

Until ``min_completions`` completions are measured, the pinned numbers or the library's defaults
(:data:`lenpred.sched.boost.GAMMA`, :data:`lenpred.sched.boost.S_PER_TOKEN`) are used; the first full
calibration is logged once. A recomputation happens on a completion at most every ``every_n`` completions
or ``every_s`` seconds, whichever comes first. It changes the keys of requests that arrive afterwards
only: a key already in the router's wait queue (or sent in a backend's priority field) is a boosted
arrival *time* and keeps its value, so a recalibration never reorders the requests already waiting.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

import numpy as np

from lenpred.errors import LenpredError
from lenpred.route.config import CalibrateConfig
from lenpred.sched.boost import GAMMA, S_PER_TOKEN, solve_gamma

__all__ = ["GboostState", "OnlineCalibrator"]

log = logging.getLogger("lenpred.route")


@dataclass(frozen=True)
class GboostState:
    """What gboost runs with now, and where each number comes from (pinned, default, measured)."""

    gamma: float
    s_per_token: float
    gamma_source: str
    s_per_token_source: str
    rate: float | None = None  # arrivals per second per healthy backend (None: not measured yet)
    calibrated: bool = False  # every "auto" number is measured
    completions: int = 0  # completions measured so far

    def describe(self) -> dict[str, object]:
        return {"gamma": self.gamma, "s_per_token": self.s_per_token, "gamma_source": self.gamma_source,
                "s_per_token_source": self.s_per_token_source, "rate_per_server": self.rate,
                "calibrated": self.calibrated, "completions": self.completions}


class OnlineCalibrator:
    """The measured ``s_per_token``, arrival rate and gamma (see the module's docstring).

    ``gamma`` / ``s_per_token``: the pinned numbers, or None to measure them. Times are
    ``time.monotonic()`` seconds, given by the caller (the tests feed synthetic ones)."""

    def __init__(self, cfg: CalibrateConfig, gamma: float | None = None, s_per_token: float | None = None,
                 t0: float = 0.0) -> None:
        self.cfg = cfg
        self.pinned_gamma, self.pinned_s = gamma, s_per_token
        self.t0 = t0
        self.arrivals: deque[float] = deque(maxlen=max(1024, 64 * cfg.window))
        self.n_arrivals = 0
        self.s_samples: deque[float] = deque(maxlen=cfg.window)  # seconds per token of one server
        self.tokens: deque[float] = deque(maxlen=cfg.window)  # output tokens of completed requests
        self.completions = 0
        self._since = 0  # completions since the last recomputation
        self._last = t0  # time of the last recomputation
        self._logged = False
        self.state = GboostState(
            gamma=GAMMA if gamma is None else gamma, s_per_token=S_PER_TOKEN if s_per_token is None else s_per_token,
            gamma_source="default" if gamma is None else "pinned",
            s_per_token_source="default" if s_per_token is None else "pinned",
            calibrated=gamma is not None and s_per_token is not None)

    @property
    def active(self) -> bool:
        """Whether anything is measured (some number is "auto")."""
        return self.pinned_gamma is None or self.pinned_s is None

    # -- per request, O(1)
    def arrival(self, now: float) -> None:
        self.arrivals.append(now)
        self.n_arrivals += 1

    def completion(self, tokens: float, per_token_s: float | None, inflight: float, now: float) -> bool:
        """A request completed with ``tokens`` output tokens, ``per_token_s`` seconds between its tokens
        (None: not measurable) while ``inflight`` requests (time mean, >= 1) ran on its backend. Returns
        whether a recomputation is due (the caller runs :meth:`recompute` outside the request's path)."""
        if tokens >= 1:
            self.tokens.append(float(tokens))
        if per_token_s is not None and per_token_s > 0:
            self.s_samples.append(per_token_s / max(inflight, 1.0))
        self.completions += 1
        self._since += 1
        if self.completions < self.cfg.min_completions:
            return False
        first = not self.state.calibrated and self.completions == self.cfg.min_completions
        return first or self._since >= self.cfg.every_n or now - self._last >= self.cfg.every_s

    # -- off the request path
    def rate(self, now: float, n_servers: int) -> float | None:
        """Arrivals per second per server over the last ``rate_window_s`` (None: none, or no server)."""
        w = self.cfg.rate_window_s
        a = self.arrivals
        while a and a[0] <= now - w:
            a.popleft()
        if not a or n_servers < 1:
            return None
        dropped = self.n_arrivals > len(a) and len(a) == a.maxlen  # more arrived in the window than it keeps
        span = now - a[0] if dropped else min(w, now - self.t0)
        return len(a) / span / n_servers if span > 0 else None

    def recompute(self, now: float, n_servers: int) -> GboostState:
        """The numbers from what was measured so far (the pinned ones stay); sets and returns :attr:`state`."""
        self._since, self._last = 0, now
        st = self.state
        enough = self.completions >= self.cfg.min_completions
        s, s_src = st.s_per_token, st.s_per_token_source
        if self.pinned_s is None and enough and len(self.s_samples) >= self.cfg.min_completions:
            s, s_src = float(np.median(np.fromiter(self.s_samples, float))), "measured"
        rate = self.rate(now, n_servers)
        g, g_src = st.gamma, st.gamma_source
        if self.pinned_gamma is None and enough and len(self.tokens) >= self.cfg.min_completions and rate:
            try:
                g, g_src = solve_gamma(rate, np.fromiter(self.tokens, float) * s), "measured"
            except LenpredError as e:  # no usable samples: keep what runs now
                log.warning("gboost: gamma not recomputed (%s)", e)
        done = "default" not in (g_src, s_src)
        self.state = GboostState(g, s, g_src, s_src, rate, done, self.completions)
        if done and not self._logged and self.active:
            self._logged = True
            log.info("gboost calibrated after %d completions: gamma %.4g /s, s_per_token %.4g s, rate %s req/s "
                     "per server", self.completions, g, s, "-" if rate is None else f"{rate:.4g}")
        return self.state
