"""The router's ordering key (its wait queue) and the backend's priority field (vLLM: an int, lower first).

The key is the queue key (:mod:`lenpred.sched.queue`, the simulator's too) of ``priority.queue``, at
arrival: ``fcfs`` (the recommended default) orders by arrival; ``sjf`` by ``predicted + quantile_z *
spread + aging * arrival``, with ``arrival`` in seconds since the router started. Ordering requests by that
static key is the same as ordering them by ``predicted - aging * waited`` at any moment, so a long
request gains ``aging`` tokens of priority per second it has waited and is never starved: after
``(L_long - L_short) / aging`` seconds it goes before a new short one.

The integer sent is ``round(key / tokens_per_level)``, clipped to ``[min, max]`` where those are set.
vLLM fixes a request's priority at admission: the backend keeps this order for the requests waiting in
its queue (and, with ``--scheduling-policy priority``, preempts the running request of the largest
value when it runs out of KV blocks), but it never sees what a request has generated since, so a
policy keyed on attained service or on re-predictions (``las``, ``srpt``, ``gittins``) cannot be
compiled into the field: that is the engine scheduler's part.
"""

from __future__ import annotations

import time

from lenpred.route.config import PriorityConfig
from lenpred.sched.job import Arrived
from lenpred.sched.queue import QUEUE_POLICIES, make_queue_policy

__all__ = ["PriorityMapper"]


class PriorityMapper:
    def __init__(self, cfg: PriorityConfig, default_tokens: float, t0: float | None = None) -> None:
        self.cfg = cfg
        self.default_tokens = default_tokens
        self.t0 = time.monotonic() if t0 is None else t0
        aging = cfg.aging if QUEUE_POLICIES.get(cfg.queue).takes_aging else 0.0  # the default aging is for sjf
        self.policy = make_queue_policy(cfg.queue, aging=aging, quantile_z=cfg.quantile_z)

    def key(self, tokens: float | None, spread: float | None, now: float | None = None) -> float:
        """The priority key (smaller first) of a request predicted at ``tokens`` arriving ``now``."""
        now = time.monotonic() if now is None else now
        pred = self.default_tokens if tokens is None else tokens
        return self.policy.key(Arrived(arrival=now - self.t0, pred=pred, spread=spread), 0)

    def value(self, key: float) -> int:
        """The integer sent in the backend's priority field."""
        v = int(round(key / self.cfg.tokens_per_level))
        if self.cfg.min is not None:
            v = max(v, self.cfg.min)
        if self.cfg.max is not None:
            v = min(v, self.cfg.max)
        return v
