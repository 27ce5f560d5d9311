"""The discrete-event simulator: one heap of events keyed ``(time, priority, seq)``, owned by the
simulator object with its own counter (no class-level state), and handlers that return new events.

Events (:mod:`lenpred.sim.events`): a request arrives; a prefill batch ends; a decode step ends; a
KV transfer lands; an idle instance is kicked. There is one event per batch step, never one per
token. Instances report what the simulator must act on as notices in the lists they return (a
request finished; a prefilled request needs a decode instance) instead of calling back into it.

Usage::

    sim = Simulator(requests, ClusterConfig(n_prefill=4, n_decode=8), PolicyConfig(queue="sjf").policy)
    result = sim.run()          # a SimResult: per-request times + per-instance statistics
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lenpred.errors import DataError, LenpredError
from lenpred.sched.boost import BoostPolicy, Calibration
from lenpred.sched.dispatch import make_dispatcher
from lenpred.sim.arm import ArmPolicy, policies_for
from lenpred.sim.config import ClusterConfig
from lenpred.sim.events import (
    ARRIVAL,
    FINISHED,
    HANDOFF,
    KICK,
    NOTICE,
    PREFILL_DONE,
    PRIO,
    STEP_DONE,
    TRANSFER_DONE,
    Event,
)
from lenpred.sim.gate import Gate
from lenpred.sim.instances import DecodeInstance, PrefillInstance
from lenpred.sim.preemption import DecodeSetup
from lenpred.sim.profiles import LatencyProfile, get_profile
from lenpred.sim.request import NEED_PREFILL, NEED_TRANSFER, Request


def calibrate_boosts(pols: Sequence[Any], requests: Sequence[Request], profile: LatencyProfile, n_dec: int) -> None:
    """Give the boost policies (:mod:`lenpred.sched.boost`) the arrival rate per decode instance measured
    over the requests, the workload's true lengths (its unconditional size distribution) and the
    profile's seconds per token of a full batch at the workload's mean context (prompt + output / 2)."""
    boosts = [p for p in pols if isinstance(p, BoostPolicy)]
    if not boosts or not requests:
        return
    out = np.array([r.output for r in requests], dtype=np.float64)
    ctx = float(np.mean([r.prompt for r in requests])) + float(out.mean()) / 2
    b = profile.max_batch
    cal = Calibration.from_requests([r.arrival for r in requests], out, n_dec,
                                    profile.decode_time(b, int(b * ctx)) / b)
    for p in boosts:
        p.calibrate(cal)


class SimulationError(LenpredError):
    """The simulation ended in an inconsistent state (a bug in the engine, not in the input)."""


@dataclass
class SimResult:
    """Per-request outcomes (arrays aligned by request, in arrival order) and per-instance stats.
    Times in seconds, lengths in tokens; NaN where a stage never happened (rejected requests)."""

    rid: np.ndarray
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    pred: np.ndarray
    t_prefill_start: np.ndarray
    t_first: np.ndarray
    t_decode_admit: np.ndarray
    t_finish: np.ndarray
    n_preempt: np.ndarray
    rejected: np.ndarray  # bool
    mode: str
    instances: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    n_events: int = 0
    wall_s: float = 0.0
    kv_capacity: int = 0
    waited: np.ndarray | None = None  # (n,) seconds spent preempted, waiting to rejoin a batch

    @property
    def n(self) -> int:
        return int(self.rid.size)

    def frame(self) -> Any:
        """The per-request table as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame({
            "rid": self.rid, "arrival_s": self.arrival, "prompt_tokens": self.prompt,
            "output_tokens": self.output, "predicted_tokens": self.pred,
            "prefill_start_s": self.t_prefill_start, "first_token_s": self.t_first,
            "decode_admit_s": self.t_decode_admit, "finish_s": self.t_finish,
            "preemptions": self.n_preempt, "rejected": self.rejected,
        })


def validate_requests(requests: Sequence[Request]) -> None:
    """Clear errors for requests no simulation can serve as given."""
    if not requests:
        raise DataError("no requests to simulate", "give the workload at least one request")
    bad_prompt = [r.rid for r in requests if r.prompt <= 0]
    bad_output = [r.rid for r in requests if r.output <= 0]
    bad_arrival = [r.rid for r in requests if not math.isfinite(r.arrival) or r.arrival < 0]
    bad_pred = [r.rid for r in requests if not math.isfinite(r.pred) or r.pred < 0]
    for what, ids, fix in (
        ("prompt length <= 0", bad_prompt, "every request needs at least one prompt token"),
        ("output length <= 0", bad_output, "every request generates at least one token; drop empty answers"),
        ("arrival time negative or not finite", bad_arrival, "arrival times are seconds >= 0"),
        ("predicted length negative or not finite", bad_pred, "clip predictions to >= 0 before simulating"),
    ):
        if ids:
            raise DataError(f"{len(ids)} request(s) with {what} (e.g. ids {ids[:5]})", fix)


class Simulator:
    """Prefill/decode (or colocated) serving of one request list under one arm's policy (its queue
    policies, dispatchers and KV rules; the arm's name and predictions are the sweep's business)."""

    def __init__(
        self,
        requests: Sequence[Request],
        cluster: ClusterConfig | None = None,
        policy: ArmPolicy | None = None,
        *,
        profile: LatencyProfile | None = None,
        seed: int = 0,
        check_invariants: bool = False,
    ) -> None:
        cluster = cluster or ClusterConfig()
        arm = policy or ArmPolicy()
        validate_requests(requests)
        base = profile if profile is not None else get_profile(cluster.profile)
        self.profile = base.with_overrides(
            kv_capacity_tokens=cluster.kv_capacity_tokens, max_batch=cluster.max_batch,
            max_prefill_tokens=cluster.max_prefill_tokens,
        )
        self.cluster = cluster
        self.policy = arm
        self.requests = sorted(requests, key=lambda r: (r.arrival, r.rid))
        for r in self.requests:
            r.reset()
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._counter = itertools.count()
        self.now = 0.0
        self.n_done = 0
        self.n_rejected = 0
        rng = np.random.default_rng(seed)
        d_rng, p_rng = rng.spawn(2)
        cap = self.profile.kv_capacity_tokens
        self.colocated = cluster.mode == "colocated"
        self.decode_dispatch = make_dispatcher(arm.dispatch, d_rng)
        self.prefill_dispatch = make_dispatcher(arm.prefill_dispatch or arm.dispatch, p_rng)
        qpol, ppol = policies_for(arm)  # this run's own pair: calibrate_boosts below changes boosts
        for pol in (qpol, ppol):
            if pol.needs_dist:
                missing = next((r.rid for r in self.requests if r.dist0 is None), None)
                if missing is not None:
                    raise DataError(
                        f"policy {pol.name!r} needs a predictive distribution for every request; request "
                        f"{missing} has none (no spread, q10/q50/q90 or dist_tokens in its predictions)",
                        "predict with a head that writes quantiles (lenpred predict), or pick a point policy")
        n_dec = cluster.n_instances if self.colocated else cluster.n_decode
        calibrate_boosts((qpol, ppol), self.requests, self.profile, n_dec)
        setup = DecodeSetup(colocated=self.colocated, swap=cluster.preemption == "swap", watermark=cluster.watermark,
                            link_bw=cluster.link_gbps * 1e9, link_latency=cluster.link_latency_s,
                            swap_bw=cluster.swap_gbps * 1e9, victim=arm.victim, admission=arm.admission,
                            kv_reserve=0.1 if arm.kv_reserve is None else arm.kv_reserve)
        speeds = cluster.speeds
        self.decode = [DecodeInstance(i, self.profile, qpol, cap, setup, check=check_invariants, speed=speeds[i])
                       for i in range(n_dec)]
        self.prefill = [] if self.colocated else [
            PrefillInstance(i, self.profile, ppol, cap) for i in range(cluster.n_prefill)
        ]
        # late binding: ready requests wait in one queue for the pool (lenpred.sim.gate)
        self.gate = None if arm.max_outstanding is None else Gate(self.decode, self.decode_dispatch, qpol,
                                                                  arm.max_outstanding)
        self._next_arrival = 0

    # ---- heap
    def _schedule(self, events: list[Event]) -> None:
        """Push timed events in the order given; act on notices where they stand in the list (the
        events a notice produces take its place, so ties keep the order the handler meant)."""
        heap = self._heap
        counter = self._counter
        for ev in events:
            kind = ev[2]
            if kind >= NOTICE:
                self._schedule(self._on_notice(kind, ev[3], ev[0]))
            else:
                heapq.heappush(heap, (ev[0], ev[1], next(counter), kind, ev[3]))

    # ---- notices from instances
    def _on_notice(self, kind: int, r: Request, t: float) -> list[Event]:
        if kind == FINISHED:
            self.n_done += 1
            return []
        if kind == HANDOFF:  # a prefilled request goes to the decode instance the dispatcher picks
            if self.gate is not None:
                return self.gate.offer(r, NEED_TRANSFER, t)
            inst = self.decode[self.decode_dispatch.choose(self.decode, r)]
            r.need = NEED_TRANSFER
            return inst.enqueue(r, t)
        raise SimulationError(f"unknown notice kind {kind}")  # pragma: no cover

    # ---- handlers
    def _fits(self, r: Request) -> bool:
        # A request whose prompt + output exceeds one instance's KV can never finish: reject it at
        # arrival (a real server rejects prompt + max_tokens > its capacity the same way).
        return r.prompt + r.output <= self.profile.kv_capacity_tokens

    def _on_arrival(self, r: Request, t: float) -> list[Event]:
        events: list[Event] = []
        self._next_arrival += 1
        if self._next_arrival < len(self.requests):
            nxt = self.requests[self._next_arrival]
            events.append((nxt.arrival, PRIO[ARRIVAL], ARRIVAL, nxt))
        if not self._fits(r):
            r.rejected = True
            self.n_rejected += 1
            return events
        if self.colocated and self.gate is not None:
            events.extend(self.gate.offer(r, NEED_PREFILL, t))
        elif self.colocated:
            inst = self.decode[self.decode_dispatch.choose(self.decode, r)]
            r.need = NEED_PREFILL
            events.extend(inst.enqueue(r, t))
        else:
            pinst = self.prefill[self.prefill_dispatch.choose(self.prefill, r)]
            events.extend(pinst.enqueue(r, t))
        return events

    def _on_transfer_done(self, r: Request, t: float) -> list[Event]:
        events = r.prefill_inst.release(r, t)
        events.extend(r.decode_inst.on_transfer_done(r, t))
        return events

    def run(self) -> SimResult:
        """Simulate until every request has finished or been rejected."""
        t0 = time.perf_counter()
        first = self.requests[0]
        self._schedule([(first.arrival, PRIO[ARRIVAL], ARRIVAL, first)])
        heap = self._heap
        counter = self._counter
        pop = heapq.heappop
        push = heapq.heappush
        schedule = self._schedule
        n_events = 0
        on_arrival = self._on_arrival
        on_transfer = self._on_transfer_done
        while heap:
            t, _, _, kind, obj = pop(heap)
            self.now = t
            n_events += 1
            if kind == STEP_DONE:
                new = obj.on_step_done(t)
            elif kind == ARRIVAL:
                new = on_arrival(obj, t)
            elif kind == TRANSFER_DONE:
                new = on_transfer(obj, t)
            elif kind == PREFILL_DONE:
                new = obj.on_done(t)
            elif kind == KICK:
                new = obj.start_step(t) if isinstance(obj, DecodeInstance) else obj.start(t)
            else:  # pragma: no cover
                raise SimulationError(f"unknown event kind {kind}")
            for ev in new:
                if ev[2] >= NOTICE:  # rare next to timed events: handled out of the hot loop
                    schedule([ev])
                else:
                    push(heap, (ev[0], ev[1], next(counter), ev[2], ev[3]))
        if self.n_done + self.n_rejected != len(self.requests):
            stuck = [r.rid for r in self.requests if not r.rejected and not math.isfinite(r.t_finish)]
            raise SimulationError(f"{len(stuck)} request(s) never finished (e.g. {stuck[:5]})")
        return self._result(n_events, time.perf_counter() - t0)

    def _result(self, n_events: int, wall: float) -> SimResult:
        rs = self.requests
        f = np.fromiter
        n = len(rs)
        inst: dict[str, list[dict[str, Any]]] = {
            "decode": [
                {"index": d.index, "busy_s": d.busy_time, "batch_time": d.batch_time, "tokens": d.tokens,
                 "steps": d.n_steps, "preemptions": d.n_preempt, "policy_preemptions": d.n_policy_preempt,
                 "peak_kv": d.peak_kv,
                 "prefill_tokens": d.prefill_tokens}
                for d in self.decode
            ],
            "prefill": [
                {"index": p.index, "busy_s": p.busy_time, "batches": p.n_batches, "tokens": p.tokens,
                 "peak_kv": p.peak_kv}
                for p in self.prefill
            ],
        }
        return SimResult(
            rid=f((r.rid for r in rs), dtype=np.int64, count=n),
            arrival=f((r.arrival for r in rs), dtype=np.float64, count=n),
            prompt=f((r.prompt for r in rs), dtype=np.int64, count=n),
            output=f((r.output for r in rs), dtype=np.int64, count=n),
            pred=f((r.pred for r in rs), dtype=np.float64, count=n),
            t_prefill_start=f((r.t_prefill_start for r in rs), dtype=np.float64, count=n),
            t_first=f((r.t_first for r in rs), dtype=np.float64, count=n),
            t_decode_admit=f((r.t_decode_admit for r in rs), dtype=np.float64, count=n),
            t_finish=f((r.t_finish for r in rs), dtype=np.float64, count=n),
            n_preempt=f((r.n_preempt for r in rs), dtype=np.int64, count=n),
            rejected=f((r.rejected for r in rs), dtype=bool, count=n),
            mode=self.cluster.mode,
            instances=inst,
            n_events=n_events,
            wall_s=wall,
            kv_capacity=self.profile.kv_capacity_tokens,
            waited=f((r.waited for r in rs), dtype=np.float64, count=n),
        )


def simulate(
    requests: Sequence[Request],
    cluster: ClusterConfig | None = None,
    policy: ArmPolicy | None = None,
    **kw: Any,
) -> SimResult:
    """Convenience: ``Simulator(requests, cluster, policy, **kw).run()``."""
    return Simulator(requests, cluster, policy, **kw).run()
