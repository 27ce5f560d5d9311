"""Preemption on a decode instance: for KV (the batch no longer fits) and by policy (a waiting
request whose key beats a running one's), both costed as the cluster says (recompute: the request
re-prefills prompt + generated tokens later; swap: its KV goes to host memory and back).

:class:`Preemption` is a mixin of :class:`~lenpred.sim.instances.DecodeInstance`: it reads that
instance's batch state (``running``, ``waiting``, the KV counters, ``policy``) and is kept apart so the
instance's step logic and the rules for whom to evict each stay one screen long.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from lenpred.sched.queue import NEVER
from lenpred.sim.request import NEED_RECOMPUTE, NEED_SWAP_IN, Request

__all__ = ["Preemption", "kv_need"]


def kv_need(r: Request) -> int:
    """KV slots a request holds when it (re)joins a batch: prompt + generated (>= 1 after prefill)."""
    return r.prompt + (r.gen if r.gen > 0 else 1)


class Preemption:
    """Whom a decode instance evicts, and what it costs (see the module docstring)."""

    # provided by DecodeInstance
    policy: Any
    running: dict[int, Request]
    waiting: list[tuple[float, int, Request]]

    def _preempt_one(self, t: float) -> float:
        """Preempt the lowest-priority running request; returns the swap-out time it costs."""
        key = self.policy.key
        victim: Request | None = None
        worst = -math.inf
        for r in self.running.values():
            k = key(r, r.gen + (self.step - r.base_step), t)
            if k >= worst:  # ties: the later-joined one (dict order), as vLLM preempts the newest
                worst = k
                victim = r
        assert victim is not None
        return self._evict(victim, t)

    def _evict(self, victim: Request, t: float) -> float:
        """Preempt ``victim`` (recompute or swap, as the cluster says); returns the swap-out time."""
        key = self.policy.key
        victim.t_left = t
        gen = self.gen_of(victim)
        self._remove(victim, gen)
        victim.gen = gen
        victim.n_preempt += 1
        self.n_preempt += 1
        victim.q_rem = victim.pred_remaining(gen)
        victim.need = NEED_SWAP_IN if self.swap else NEED_RECOMPUTE
        heapq.heappush(self.waiting, (key(victim, gen, t), self._next_seq(), victim))
        self.waiting_pred += victim.q_rem
        return (victim.prompt + gen) * self.kvb / self.swap_bw if self.swap else 0.0

    def _fits(self, r: Request) -> bool:
        """Whether queued ``r`` would be admitted now (a batch slot and its KV, as :meth:`_admit` asks)."""
        slots = self.n_run + self.n_reserved
        if slots >= self.max_batch:
            return False
        joins_now = r.need in (NEED_RECOMPUTE, NEED_SWAP_IN)
        used = self.ctx + self.kv_reserved + self.n_run + kv_need(r) + (1 if joins_now else 0)
        return used <= self.cap_eff or (slots == 0 and self.kv_reserved == 0 and used <= self.cap)

    def _policy_preempt(self, t: float) -> float:
        """While the first queued request finds no room and beats the worst running request (by the
        policy's victim key), preempt that one; returns the swap-out time it costs."""
        pol = self.policy
        waiting = self.waiting
        extra = 0.0
        while waiting and self.n_run:
            kw, _, r = waiting[0]
            if self._fits(r):
                break
            victim, kr = pol.worst(self.running.values(), self.step)
            if victim is None or kr == NEVER or not pol.beats(kw, kr):
                break
            extra += self._evict(victim, t)
            self.n_policy_preempt += 1
        return extra
