"""Preemption on a decode instance: for KV (the batch no longer fits) and by policy (a waiting
request whose key beats a running one's), both costed as the cluster says (recompute: the request
re-prefills prompt + generated tokens later; swap: its KV goes to host memory and back); and the
rule that admits queued requests into the batch.

The KV victim and the admission rule are the arm's (``ArmPolicy.victim`` / ``admission``):

* victim ``policy``: the running request with the largest queue key (under FCFS the latest arrival);
  ``latest``: the latest arrival (vLLM's default); ``predicted-remaining``: the most predicted tokens
  left, ``pred_remaining(gen)`` from the latest re-prediction applied (OUTLETS') or else the prefill
  head's prediction minus gen, 0 once overrun; ``true-remaining``: the most true tokens left (the
  ceiling). Ties go to the latest arrival (then the larger request id).
* admission ``fits-now``: the batch's KV plus one token each plus the request fits the budget less
  the watermark; ``predicted-peak`` (S3's): that, and the sum of predicted peak KV of every running,
  in-flight and the new request, prompt + max(predicted total, generated), fits too; ``true-peak``:
  prompt + true total instead (the ceiling); ``predicted-horizon``: fits now, and the most KV the
  batch would hold in the future, if every request ran to its predicted end and then left, fits
  (:meth:`Preemption._horizon_peak`; requests do not all peak at once, which the sum of peaks
  assumes); ``true-horizon``: the same on true lengths (the ceiling). An empty instance admits
  whatever fits now. ``watermark``: fits-now against a larger reserve, the budget less ``kv_reserve`` (a
  share of the KV, default 0.1) kept free for the running requests to grow into: vLLM's watermark
  raised, no prediction.

:class:`Preemption` is a mixin of :class:`~lenpred.sim.instances.DecodeInstance`: it reads that
instance's batch state (``running``, ``waiting``, the KV counters, ``policy``) and is kept apart so the
instance's step logic and the rules for whom to evict each stay one screen long.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lenpred.sched.queue import NEVER
from lenpred.sim.request import NEED_RECOMPUTE, NEED_SWAP_IN, Request

__all__ = ["DecodeSetup", "Preemption", "kv_need"]


@dataclass(frozen=True)
class DecodeSetup:
    """What a decode instance takes of its cluster and arm: colocated mode (it also prefills), KV
    preemption by swap (else recompute), the share of KV kept free at admission, the KV links (ingress
    and swap bandwidth in bytes/s, a transfer's fixed latency in s), and the arm's KV victim and
    admission rules."""

    colocated: bool = False
    swap: bool = False
    watermark: float = 0.0
    link_bw: float = 25e9
    link_latency: float = 0.0
    swap_bw: float = 25e9
    victim: str = "policy"
    admission: str = "fits-now"
    kv_reserve: float = 0.1  # admission "watermark": the share of KV kept free


def kv_need(r: Request) -> int:
    """KV slots a request holds when it (re)joins a batch: prompt + generated (>= 1 after prefill)."""
    return r.prompt + (r.gen if r.gen > 0 else 1)


class Preemption:
    """Whom a decode instance evicts, what it costs, and whom it admits (see the module docstring)."""

    # provided by DecodeInstance
    policy: Any
    running: dict[int, Request]
    waiting: list[tuple[float, int, Request]]
    step: int
    cap: int
    cap_eff: float
    cap_reserve: float
    ctx: int
    pred_sum: float
    kv_reserved: int
    reserved_pred: float
    waiting_pred: float
    waiting_kv: int
    true_peak: int
    victim_rule: str = "policy"
    admission_rule: str = "fits-now"

    def set_kv_rules(self, victim: str, admission: str) -> None:
        """The KV victim and admission rules (values of ``ArmPolicy.victim`` / ``admission``)."""
        self.victim_rule = victim
        self.admission_rule = admission

    def _preempt_one(self, t: float) -> float:
        """Preempt the running request the victim rule names; returns the swap-out time it costs."""
        rule = self.victim_rule
        victim: Request | None = None
        if rule == "policy":
            key = self.policy.key
            worst = -math.inf
            for r in self.running.values():
                k = key(r, r.gen + (self.step - r.base_step), t)
                if k >= worst:  # ties: the later-joined one (dict order), as vLLM preempts the newest
                    worst = k
                    victim = r
        else:
            best: tuple[float, float, int] | None = None
            for r in self.running.values():
                gen = r.gen + (self.step - r.base_step)
                left = 0.0 if rule == "latest" else (
                    r.pred_remaining(gen) if rule == "predicted-remaining" else float(r.output - gen))
                score = (left, r.arrival, r.rid)
                if best is None or score > best:
                    best, victim = score, r
        assert victim is not None
        return self._evict(victim, t)

    def _admits(self, r: Request, used: int, empty: bool) -> bool:
        """Whether queued ``r`` may join: ``used`` is the KV after it joins (running + in flight + one
        token each + its own), ``empty`` whether nothing runs or is in flight."""
        if used > self.cap_eff and not (empty and used <= self.cap):
            return False
        rule = self.admission_rule
        if rule == "fits-now" or empty:
            return True
        if rule == "watermark":
            return used <= self.cap_reserve
        if rule == "predicted-peak":
            peak = self.ctx + self.pred_sum + self.kv_reserved + self.reserved_pred + kv_need(r) + r.q_rem
        elif rule == "true-peak":
            peak = self.true_peak + r.prompt + r.output
        else:
            peak = self._horizon_peak(r, rule == "true-horizon")
        return peak <= self.cap_eff

    def _horizon_peak(self, r: Request, truth: bool) -> float:
        """The most KV the batch would ever hold if ``r`` joined and every running request ran to its
        predicted (``truth``: true) end, one token per step, leaving then: with remaining lengths sorted
        down, rem_1 >= rem_2 >= ..., the footprint peaks just before the k-th one leaves, at
        sum_{i <= k} (prompt_i + gen_i) + k rem_k; a request past its prediction counts 1 token left.
        Requests in flight count at their peak (prompt + remaining) throughout."""
        rem = []
        base = []
        step = self.step
        for q in self.running.values():
            gen = q.gen + (step - q.base_step)
            left = float(q.output - gen) if truth else q.pred_remaining(gen)
            rem.append(left if left > 1.0 else 1.0)
            base.append(q.prompt + gen)
        rem.append(float(r.output - r.gen) if truth else max(r.q_rem, 1.0))
        base.append(kv_need(r))
        x = np.asarray(rem)
        order = np.argsort(-x, kind="stable")
        foot = np.cumsum(np.asarray(base, dtype=np.float64)[order]) + np.arange(1, x.size + 1) * x[order]
        if truth:
            flight = self.true_peak - sum(q.prompt + q.output for q in self.running.values())
        else:
            flight = self.kv_reserved + self.reserved_pred
        return float(foot.max()) + flight

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
        self.waiting_kv += kv_need(victim)
        return (victim.prompt + gen) * self.kvb / self.swap_bw if self.swap else 0.0

    def _fits(self, r: Request) -> bool:
        """Whether queued ``r`` would be admitted now (a batch slot and its KV, as :meth:`_admit` asks)."""
        slots = self.n_run + self.n_reserved
        if slots >= self.max_batch:
            return False
        joins_now = r.need in (NEED_RECOMPUTE, NEED_SWAP_IN)
        used = self.ctx + self.kv_reserved + self.n_run + kv_need(r) + (1 if joins_now else 0)
        return self._admits(r, used, slots == 0 and self.kv_reserved == 0)

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
