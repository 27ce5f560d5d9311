"""The router's ordering key (its wait queue) and the backend's priority field (vLLM: an int, lower first).

The key is the queue key (:mod:`lenpred.sched.queue`, the simulator's too) of ``priority.queue``, at
arrival, with ``arrival`` in seconds since the router started. The policy is built from its typed
parameters (:class:`lenpred.sched.queue.PolicyParams`: the simulator's defaults are the router's):

* ``auto`` (the default) is ``fcfs`` after a model's prediction and after chars / none (issue 37)
  (:meth:`lenpred.route.config.RouterConfig.queue_policy`); the mapper gets the resolved policy;
* ``fcfs`` orders by arrival;
* ``boost2`` by the arrival minus ``boost_s`` when the prediction is under ``short_threshold`` tokens;
* ``gboost`` by the arrival minus gamma-Boost's boost of the prediction (a normal of the predicted
  tokens and spread when the estimator gives a spread, else a point mass), with ``gamma`` and
  ``s_per_token`` measured online where they are "auto" (:attr:`PriorityMapper.calib`,
  :mod:`lenpred.route.calibrate`: a recalibration changes the keys of later arrivals only);
* ``sjf`` by ``predicted + quantile_z * spread + aging * arrival`` (tokens). Ordering requests by that
  static key is the same as ordering them by ``predicted - aging * waited`` at any moment, so a long
  request gains ``aging`` tokens of priority per second it has waited and is never starved.

The integer sent is, for a time key (the policy's ``key_unit`` "s": fcfs, boost2, gboost), the boosted
arrival in milliseconds since the router started, and for a token key (sjf) ``round(key / tokens_per_level)``; either clipped to
``[min, max]`` where those are set. vLLM fixes a request's priority at admission: the backend keeps this
order for the requests waiting in its queue (and, with ``--scheduling-policy priority``, preempts the
running request of the largest value when it runs out of KV blocks), but it never sees what a request
has generated since, so a policy keyed on attained service or on re-predictions (``las``, ``srpt``,
``gittins``) cannot be compiled into the field: that is the engine scheduler's part.
"""

from __future__ import annotations

import time

from lenpred.route.calibrate import GboostState, OnlineCalibrator
from lenpred.route.config import PriorityConfig
from lenpred.sched.boost import BoostParams, BoostPolicy
from lenpred.sched.job import Arrived
from lenpred.sched.queue import PolicyParams, make_queue_policy

__all__ = ["PriorityMapper"]


class PriorityMapper:
    """Keys and field values of ``queue`` (the resolved policy with its parameters; default: ``cfg.queue``,
    ``auto`` as after no prediction). For a boost with an "auto" number (gboost), :attr:`calib` measures
    it (:meth:`recalibrate` applies it)."""

    def __init__(self, cfg: PriorityConfig, default_tokens: float, t0: float | None = None,
                 queue: PolicyParams | None = None) -> None:
        self.cfg = cfg
        self.default_tokens = default_tokens
        self.t0 = time.monotonic() if t0 is None else t0
        self.params = queue if queue is not None else cfg.resolve("none")
        self.queue = self.params.name
        self.policy = make_queue_policy(self.params)
        self.ms = self.policy.time_keyed()
        self.calib: OnlineCalibrator | None = None
        if isinstance(self.policy, BoostPolicy) and isinstance(self.params, BoostParams):
            pol = self.policy  # uncalibrated: "auto" numbers hold the library's until measured
            self.calib = OnlineCalibrator(cfg.calibrate, None if self.params.gamma == "auto" else pol.gamma,
                                          None if self.params.s_per_token == "auto" else pol.s_per_token, t0=self.t0)

    @property
    def measuring(self) -> OnlineCalibrator | None:
        """The calibrator when it measures something (a gboost number is "auto"), else None."""
        return self.calib if self.calib is not None and self.calib.active else None

    @property
    def gboost(self) -> GboostState | None:
        """gboost's numbers now (None for another queue)."""
        return None if self.calib is None else self.calib.state

    def recalibrate(self, now: float, n_servers: int) -> GboostState | None:
        """Recompute the measured gboost numbers and key later arrivals with them (keys given out keep theirs)."""
        if self.calib is None:
            return None
        st = self.calib.recompute(now, n_servers)
        assert isinstance(self.policy, BoostPolicy)  # calib exists for gboost only
        self.policy.use(st.gamma, st.s_per_token)
        return st

    def key(self, tokens: float | None, spread: float | None, now: float | None = None) -> float:
        """The priority key (smaller first) of a request predicted at ``tokens`` arriving ``now``: seconds
        for a time-keyed queue, tokens for sjf."""
        now = time.monotonic() if now is None else now
        pred = self.default_tokens if tokens is None else tokens
        return self.policy.key(Arrived(arrival=now - self.t0, pred=pred, spread=spread), 0)

    def value(self, key: float) -> int:
        """The integer sent in the backend's priority field."""
        v = int(round(key * 1000.0 if self.ms else key / self.cfg.tokens_per_level))
        if self.cfg.min is not None:
            v = max(v, self.cfg.min)
        if self.cfg.max is not None:
            v = min(v, self.cfg.max)
        return v
