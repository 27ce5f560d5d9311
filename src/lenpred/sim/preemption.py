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
  (:meth:`KvRules.horizon_peak`; requests do not all peak at once, which the sum of peaks
  assumes); ``true-horizon``: the same on true lengths (the ceiling). An empty instance admits
  whatever fits now. ``watermark``: fits-now against a larger reserve, the budget less ``kv_reserve`` (a
  share of the KV, default 0.1) kept free for the running requests to grow into: vLLM's watermark
  raised, no prediction.

:class:`KvRules` is a part of :class:`~lenpred.sim.instances.DecodeInstance` (composition): the pure
choices (whom to evict, whether to admit, the horizon peak), each reading the instance it is handed and
changing nothing; the instance itself evicts, admits and keeps the counters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from lenpred.sim.request import Request

__all__ = ["Batch", "DecodeSetup", "KvRules", "kv_need"]


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


class Batch(Protocol):
    """What the rules read of a decode instance (:class:`~lenpred.sim.instances.DecodeInstance` has it): its
    queue policy, step count, running requests and KV counters."""

    policy: Any  # the instance's QueuePolicy (its key orders victims under rule "policy")
    step: int
    running: dict[int, Request]
    ctx: int
    pred_sum: float
    kv_reserved: int
    reserved_pred: float
    true_peak: int


class KvRules:
    """The arm's KV victim and admission rules (``ArmPolicy.victim`` / ``admission``) and the budgets they
    admit against: the KV capacity, less the watermark (``cap_eff``), less ``kv_reserve`` (``cap_reserve``)."""

    def __init__(self, victim: str, admission: str, cap: int, setup: DecodeSetup) -> None:
        self.victim = victim
        self.admission = admission
        self.cap = cap
        self.cap_eff = cap * (1.0 - setup.watermark)  # admission leaves this much headroom
        self.cap_reserve = cap * (1.0 - setup.kv_reserve)  # admission "watermark"

    def pick_victim(self, d: Batch, t: float) -> Request:
        """The running request of ``d`` the victim rule evicts at ``t``."""
        rule = self.victim
        victim: Request | None = None
        if rule == "policy":
            key = d.policy.key
            worst = -math.inf
            for r in d.running.values():
                k = key(r, r.gen + (d.step - r.base_step), t)
                if k >= worst:  # ties: the later-joined one (dict order), as vLLM preempts the newest
                    worst = k
                    victim = r
        else:
            best: tuple[float, float, int] | None = None
            for r in d.running.values():
                gen = r.gen + (d.step - r.base_step)
                left = 0.0 if rule == "latest" else (
                    r.pred_remaining(gen) if rule == "predicted-remaining" else float(r.output - gen))
                score = (left, r.arrival, r.rid)
                if best is None or score > best:
                    best, victim = score, r
        assert victim is not None
        return victim

    def admits(self, d: Batch, r: Request, used: int, empty: bool) -> bool:
        """Whether queued ``r`` may join ``d``: ``used`` is the KV after it joins (running + in flight + one
        token each + its own), ``empty`` whether nothing runs or is in flight."""
        if used > self.cap_eff and not (empty and used <= self.cap):
            return False
        rule = self.admission
        if rule == "fits-now" or empty:
            return True
        if rule == "watermark":
            return used <= self.cap_reserve
        if rule == "predicted-peak":
            peak = d.ctx + d.pred_sum + d.kv_reserved + d.reserved_pred + kv_need(r) + r.q_rem
        elif rule == "true-peak":
            peak = d.true_peak + r.prompt + r.output
        else:
            peak = self.horizon_peak(d, r, rule == "true-horizon")
        return peak <= self.cap_eff

    @staticmethod
    def horizon_peak(d: Batch, r: Request, truth: bool) -> float:
        """The most KV the batch of ``d`` would ever hold if ``r`` joined and every running request ran to its
        predicted (``truth``: true) end, one token per step, leaving then: with remaining lengths sorted
        down, rem_1 >= rem_2 >= ..., the footprint peaks just before the k-th one leaves, at
        sum_{i <= k} (prompt_i + gen_i) + k rem_k; a request past its prediction counts 1 token left.
        Requests in flight count at their peak (prompt + remaining) throughout."""
        rem = []
        base = []
        step = d.step
        for q in d.running.values():
            gen = q.gen + (step - q.base_step)
            left = float(q.output - gen) if truth else q.pred_remaining(gen)
            rem.append(left if left > 1.0 else 1.0)
            base.append(q.prompt + gen)
        rem.append(float(r.output - r.gen) if truth else max(r.q_rem, 1.0))
        base.append(kv_need(r))
        x = np.asarray(rem)
        order = np.argsort(-x, kind="stable")
        foot = np.cumsum(np.asarray(base, dtype=np.float64)[order]) + np.arange(1, x.size + 1) * x[order]
        flight: float
        if truth:
            flight = d.true_peak - sum(q.prompt + q.output for q in d.running.values())
        else:
            flight = d.kv_reserved + d.reserved_pred
        return float(foot.max()) + flight
