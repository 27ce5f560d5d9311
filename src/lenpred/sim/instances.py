"""Serving instances: a prefill instance and a decode instance (which is also the colocated one).

Both are entities driven by the :class:`~lenpred.sim.engine.Simulator`; their methods take the
current time and return new events (:mod:`lenpred.sim.events`): timed events for the heap, and
notices (a request finished; a prefilled request needs a decode instance) that the simulator acts
on. An instance never holds a reference to the simulator.

**Decode instance** (continuous batching under a KV-cache token budget). One event per step, none
per token: a running request's generated count is ``gen + (step - base_step)``, the sum of KV
entries held by the batch grows by the batch size each step, and a per-instance heap of
*milestones* keyed by step number says when a request finishes, when its generated count passes its
prediction, or when its next re-prediction applies. A step:

1. requests whose KV transfer finished join the running batch;
2. if the batch's KV plus one token each no longer fits, preempt the running requests the arm's
   victim rule names (default: the largest queue key) until it does (recompute: they re-prefill
   later; swap: their KV goes to host memory and comes back, both costed);
3. if nothing was preempted, admit queued requests in policy order while KV (less a watermark), the
   arm's admission rule (:mod:`lenpred.sim.preemption`) and the batch limit allow: a fresh request
   starts its KV transfer, a preempted one rejoins now (its recompute prefill or swap-in is added
   to this step), a colocated new request is prefilled in this step and joins the batch at its
   end with its first token;
4. duration = prefill time (of anything prefilled in this step) + decode time (batch, context) +
   swap time.

A prefilled request handed over *during* a step is admitted at once when it is next in policy
order and KV and batch slots allow (not after a preemption in this step): its KV transfer starts
then, and it joins at the first step boundary after the transfer lands, as in DistServe.

**Prefill instance**: batches queued prompts in policy order up to ``max_prefill_tokens`` and its
KV budget; each prompt's KV stays there until the decode instance that will run the request has
pulled it (DistServe's pull model), so a saturated decode pool backs up into the prefill pool.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from lenpred.sched.queue import NEVER, REFRESH_S, QueuePolicy
from lenpred.sim.events import KICK, PREFILL_DONE, PRIO, STEP_DONE, TRANSFER_DONE, Event, finished, handoff
from lenpred.sim.preemption import DecodeSetup, KvRules, kv_need
from lenpred.sim.profiles import LatencyProfile
from lenpred.sim.request import (
    NAN,
    NEED_PREFILL,
    NEED_RECOMPUTE,
    NEED_SWAP_IN,
    NEED_TRANSFER,
    Request,
)

# milestone kinds on a decode instance
M_FINISH, M_CROSS, M_REPRED = 0, 1, 2


class _Instance:
    """What both instance kinds share: one pending kick at a time, and only while idle."""

    busy: bool
    kick_pending: bool

    def kick(self, t: float) -> list[Event]:
        if self.busy or self.kick_pending:
            return []
        self.kick_pending = True
        return [(t, PRIO[KICK], KICK, self)]


class PrefillInstance(_Instance):
    """Runs prefill batches; holds each prompt's KV until a decode instance has pulled it."""

    def __init__(self, index: int, profile: LatencyProfile, policy: QueuePolicy, kv_capacity: int) -> None:
        self.index = index
        self.profile = profile
        self.policy = policy
        self.cap = kv_capacity  # KV slots (tokens)
        self.max_tokens = profile.max_prefill_tokens
        self.waiting: list[tuple[float, int, Request]] = []  # heap (key, seq, request)
        self.waiting_tokens = 0  # sum of queued prompt tokens
        self.kv_used = 0  # prompt KV held (in a batch, or prefilled and not yet pulled)
        self.batch: list[Request] = []
        self.batch_tokens = 0
        self.busy = False
        self.kick_pending = False
        self._seq = 0
        self._rekeyed = -math.inf  # last re-keying of a dynamic policy's queue
        # statistics
        self.busy_time = 0.0
        self.n_batches = 0
        self.tokens = 0
        self.peak_kv = 0
        self._started = 0.0

    # ---- load, as dispatchers see it
    def outstanding_requests(self) -> int:
        return len(self.waiting) + len(self.batch)

    def outstanding_tokens(self) -> float:
        return float(self.waiting_tokens + self.batch_tokens)

    def observed_tokens(self) -> float:
        return float(self.waiting_tokens + self.batch_tokens)  # prompts: nothing generated here yet

    # ---- events
    def enqueue(self, r: Request, t: float) -> list[Event]:
        r.prefill_inst = self
        self._seq += 1
        heapq.heappush(self.waiting, (self.policy.key(r, 0, t), self._seq, r))
        self.waiting_tokens += r.prompt
        return self.kick(t)

    def release(self, r: Request, t: float) -> list[Event]:
        """The request's prompt KV left this instance (pulled, or the request finished)."""
        self.kv_used -= r.prompt
        if self.waiting and not self.busy:
            return self.kick(t)
        return []

    def start(self, t: float) -> list[Event]:
        self.kick_pending = False
        if self.busy or not self.waiting:
            return []
        if self.policy.dynamic and t - self._rekeyed >= REFRESH_S:
            self._rekeyed = rekey(self.waiting, self.policy, t, prefill=True)
        waiting = self.waiting
        batch = self.batch
        tokens = 0
        while waiting:
            r = waiting[0][2]
            p = r.prompt
            if batch and tokens + p > self.max_tokens:
                break
            if self.kv_used + p > self.cap:
                break
            heapq.heappop(waiting)
            self.waiting_tokens -= p
            self.kv_used += p
            tokens += p
            r.t_prefill_start = t
            batch.append(r)
        if not batch:
            return []  # blocked on KV: a release() kicks us again
        self.batch_tokens = tokens
        self.busy = True
        self._started = t
        if self.kv_used > self.peak_kv:
            self.peak_kv = self.kv_used
        dt = self.profile.prefill_time([r.prompt for r in batch])
        return [(t + dt, PRIO[PREFILL_DONE], PREFILL_DONE, self)]

    def on_done(self, t: float) -> list[Event]:
        self.busy = False
        self.busy_time += t - self._started
        self.n_batches += 1
        self.tokens += self.batch_tokens
        batch, self.batch = self.batch, []
        self.batch_tokens = 0
        events: list[Event] = []
        for r in batch:
            r.t_first = t  # prefill emits the first output token
            r.gen = 1
            if r.output <= 1:
                self.kv_used -= r.prompt
                r.t_finish = t
                events.append(finished(r, t))
            else:
                events.append(handoff(r, t))  # its KV stays here until a decode instance pulls it
        events.extend(self.start(t))
        return events


class DecodeInstance(_Instance):
    """Continuous batching under a KV budget; in colocated mode it also prefills new requests."""

    def __init__(self, index: int, profile: LatencyProfile, policy: QueuePolicy, kv_capacity: int,
                 setup: DecodeSetup, *, check: bool = False, speed: float = 1.0) -> None:
        self.index = index
        self.speed = speed  # a step's compute time is divided by it (heterogeneous instances)
        self.profile = profile
        self.policy = policy
        self.cap = kv_capacity  # KV slots (tokens)
        self.max_batch = profile.max_batch
        self.max_prefill_tokens = profile.max_prefill_tokens
        self.colocated = setup.colocated
        self.swap = setup.swap
        self.kvb = profile.kv_bytes_per_token
        self.link_bw = setup.link_bw  # bytes/s
        self.link_latency = setup.link_latency  # s
        self.swap_bw = setup.swap_bw  # bytes/s
        self.setup = setup
        self.kv_rules = KvRules(setup.victim, setup.admission, kv_capacity, setup)
        self.check = check
        # state
        self.step = 0  # decode steps completed
        self.running: dict[int, Request] = {}
        self.n_run = 0
        self.ctx = 0  # KV slots held by running requests: sum(prompt + generated)
        self.kv_reserved = 0  # KV slots of admitted requests not running yet (transfer / prefill)
        self.n_reserved = 0
        self.reserved_pred = 0.0  # their predicted remaining tokens
        self.true_peak = 0  # sum of prompt + true output over running and reserved (admission true-peak)
        self.waiting: list[tuple[float, int, Request]] = []  # heap (key, seq, request)
        self.waiting_pred = 0.0  # predicted remaining tokens of queued requests
        self.waiting_kv = 0  # KV the queued requests need when they join (kv_need)
        self.ready: list[Request] = []  # KV arrived; join at the next step start
        self.milestones: list[tuple[int, int, int, Request, int, int]] = []  # (step, seq, kind, r, epoch, ver)
        self.pred_sum = 0.0  # sum over running requests still under their prediction of (pred - gen)
        self.pred_count = 0
        self.busy = False
        self.kick_pending = False
        self.link_free = 0.0  # time the ingress link is free again
        self._seq = 0
        self._step_batch = 0
        self._step_post: list[Request] = []
        self._preempted_in_step = False
        self._started = 0.0
        self._rekeyed = -math.inf
        self.preempt = policy.preempt  # policy-driven preemption (a waiting request beats a running one)
        self.gate: Any = None  # late binding: the pool's central queue (lenpred.sim.gate.Gate), set by it
        # statistics
        self.busy_time = 0.0
        self.batch_time = 0.0  # integral of batch size over time
        self.tokens = 0  # tokens generated by decode steps here
        self.n_steps = 0
        self.n_preempt = 0
        self.n_policy_preempt = 0  # of which policy-driven
        self.peak_kv = 0
        self.prefill_tokens = 0  # colocated prefill + recompute tokens

    # ---- load, as dispatchers see it
    def outstanding_requests(self) -> int:
        return len(self.waiting) + self.n_reserved + self.n_run

    def outstanding_tokens(self) -> float:
        return self.waiting_pred + self.reserved_pred + self.pred_sum

    def observed_tokens(self) -> float:
        """KV in use (prompt + generated of the running batch), in flight to here, and that the queue needs."""
        return float(self.ctx + self.kv_reserved + self.waiting_kv)

    # ---- helpers
    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def gen_of(self, r: Request) -> int:
        """Tokens generated so far by a running request."""
        return r.gen + (self.step - r.base_step)

    def _activate(self, r: Request, gen: int) -> None:
        rem = r.pred_cur - gen
        if rem > 0.0:
            r.active = True
            r.pred_version += 1
            self.pred_sum += rem
            self.pred_count += 1
            heapq.heappush(self.milestones, (self.step + math.ceil(rem), self._next_seq(), M_CROSS, r,
                                             r.epoch, r.pred_version))

    def _deactivate(self, r: Request, gen: int) -> None:
        if r.active:
            r.active = False
            self.pred_sum -= r.pred_cur - gen
            self.pred_count -= 1

    def _schedule_repred(self, r: Request) -> None:
        if r.next_repred < len(r.repred):
            g = r.repred[r.next_repred][0]
            heapq.heappush(self.milestones, (r.base_step + (g - r.gen), self._next_seq(), M_REPRED, r,
                                             r.epoch, 0))

    def _join(self, r: Request, t: float) -> None:
        """``r`` enters the running batch at ``t``, holding prompt + r.gen KV slots."""
        if r.t_left == r.t_left:  # rejoining after a preemption
            r.waited += t - r.t_left
            r.t_left = NAN
        r.base_step = self.step
        r.decode_inst = self
        self.running[r.rid] = r
        self.n_run += 1
        self.ctx += r.prompt + r.gen
        self.true_peak += r.prompt + r.output
        heapq.heappush(self.milestones, (self.step + (r.output - r.gen), self._next_seq(), M_FINISH, r,
                                         r.epoch, 0))
        if r.repred:
            r.apply_repredictions(r.gen)
            self._schedule_repred(r)
        self._activate(r, r.gen)

    def _remove(self, r: Request, gen: int) -> None:
        del self.running[r.rid]
        self.n_run -= 1
        self.ctx -= r.prompt + gen
        self.true_peak -= r.prompt + r.output
        self._deactivate(r, gen)
        r.epoch += 1  # its pending milestones are now stale

    def _reserve(self, r: Request) -> None:
        self.kv_reserved += kv_need(r)
        self.n_reserved += 1
        self.reserved_pred += r.q_rem
        self.true_peak += r.prompt + r.output

    def _unreserve(self, r: Request) -> None:
        self.kv_reserved -= kv_need(r)
        self.n_reserved -= 1
        self.reserved_pred -= r.q_rem
        self.true_peak -= r.prompt + r.output

    # ---- events
    def take(self, r: Request, t: float) -> None:
        """Put ``r`` in this instance's queue (no kick): what :meth:`enqueue` and a late-binding pull do."""
        r.decode_inst = self
        r.q_rem = r.pred_remaining(r.gen)
        heapq.heappush(self.waiting, (self.policy.key(r, r.gen, t), self._next_seq(), r))
        self.waiting_pred += r.q_rem
        self.waiting_kv += kv_need(r)

    def enqueue(self, r: Request, t: float) -> list[Event]:
        """Queue a request: fresh from prefill (NEED_TRANSFER), new in colocated mode
        (NEED_PREFILL), or preempted (NEED_RECOMPUTE / NEED_SWAP_IN)."""
        self.take(r, t)
        if self.busy:
            if r.need != NEED_TRANSFER or self._preempted_in_step:
                return []  # considered at the next step start
            # Mid-step admission: KV and slots only change at step boundaries, so what fits now
            # fits then; starting the transfer now lets the request join at the next boundary.
            events: list[Event] = []
            self._admit(t, events, [], [], transfers_only=True)
            kv = self.ctx + self._step_batch + self.kv_reserved
            if kv > self.peak_kv:
                self.peak_kv = kv
            return events
        return self.kick(t)

    def on_transfer_done(self, r: Request, t: float) -> list[Event]:
        self.ready.append(r)
        return self.kick(t)

    def start_step(self, t: float) -> list[Event]:
        self.kick_pending = False
        if self.busy:
            return []
        events: list[Event] = []
        extra = 0.0  # seconds of swap traffic in this step
        prefill_lens: list[int] = []  # prefilled in this step (colocated new, recompute)
        post: list[Request] = []  # colocated new requests: join at the end of this step
        # 1. transfers that landed
        if self.ready:
            for r in self.ready:
                self._unreserve(r)
                self._join(r, t)
            self.ready.clear()
        # 2. make room for one more token per running request
        cap = self.cap
        preempted = False
        while self.n_run and self.ctx + self.kv_reserved + self.n_run > cap:
            extra += self._preempt_one(t)
            preempted = True
        self._preempted_in_step = preempted
        if self.gate is not None:  # late binding: fill free slots from the pool's queue first
            self.gate.pull(self, t)
        if self.waiting and not preempted:
            if self.policy.dynamic and t - self._rekeyed >= REFRESH_S:
                self._rekeyed = rekey(self.waiting, self.policy, t)
            if self.preempt:
                extra += self._policy_preempt(t)
        # 3. admit queued requests in policy order (not after a preemption, as vLLM)
        if self.waiting and not preempted:
            extra += self._admit(t, events, prefill_lens, post)
        batch = self.n_run
        if batch == 0 and not prefill_lens and extra == 0.0:
            return events  # idle until a kick
        dt = extra  # compute time is divided by the speed (x / 1.0 == x exactly: equal instances are unchanged)
        if prefill_lens:
            dt += self.profile.prefill_time(prefill_lens) / self.speed
            self.prefill_tokens += sum(prefill_lens)
        if batch:
            dt += self.profile.decode_time(batch, self.ctx) / self.speed
        kv_after = self.ctx + batch + self.kv_reserved
        if kv_after > self.peak_kv:
            self.peak_kv = kv_after
        self.busy = True
        self._started = t
        self._step_batch = batch
        self._step_post = post
        events.append((t + dt, PRIO[STEP_DONE], STEP_DONE, self))
        return events

    def _admit(self, t: float, events: list[Event], prefill_lens: list[int], post: list[Request],
               transfers_only: bool = False) -> float:
        """Admit queued requests in policy order while they fit; ``transfers_only`` (mid-step)
        stops at the first one that would have to join or be prefilled in a step."""
        waiting = self.waiting
        extra = 0.0
        slots = self.n_run + self.n_reserved
        pre_tokens = 0
        while waiting and slots < self.max_batch:
            r = waiting[0][2]
            if transfers_only and r.need != NEED_TRANSFER:
                break
            need = kv_need(r)
            joins_now = r.need in (NEED_RECOMPUTE, NEED_SWAP_IN)
            used = self.ctx + self.kv_reserved + self.n_run + need + (1 if joins_now else 0)
            if not self._admits(r, used, slots == 0 and self.kv_reserved == 0):
                break
            if r.need in (NEED_PREFILL, NEED_RECOMPUTE):
                n = r.prompt if r.need == NEED_PREFILL else need
                if pre_tokens and pre_tokens + n > self.max_prefill_tokens:
                    break
                pre_tokens += n
                prefill_lens.append(n)
            heapq.heappop(waiting)
            self.waiting_pred -= r.q_rem
            self.waiting_kv -= need
            slots += 1
            kind = r.need
            r.need = 0
            if kind == NEED_TRANSFER:
                self._reserve(r)
                r.t_decode_admit = t
                start = t if t > self.link_free else self.link_free
                self.link_free = start + r.prompt * self.kvb / self.link_bw
                events.append((self.link_free + self.link_latency, PRIO[TRANSFER_DONE], TRANSFER_DONE, r))
            elif kind == NEED_PREFILL:
                self._reserve(r)
                r.t_prefill_start = t
                post.append(r)
            elif kind == NEED_RECOMPUTE:
                self._join(r, t)
            elif kind == NEED_SWAP_IN:
                extra += need * self.kvb / self.swap_bw
                self._join(r, t)
            else:  # pragma: no cover - engine bug
                raise AssertionError(f"request {r.rid} queued with need={kind}")
        return extra

    def on_step_done(self, t: float) -> list[Event]:
        batch = self._step_batch
        dt = t - self._started
        self.busy = False
        self.busy_time += dt
        self.batch_time += batch * dt
        self.n_steps += 1
        self.tokens += batch
        self.step += 1
        self.ctx += batch
        self.pred_sum -= self.pred_count
        step = self.step
        ms = self.milestones
        events: list[Event] = []
        while ms and ms[0][0] <= step:
            _, _, kind, r, epoch, ver = heapq.heappop(ms)
            if r.epoch != epoch:
                continue  # left the batch since this was scheduled
            if kind == M_FINISH:
                self._remove(r, r.output)
                r.gen = r.output
                r.t_finish = t
                events.append(finished(r, t))
            elif kind == M_CROSS:
                if r.active and ver == r.pred_version:
                    self._deactivate(r, self.gen_of(r))
            else:  # M_REPRED
                gen = self.gen_of(r)
                self._deactivate(r, gen)
                r.apply_repredictions(gen)
                self._activate(r, gen)
                self._schedule_repred(r)
        for r in self._step_post:  # colocated: prefilled in this step, first token now
            self._unreserve(r)
            r.gen = 1
            r.t_first = t
            if r.output <= 1:
                r.t_finish = t
                events.append(finished(r, t))
            else:
                self._join(r, t)
        self._step_post = []
        if self.check:
            self.check_invariants()
        events.extend(self.start_step(t))
        return events

    # ---- KV preemption and admission (the rules' choices: lenpred.sim.preemption.KvRules)
    def set_kv_rules(self, victim: str, admission: str) -> None:
        """Replace the KV victim and admission rules (values of ``ArmPolicy.victim`` / ``admission``)."""
        self.kv_rules = KvRules(victim, admission, self.cap, self.setup)

    def _admits(self, r: Request, used: int, empty: bool) -> bool:
        return self.kv_rules.admits(self, r, used, empty)

    def _horizon_peak(self, r: Request, truth: bool) -> float:
        return self.kv_rules.horizon_peak(self, r, truth)

    def _preempt_one(self, t: float) -> float:
        """Preempt the running request the victim rule names; returns the swap-out time it costs."""
        return self._evict(self.kv_rules.pick_victim(self, t), t)

    def _evict(self, victim: Request, t: float) -> float:
        """Preempt ``victim`` (recompute or swap, as the cluster says); returns the swap-out time."""
        victim.t_left = t
        gen = self.gen_of(victim)
        self._remove(victim, gen)
        victim.gen = gen
        victim.n_preempt += 1
        self.n_preempt += 1
        victim.q_rem = victim.pred_remaining(gen)
        victim.need = NEED_SWAP_IN if self.swap else NEED_RECOMPUTE
        heapq.heappush(self.waiting, (self.policy.key(victim, gen, t), self._next_seq(), victim))
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

    def check_invariants(self) -> None:
        """Recompute the incremental sums from scratch (tests / debugging; O(batch))."""
        ctx = sum(r.prompt + self.gen_of(r) for r in self.running.values())
        assert ctx == self.ctx, (ctx, self.ctx)
        assert self.n_run == len(self.running)
        peak_reserved = self.true_peak - sum(r.prompt + r.output for r in self.running.values())
        assert peak_reserved >= self.kv_reserved and (self.n_reserved or peak_reserved == 0), peak_reserved
        assert self.ctx + self.kv_reserved <= self.cap, (self.ctx, self.kv_reserved, self.cap)
        act = [r for r in self.running.values() if r.active]
        assert len(act) == self.pred_count
        ps = sum(r.pred_cur - self.gen_of(r) for r in act)
        assert ps == self.pred_sum, (ps, self.pred_sum)  # exact: predictions lie on request.PRED_GRID
        wp = sum(r.q_rem for _, _, r in self.waiting)
        assert wp == self.waiting_pred, (wp, self.waiting_pred)
        assert self.waiting_kv == sum(kv_need(r) for _, _, r in self.waiting), self.waiting_kv
        assert self.n_reserved or self.reserved_pred == 0.0, self.reserved_pred
        for r in self.running.values():
            g = self.gen_of(r)
            assert 0 < g < r.output, (r.rid, g, r.output)
            # a request is counted exactly while it is under its (latest) prediction
            assert r.active == (r.pred_cur - g > 0), (r.rid, r.active, r.pred_cur, g)


def rekey(waiting: list[tuple[float, int, Request]], policy: QueuePolicy, t: float, prefill: bool = False) -> float:
    """Recompute a dynamic policy's keys of a queue at time ``t`` (in place); returns ``t``."""
    key = policy.key
    waiting[:] = [(key(r, 0 if prefill else r.gen, t), seq, r) for _, seq, r in waiting]
    heapq.heapify(waiting)
    return t
