"""The backends' live state: requests in flight, predicted outstanding tokens, health, model lists.

A :class:`Backend` satisfies the dispatchers' ``Loaded`` protocol (``outstanding_requests()``,
``outstanding_tokens()``), so the router picks a backend with the very dispatchers the simulator
uses (:func:`lenpred.sched.dispatch.make_dispatcher`): one implementation of round robin, least
requests, least predicted tokens and power of two choices. Both answers are O(1): a backend keeps a
running total of its flights' expected remaining tokens, changed by each flight's admission
(:meth:`Backend.admit`), progress (:meth:`Backend.progress`) and end (:meth:`Backend.finish`: completed,
failed, or the client gone), never recomputed by summing.

**Predicted outstanding tokens** of a backend = the sum over its requests in flight of the expected
remaining output, drawn down as the response streams. A request predicted at ``mu`` tokens (sd
``sigma``) that has produced ``t`` tokens is expected to produce ``E[L - t | L > t]`` more under a
normal ``N(mu, sigma)``: about ``mu - t`` early on, and never zero while it is still running (the
prediction is conditioned on survival, not merely subtracted, as DESIGN.md asks).

:class:`Pool` hands out slots: a backend with a free slot (``max_outstanding``) by the policy, or a
place in a bounded wait queue ordered by the request's priority key (the smallest waits least).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from lenpred.route.config import BackendConfig, HealthConfig
from lenpred.sched.dispatch import make_dispatcher

__all__ = ["Backend", "Flight", "Pool", "QueueFull", "QueueTimeout", "expected_remaining"]

log = logging.getLogger("lenpred.route")
_SQRT2 = math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


def expected_remaining(mu: float, sigma: float, t: float) -> float:
    """``E[L - t | L > t]`` for ``L ~ N(mu, sigma)``: the mean residual life of a normal length."""
    if sigma <= 0:
        return max(mu - t, 1.0)
    z = (t - mu) / sigma
    if z < -4.0:  # survival ~ 1: the plain difference (and no erf on the hot path)
        return mu - t
    surv = 0.5 * math.erfc(z / _SQRT2)
    if surv < 1e-12:  # far past the prediction: the normal tail's asymptote, sigma / z
        return max(sigma / z, 1.0)
    pdf = _INV_SQRT2PI * math.exp(-0.5 * z * z)
    return max(mu - t + sigma * pdf / surv, 1.0)


@dataclass(slots=True)
class Flight:
    """One request in flight on a backend: its prediction (all sequences together) and progress."""

    rid: str
    tokens: float  # predicted output tokens, all sequences of the request
    spread: float
    key: float  # priority key (smaller first)
    gen: int = 0  # tokens streamed so far (events, or usage when the stream carries it)
    prefill: float = 0.0  # prompt work counted until the first token (prompt tokens x prompt_weight)
    counted: float = 0.0  # its share of its backend's running total: remaining() when last counted
    prompt: float = 0.0  # prompt tokens (all sequences; estimated from characters where not tokenized)

    def remaining(self) -> float:
        r = expected_remaining(self.tokens, self.spread, float(self.gen))
        return r + self.prefill if self.gen == 0 else r


class Backend:
    """One backend as the router sees it."""

    def __init__(self, cfg: BackendConfig, index: int) -> None:
        self.cfg, self.index = cfg, index
        self.label, self.url = cfg.label, cfg.base
        self.max_outstanding = cfg.max_outstanding
        self.healthy = True
        self.models: dict[str, dict[str, Any]] | None = (
            {m: {"id": m, "object": "model", "owned_by": self.label} for m in cfg.models} if cfg.models else None
        )
        self.priority_on = cfg.priority != "off"
        self.flights: dict[str, Flight] = {}  # changed only by admit / finish (they keep the total)
        self._tokens = 0.0  # sum of the flights' counted remaining tokens
        self.clock = time.monotonic  # the clock of busy_area (a test may set its own)
        self._area = 0.0  # integral of len(flights) over time up to _t_area (request-seconds)
        self._t_area = self.clock()
        self.fails = 0
        self.oks = 0
        self.last_error: str | None = None
        self.last_progress = -math.inf  # time.monotonic() of the last bytes a request got from it
        self.n_done = 0

    # -- the dispatchers' Loaded protocol (lenpred.sched.dispatch)
    def outstanding_requests(self) -> int:
        return len(self.flights)

    def outstanding_tokens(self) -> float:
        return self._tokens

    def observed_tokens(self) -> float:
        """Prompt + streamed tokens of the requests in flight: what the router counts, no prediction."""
        return sum(f.prompt + f.gen for f in self.flights.values())

    def busy_area(self, now: float) -> float:
        """The integral of the number of requests in flight here from its start to ``now`` (request-seconds):
        the difference of two readings over their time apart is the mean number in flight between them."""
        return self._area + len(self.flights) * (now - self._t_area)

    def _tick(self) -> None:
        """Bring :meth:`busy_area`'s integral up to now, before the number in flight changes."""
        now = self.clock()
        self._area += len(self.flights) * (now - self._t_area)
        self._t_area = now

    # -- the running total: every change of a flight on this backend goes through one of these
    def admit(self, flight: Flight) -> None:
        """``flight`` runs here from now on (a rid registered twice is counted once, as its latest flight)."""
        self.finish(flight.rid)
        self._tick()
        flight.counted = flight.remaining()
        self.flights[flight.rid] = flight
        self._tokens += flight.counted

    def progress(self, flight: Flight, gen: int) -> None:
        """``flight`` has streamed ``gen`` tokens: its expected remaining output is drawn down."""
        if gen == flight.gen:
            return
        flight.gen = gen
        if self.flights.get(flight.rid) is flight:
            left = flight.remaining()
            self._tokens += left - flight.counted
            flight.counted = left

    def finish(self, rid: str) -> bool:
        """The flight ``rid`` ended here (done, failed, or its client gone); False when it was not here."""
        if rid not in self.flights:
            return False
        self._tick()
        f = self.flights.pop(rid)
        # the last one out leaves exactly 0 (no rounding left over from the additions)
        self._tokens = self._tokens - f.counted if self.flights else 0.0
        return True

    # -- state
    def serves(self, model: str) -> bool:
        return self.models is None or model in self.models

    def has_slot(self) -> bool:
        return len(self.flights) < self.max_outstanding

    def describe(self) -> dict[str, Any]:
        return {"name": self.label, "url": self.url, "healthy": self.healthy,
                "outstanding_requests": len(self.flights), "outstanding_tokens": round(self.outstanding_tokens(), 1),
                "priority": self.priority_on, "models": sorted(self.models) if self.models is not None else None,
                "last_error": self.last_error}

    def mark_down(self, reason: str) -> None:
        self.last_error = reason
        self.oks = 0
        if self.healthy:
            self.healthy = False
            log.warning("backend %s is out: %s", self.label, reason)

    def check_result(self, ok: bool, reason: str | None, health: HealthConfig, slow: bool = False) -> None:
        """Account for one health check. A check that only timed out (``slow``) does not count against a
        backend with requests in flight or that sent bytes just now: a server that serialises its requests
        (llama-cpp-python's /v1/models waits for the model) answers late while it is busy, and a dead one is
        noticed at once anyway (its open connections break, and a connection refused takes it out)."""
        recent = time.monotonic() - self.last_progress < health.interval_s + health.timeout_s
        if not ok and slow and (self.flights or recent):
            return
        if ok:
            self.fails, self.oks = 0, self.oks + 1
            if not self.healthy and self.oks >= health.recover_after:
                self.healthy = True
                self.last_error = None
                log.warning("backend %s is back", self.label)
        else:
            self.oks, self.fails = 0, self.fails + 1
            self.last_error = reason
            if self.healthy and self.fails >= health.fail_after:
                self.mark_down(reason or "health check failed")


class QueueFull(Exception):
    """Every backend for the model is at max_outstanding and the wait queue is full (HTTP 429)."""


class QueueTimeout(Exception):
    """A request waited limits.queue_timeout_s for a slot (HTTP 503)."""


@dataclass(order=True)
class _Waiter:
    key: float
    seq: int
    flight: Flight = field(compare=False)
    model: str = field(compare=False)
    exclude: frozenset[int] = field(compare=False)
    fut: asyncio.Future[Backend] = field(compare=False)


class Pool:
    """The backends, the dispatch policy over them, and the wait queue for slots."""

    def __init__(self, backends: list[BackendConfig] | tuple[BackendConfig, ...], policy: str, seed: int = 0,
                 max_queued: int = 1024) -> None:
        import numpy as np

        self.backends = [Backend(c, i) for i, c in enumerate(backends)]
        self.dispatcher = make_dispatcher(policy, rng=np.random.default_rng(seed))
        self.max_queued = max_queued
        self._waiters: list[_Waiter] = []
        self._seq = itertools.count()

    def known_models(self) -> dict[str, dict[str, Any]] | None:
        """Union of the backends' models (first backend's entry wins); None while any list is unknown."""
        out: dict[str, dict[str, Any]] = {}
        unknown = False
        for b in self.backends:
            if b.models is None:
                unknown = True
                continue
            for k, v in b.models.items():
                out.setdefault(k, v)
        return None if unknown else out

    def candidates(self, model: str, exclude: frozenset[int] = frozenset()) -> list[Backend]:
        return [b for b in self.backends if b.healthy and b.index not in exclude and b.serves(model)]

    def _pick(self, model: str, exclude: frozenset[int]) -> Backend | None:
        free = [b for b in self.candidates(model, exclude) if b.has_slot()]
        if not free:
            return None
        return free[self.dispatcher.choose(free)]  # the backends' load decides

    async def acquire(self, flight: Flight, model: str, exclude: frozenset[int], timeout_s: float) -> Backend | None:
        """A backend with a slot and the flight registered on it; None when no healthy backend serves the
        model; :class:`QueueFull` / :class:`QueueTimeout` when they are all busy."""
        if not self.candidates(model, exclude):
            return None
        b = None if self.n_waiting else self._pick(model, exclude)  # arrivals do not overtake waiters
        if b is not None:
            b.admit(flight)
            return b
        if self.n_waiting >= self.max_queued:
            raise QueueFull()
        fut: asyncio.Future[Backend] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, _Waiter(flight.key, next(self._seq), flight, model, exclude, fut))
        self._wake()  # a slot may be free for this model although others wait for theirs
        try:
            async with asyncio.timeout(timeout_s):
                return await fut
        except BaseException as e:  # timed out, or the client went away (cancelled)
            if fut.done() and not fut.cancelled():  # a slot came just as the wait ended: give it back
                self.release(fut.result(), flight.rid)
            fut.cancel()
            self._waiters = [w for w in self._waiters if not w.fut.done()]
            heapq.heapify(self._waiters)
            if isinstance(e, TimeoutError):
                raise QueueTimeout() from None
            raise

    def _wake(self) -> None:
        """Give free slots to waiters, smallest priority key first (a waiter whose model has no free slot
        does not block one behind it whose model has)."""
        if not self._waiters:
            return
        keep = []
        while self._waiters:
            w = heapq.heappop(self._waiters)
            if w.fut.done():
                continue
            b = self._pick(w.model, w.exclude)
            if b is None:
                keep.append(w)
                if not any(x.healthy and x.has_slot() for x in self.backends):
                    break
                continue
            b.admit(w.flight)  # registered now, so the next pick sees the load
            w.fut.set_result(b)
        for w in keep:
            heapq.heappush(self._waiters, w)

    def release(self, b: Backend, rid: str) -> None:
        if b.finish(rid):
            b.n_done += 1
        self._wake()

    @property
    def n_waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.fut.done())

    # -- health
    async def check(self, client: Any, b: Backend, health: HealthConfig) -> None:
        """One health check of ``b`` with ``client`` (a :class:`lenpred.route.upstream.Client`)."""
        from lenpred.route.upstream import UpstreamError

        slow = False
        try:
            async with asyncio.timeout(health.timeout_s + client.connect_s):
                r = await client.get(b.url + health.path, read_s=health.timeout_s)
                try:
                    raw = await r.read(4 << 20)
                finally:
                    r.close()
            ok = r.status == 200
            reason = None if ok else f"health check answered HTTP {r.status}"
            if ok and health.path.rstrip("/").endswith("/models") and not b.cfg.models:
                self._models_from(b, raw)
        except UpstreamError as e:  # any failure to answer is a failed check
            ok, reason = False, f"health check failed: {e}"
            slow = e.kind == "timeout"  # connected, but no answer in time: busy, perhaps, not dead
        except TimeoutError:
            ok, reason, slow = False, f"health check failed: no answer within {health.timeout_s:g} s", True
        except Exception as e:  # noqa: BLE001 - never let one odd answer end the health loop
            ok, reason = False, f"health check failed: {type(e).__name__}: {e}".rstrip(": ")
        b.check_result(ok, reason, health, slow)
        if ok:
            self._wake()

    @staticmethod
    def _models_from(b: Backend, raw: bytes) -> None:
        try:
            data = json.loads(raw)["data"]
            models = {str(m["id"]): m for m in data if isinstance(m, dict) and "id" in m}
        except (ValueError, KeyError, TypeError):
            return
        if models:
            b.models = models

    async def health_loop(self, client: Any, health: HealthConfig) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.gather(*(self.check(client, b, health) for b in self.backends))
            await asyncio.sleep(max(0.0, health.interval_s - (time.monotonic() - t0)))
