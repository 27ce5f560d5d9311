"""Dispatchers: which instance of a pool a request goes to, from the load each instance reports.

An instance (the simulator's prefill or decode instance, the router's backend) reports
``outstanding_requests()``, ``outstanding_tokens()`` (predicted remaining output tokens on a decode
instance, prompt tokens on a prefill instance) and ``observed_tokens()`` (prompt + generated-so-far tokens
of what it holds: what a router or the server's KV gauge counts, no prediction): the :class:`Loaded`
protocol. Dispatchers: ``round-robin``, ``least-requests`` (join the shortest queue), ``power-of-two``
(the lighter of two instances drawn at random, from a seeded generator), ``least-observed-load`` (least
requests, ties by observed tokens), ``least-kv`` (least observed tokens: KV-usage routing), and the two that read predictions
(``needs_prediction``): ``least-predicted-tokens`` and the hybrid ``least-requests-predicted`` (least
requests, ties by predicted outstanding tokens).

Heterogeneous instances may carry a ``speed`` (default 1: an instance without the attribute, as the router's
backends, counts as 1; 2 = twice as fast): ``least-requests-per-speed`` (no prediction: (outstanding + 1) /
speed, the expected share of a slot's time) and ``least-predicted-time`` (predicted outstanding tokens /
speed, needs a prediction) read it.

The simulator and the router call the same method, ``choose(pool, req=None)``: the index in ``pool``
of the instance to send to. ``req`` (a :class:`~lenpred.sched.job.Job`) is there for a dispatcher that
would read the request; none of these does, and a caller without one passes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol, TypeVar

import numpy as np

from lenpred.registry import Registry
from lenpred.sched.job import Job

__all__ = [
    "DISPATCHERS", "Dispatcher", "LeastObservedLoad", "LeastObservedTokens", "LeastOutstandingRequests",
    "LeastPredictedTime", "LeastPredictedTokens", "LeastRequestsPerSpeed", "LeastRequestsPredictedTies", "Loaded",
    "PowerOfTwoChoices",
    "RoundRobin", "make_dispatcher",
]


class Loaded(Protocol):
    """What a dispatcher may ask of an instance (and, optionally, its ``speed``: :func:`speed_of`)."""

    index: int

    def outstanding_requests(self) -> int: ...

    def outstanding_tokens(self) -> float: ...

    def observed_tokens(self) -> float: ...


class Dispatcher:
    """Base: :meth:`choose` returns the index of the instance in ``pool`` to send ``req`` to (``req``
    may be None: the load of the instances decides)."""

    name: ClassVar[str] = "?"
    needs_prediction: ClassVar[bool] = False  # reads outstanding_tokens(), made of predicted lengths

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        self.rng = rng if rng is not None else np.random.default_rng(0)

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


DISPATCHERS: Registry[type[Dispatcher]] = Registry("dispatcher")


@DISPATCHERS.register("round-robin")
class RoundRobin(Dispatcher):
    name = "round-robin"

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        super().__init__(rng)
        self._next = 0

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:
        i = self._next % len(pool)
        self._next = i + 1
        return i


_Load = TypeVar("_Load", float, tuple[float, float])  # a load, or a load and its tie-break


def _argmin(values: Sequence[_Load]) -> int:
    # Ties go to the lowest index: deterministic. Tuples compare in order (a load, then its tie-break).
    best = 0
    for i in range(1, len(values)):
        if values[i] < values[best]:
            best = i
    return best


@DISPATCHERS.register("least-requests")
class LeastOutstandingRequests(Dispatcher):
    name = "least-requests"

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:
        return _argmin([float(p.outstanding_requests()) for p in pool])


@DISPATCHERS.register("least-predicted-tokens")
class LeastPredictedTokens(Dispatcher):
    """Least predicted outstanding tokens (queued + running), from the requests' predictions."""

    name = "least-predicted-tokens"
    needs_prediction = True

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:
        return _argmin([p.outstanding_tokens() for p in pool])


@DISPATCHERS.register("least-requests-predicted")
class LeastRequestsPredictedTies(Dispatcher):
    """The hybrid: fewest outstanding requests, as join-shortest-queue; among those, the fewest predicted
    outstanding tokens. A prediction can only break JSQ's ties, never overrule its count."""

    name = "least-requests-predicted"
    needs_prediction = True

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:
        return _argmin([(float(p.outstanding_requests()), p.outstanding_tokens()) for p in pool])


@DISPATCHERS.register("least-observed-load")
class LeastObservedLoad(Dispatcher):
    """Fewest outstanding requests; among those, the fewest observed tokens (prompt + generated so far of
    the requests it holds). Both are counts a router keeps without any prediction."""

    name = "least-observed-load"

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:
        return _argmin([(float(p.outstanding_requests()), p.observed_tokens()) for p in pool])


@DISPATCHERS.register("least-kv")
class LeastObservedTokens(Dispatcher):
    """Fewest observed tokens (prompt + generated so far of what it holds: its KV in use and queued), as
    KV-usage routing does (vLLM production-stack, llm-d's KV-utilisation scorer); no prediction."""

    name = "least-kv"

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:
        return _argmin([float(p.observed_tokens()) for p in pool])


def speed_of(inst: Loaded) -> float:
    """An instance's relative speed: its ``speed`` attribute, 1.0 when it has none."""
    return float(getattr(inst, "speed", 1.0))


@DISPATCHERS.register("least-requests-per-speed")
class LeastRequestsPerSpeed(Dispatcher):
    """Fewest (outstanding requests + 1) / speed: join the shortest queue, counted in the instance's own time
    (a twice-as-fast instance takes twice the requests). No prediction; equal speeds: least-requests."""

    name = "least-requests-per-speed"

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:
        return _argmin([(p.outstanding_requests() + 1.0) / speed_of(p) for p in pool])


@DISPATCHERS.register("least-predicted-time")
class LeastPredictedTime(Dispatcher):
    """Fewest predicted outstanding tokens / speed: the predicted time to drain the instance's work.
    Equal speeds: least-predicted-tokens."""

    name = "least-predicted-time"
    needs_prediction = True

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:
        return _argmin([p.outstanding_tokens() / speed_of(p) for p in pool])


@DISPATCHERS.register("power-of-two")
class PowerOfTwoChoices(Dispatcher):
    """Sample two instances at random, send to the one with fewer outstanding requests."""

    name = "power-of-two"
    _BLOCK = 4096  # random pairs drawn per numpy call (one call per request is slow)

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        super().__init__(rng)
        self._pairs: list[tuple[int, int]] = []
        self._n = 0

    def _refill(self, n: int) -> None:
        # two distinct instances: i uniform, j = i + 1 + k (mod n) with k uniform on [0, n - 2]
        i = self.rng.integers(0, n, self._BLOCK)
        j = (i + 1 + self.rng.integers(0, n - 1, self._BLOCK)) % n
        self._pairs = list(zip(i.tolist(), j.tolist(), strict=True))[::-1]
        self._n = n

    def choose(self, pool: Sequence[Loaded], req: Job | None = None) -> int:
        n = len(pool)
        if n == 1:
            return 0
        if not self._pairs or self._n != n:
            self._refill(n)
        i, j = self._pairs.pop()
        return i if pool[i].outstanding_requests() <= pool[j].outstanding_requests() else j


def make_dispatcher(name: str, rng: np.random.Generator | None = None) -> Dispatcher:
    return DISPATCHERS.get(name)(rng=rng)
