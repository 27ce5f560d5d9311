"""The router's ordering key (its wait queue) and the backend's priority field (vLLM: an int, lower first).

The key is the queue key (:mod:`lenpred.sched.queue`, the simulator's too) of ``priority.queue``, at
arrival, with ``arrival`` in seconds since the router started:

* ``auto`` (the default) is ``gboost`` after a model's prediction, ``fcfs`` after chars / none
  (:meth:`lenpred.route.config.RouterConfig.queue_policy`); the mapper gets the resolved name;
* ``fcfs`` orders by arrival;
* ``boost2`` by the arrival minus ``boost_s`` when the prediction is under ``short_threshold`` tokens;
* ``gboost`` by the arrival minus gamma-Boost's boost of the prediction (a normal of the predicted
  tokens and spread when the estimator gives a spread, else a point mass), with ``gamma`` and
  ``s_per_token`` measured online where they are "auto" (:attr:`PriorityMapper.calib`,
  :mod:`lenpred.route.calibrate`: a recalibration changes the keys of later arrivals only);
* ``sjf`` by ``predicted + quantile_z * spread + aging * arrival`` (tokens). Ordering requests by that
  static key is the same as ordering them by ``predicted - aging * waited`` at any moment, so a long
  request gains ``aging`` tokens of priority per second it has waited and is never starved.

The integer sent is, for a time key (fcfs, boost2, gboost), the boosted arrival in milliseconds since
the router started, and for a token key (sjf) ``round(key / tokens_per_level)``; either clipped to
``[min, max]`` where those are set. vLLM fixes a request's priority at admission: the backend keeps this
order for the requests waiting in its queue (and, with ``--scheduling-policy priority``, preempts the
running request of the largest value when it runs out of KV blocks), but it never sees what a request
has generated since, so a policy keyed on attained service or on re-predictions (``las``, ``srpt``,
``gittins``) cannot be compiled into the field: that is the engine scheduler's part.
"""

from __future__ import annotations

import time

from lenpred.route.calibrate import GboostState, OnlineCalibrator
from lenpred.route.config import TIME_KEYED_QUEUES, PriorityConfig
from lenpred.sched.boost import GAMMA, S_PER_TOKEN, BoostPolicy
from lenpred.sched.job import Arrived
from lenpred.sched.queue import QUEUE_POLICIES, make_queue_policy

__all__ = ["PriorityMapper"]


def _params(cfg: PriorityConfig, queue: str) -> dict[str, float]:
    """The queue policy's own parameters from the router's config (a gboost number "auto" or null is left
    to the policy's default; "auto" is then calibrated online)."""
    if queue == "boost2":
        return {"boost_s": cfg.boost_s, "short_threshold": cfg.short_threshold}
    if queue == "gboost":
        return {k: v for k, v in (("gamma", cfg.gamma), ("s_per_token", cfg.s_per_token)) if isinstance(v, float)}
    return {}


def _pin(v: float | str | None, default: float) -> float | None:
    """A gboost number for the calibrator: None to measure ("auto"), else the number (null: the default)."""
    return None if v == "auto" else default if v is None else float(v)


class PriorityMapper:
    """Keys and field values of ``queue`` (the resolved policy; default: ``cfg.queue``, ``auto`` as fcfs).
    For gboost with an "auto" number, :attr:`calib` measures it (:meth:`recalibrate` applies it)."""

    def __init__(self, cfg: PriorityConfig, default_tokens: float, t0: float | None = None,
                 queue: str | None = None) -> None:
        self.cfg = cfg
        self.default_tokens = default_tokens
        self.t0 = time.monotonic() if t0 is None else t0
        self.queue = queue if queue is not None else cfg.resolve("none")
        cls = QUEUE_POLICIES.get(self.queue)
        aging = cfg.aging if cls.takes_aging else 0.0  # the default aging is for sjf
        quantile_z = cfg.quantile_z if self.queue == "sjf" else 0.0
        self.policy = make_queue_policy(self.queue, aging=aging, quantile_z=quantile_z, **_params(cfg, self.queue))
        self.ms = self.queue in TIME_KEYED_QUEUES
        self.calib: OnlineCalibrator | None = None
        if self.queue == "gboost":
            self.calib = OnlineCalibrator(cfg.calibrate, _pin(cfg.gamma, GAMMA), _pin(cfg.s_per_token, S_PER_TOKEN),
                                          t0=self.t0)

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
