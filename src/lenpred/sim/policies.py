"""Scheduling policies: queue order at an instance, and dispatch of a request to an instance.

A policy is a small class with one hook. Predictions reach it only as data on the request
(``pred``, ``spread``, re-predictions via ``pred_remaining``); no policy imports a predictor.

Queue policies return a key, smaller = served first. Optional aging (``aging`` in tokens per
second for size-based policies) protects long requests from starving: priority at time ``now``
is ``base - aging * (now - arrival)``, and since ``now`` is the same for every request compared,
the order equals that of the *static* key ``base + aging * arrival``. So a queue is a plain heap.
The request a decode instance preempts first is the one with the *largest* key.

Dispatchers pick one instance among a pool from the load each instance reports:
``outstanding_requests()`` and ``outstanding_tokens()`` (predicted remaining output tokens on a
decode instance, prompt tokens on a prefill instance).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

import numpy as np

from lenpred.errors import ConfigError
from lenpred.registry import Registry
from lenpred.sim.request import Request


class QueuePolicy:
    """Base: subclasses define :meth:`base` (the size/time a request is ordered by)."""

    name: ClassVar[str] = "?"

    def __init__(self, aging: float = 0.0, quantile_z: float = 0.0) -> None:
        if aging < 0:
            raise ConfigError(f"aging must be >= 0, got {aging}")
        self.aging = float(aging)
        self.quantile_z = float(quantile_z)

    def base(self, req: Request, gen: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def key(self, req: Request, gen: int) -> float:
        """Static priority key for ``req`` having generated ``gen`` tokens. Smaller runs first."""
        return self.base(req, gen) + self.aging * req.arrival


QUEUE_POLICIES: Registry[type[QueuePolicy]] = Registry("queue policy")


@QUEUE_POLICIES.register("fcfs")
class FCFS(QueuePolicy):
    """First come, first served (aging has no effect)."""

    name = "fcfs"

    def base(self, req: Request, gen: int) -> float:
        return req.arrival

    def key(self, req: Request, gen: int) -> float:
        return req.arrival


@QUEUE_POLICIES.register("sjf")
class ShortestPredictedJobFirst(QueuePolicy):
    """Shortest predicted job first: the prediction made at arrival (+ ``quantile_z`` spreads)."""

    name = "sjf"

    def base(self, req: Request, gen: int) -> float:
        if self.quantile_z and req.spread is not None:
            return req.pred + self.quantile_z * req.spread
        return req.pred


@QUEUE_POLICIES.register("srpt")
class ShortestPredictedRemaining(QueuePolicy):
    """Shortest predicted remaining tokens, using the latest re-prediction when there is one."""

    name = "srpt"

    def base(self, req: Request, gen: int) -> float:
        return req.pred_remaining(gen)


@QUEUE_POLICIES.register("oracle")
class OracleRemaining(QueuePolicy):
    """True remaining output tokens: the upper bound any predictor can reach."""

    name = "oracle"

    def base(self, req: Request, gen: int) -> float:
        return float(req.output - gen)


class Loaded(Protocol):
    """What a dispatcher may ask of an instance."""

    index: int

    def outstanding_requests(self) -> int: ...

    def outstanding_tokens(self) -> float: ...


class Dispatcher:
    """Base: :meth:`choose` returns the index of the instance in ``pool`` to send ``req`` to."""

    name: ClassVar[str] = "?"

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        self.rng = rng if rng is not None else np.random.default_rng(0)

    def choose(self, pool: Sequence[Loaded], req: Request) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


DISPATCHERS: Registry[type[Dispatcher]] = Registry("dispatcher")


@DISPATCHERS.register("round-robin")
class RoundRobin(Dispatcher):
    name = "round-robin"

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        super().__init__(rng)
        self._next = 0

    def choose(self, pool: Sequence[Loaded], req: Request) -> int:
        i = self._next % len(pool)
        self._next = i + 1
        return i


def _argmin(values: list[float]) -> int:
    # Ties go to the lowest index: deterministic.
    best = 0
    for i in range(1, len(values)):
        if values[i] < values[best]:
            best = i
    return best


@DISPATCHERS.register("least-requests")
class LeastOutstandingRequests(Dispatcher):
    name = "least-requests"

    def choose(self, pool: Sequence[Loaded], req: Request) -> int:
        return _argmin([float(p.outstanding_requests()) for p in pool])


@DISPATCHERS.register("least-predicted-tokens")
class LeastPredictedTokens(Dispatcher):
    """Least predicted outstanding tokens (queued + running), from the requests' predictions."""

    name = "least-predicted-tokens"

    def choose(self, pool: Sequence[Loaded], req: Request) -> int:
        return _argmin([p.outstanding_tokens() for p in pool])


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

    def choose(self, pool: Sequence[Loaded], req: Request) -> int:
        n = len(pool)
        if n == 1:
            return 0
        if not self._pairs or self._n != n:
            self._refill(n)
        i, j = self._pairs.pop()
        return i if pool[i].outstanding_requests() <= pool[j].outstanding_requests() else j


def make_queue_policy(name: str, aging: float = 0.0, quantile_z: float = 0.0) -> QueuePolicy:
    return QUEUE_POLICIES.get(name)(aging=aging, quantile_z=quantile_z)


def make_dispatcher(name: str, rng: np.random.Generator | None = None) -> Dispatcher:
    return DISPATCHERS.get(name)(rng=rng)
