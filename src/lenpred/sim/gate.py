"""Late binding: one central queue in front of the decode (or colocated) pool.

Early binding (the default) sends a request to an instance the moment it is ready (arrival in
colocated mode, the end of its prefill in disaggregated mode), and it waits in that instance's
queue. With late binding the request waits in one queue for the whole pool and is sent only when
an instance has fewer than ``max_outstanding`` requests (queued + reserved + running) of its own;
among the instances with room the arm's dispatcher picks (least requests, say). That is what
``lenpred route`` does with a backend's ``max_outstanding`` and its wait queue
(:class:`lenpred.route.backends.Pool`), and what a production router does with a bounded number of
requests per server: the queue forms at the router, so no request waits behind a slow instance
while another one has a free slot.

The central queue is ordered by the arm's decode queue policy (its key at entry; dynamic keys are
refreshed as instances' queues are): FCFS gives late-binding FCFS (no prediction), a size-based
policy gives "late binding that picks the queued request by prediction". Preempted requests go back
to their own instance's queue (their KV, or the place to recompute it, is there) and keep counting
in its load.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from lenpred.sched.dispatch import Dispatcher
from lenpred.sched.queue import REFRESH_S, QueuePolicy
from lenpred.sim.events import Event
from lenpred.sim.instances import DecodeInstance, rekey
from lenpred.sim.request import Request

__all__ = ["Gate"]


class Gate:
    """The pool's central queue: :meth:`offer` a ready request; an instance :meth:`pull` s from it."""

    def __init__(self, pool: Sequence[DecodeInstance], dispatcher: Dispatcher, policy: QueuePolicy,
                 max_outstanding: int) -> None:
        self.pool = list(pool)
        self.dispatcher = dispatcher
        self.policy = policy
        self.limit = max_outstanding
        self.waiting: list[tuple[float, int, Request]] = []  # heap (key, seq, request)
        self._seq = 0
        self._rekeyed = -math.inf
        self.peak = 0  # statistics: the most requests held at once
        for d in self.pool:
            d.gate = self

    def _free(self) -> list[DecodeInstance]:
        lim = self.limit
        return [d for d in self.pool if d.outstanding_requests() < lim]

    def _send(self, r: Request, free: list[DecodeInstance], need: int, t: float) -> list[Event]:
        inst = free[self.dispatcher.choose(free, r)]
        r.need = need
        return inst.enqueue(r, t)

    def offer(self, r: Request, need: int, t: float) -> list[Event]:
        """``r`` is ready for the pool at ``t`` (``need``: what it needs there, a ``NEED_*``): sent now
        if an instance has room and nobody waits (arrivals do not overtake the queue), else queued."""
        if not self.waiting:
            free = self._free()
            if free:
                return self._send(r, free, need, t)
        self._seq += 1
        r.need = need
        heapq.heappush(self.waiting, (self.policy.key(r, r.gen, t), self._seq, r))
        if len(self.waiting) > self.peak:
            self.peak = len(self.waiting)
        return []

    def pull(self, inst: DecodeInstance, t: float) -> None:
        """``inst`` is about to admit at ``t`` (the start of its step): it takes queued requests, smallest
        key first, into its own queue while it holds fewer than ``max_outstanding``. A slot frees only when
        a request finishes, at the end of a step, so pulling at the next step's start (before admission)
        is as soon as the router would send one (:meth:`lenpred.route.backends.Pool.release`)."""
        waiting = self.waiting
        if not waiting or inst.outstanding_requests() >= self.limit:
            return
        if self.policy.dynamic and t - self._rekeyed >= REFRESH_S:
            self._rekeyed = rekey(waiting, self.policy, t)
        while waiting and inst.outstanding_requests() < self.limit:
            _, _, r = heapq.heappop(waiting)
            inst.take(r, t)
