"""Queue policies: the order of a queue at an instance, and policy-driven preemption.

A policy is a small class with a few hooks. Predictions reach it only as data on the request
(:class:`lenpred.sched.job.Job`: ``pred``, ``spread``, re-predictions via ``pred_remaining``, the
predictive distribution ``dist``: :mod:`lenpred.sched.dists`); no policy imports a predictor. The same
objects order the simulator's queues (:mod:`lenpred.sim.instances`) and the router's
(:mod:`lenpred.route.priority`).

Hooks (smaller key = served first):

* ``key(req, gen, now)``: the order of a queue, ``gen`` = tokens the request has generated;
  ``now`` matters only to ``dynamic`` policies (HRRN), whose queues are re-keyed every
  :data:`REFRESH_S` seconds;
* ``victim_key(req, gen)``: the key of a *running* request when the instance looks for one to
  preempt (the largest goes first); ``-inf`` = not preemptible (TRAIL's limited preemption);
* ``beats(waiting_key, running_key)``: whether a waiting request may take a running one's place.
  ``preempt`` (per policy, overridable in the config) turns policy-driven preemption on: at every
  decode step a waiting request that finds no room and beats the worst running request preempts it,
  at the cost the cluster models for KV preemption (recompute or swap).

Policies: prediction-free ``fcfs``, ``las`` (least attained service, in quanta), ``mlfq``
(FastServe's skip-join multi-level feedback queue); point predictions ``sjf``, ``srpt``, ``oracle``,
``hrrn`` (highest response ratio next), ``trail`` (shortest predicted remaining with limited
preemption); distributions ``gittins`` (the Gittins rank of the predictive distribution conditioned
on what was generated) and ``risk`` (TIE's mean + beta * CVaR_alpha). Optional aging (``aging`` in
tokens per second, size-based policies) protects long requests from starving: priority at time
``now`` is ``base - aging * (now - arrival)``, and since ``now`` is the same for every request
compared, the order equals that of the *static* key ``base + aging * arrival``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable
from typing import ClassVar, TypeVar

import numpy as np

from lenpred.errors import ConfigError
from lenpred.registry import Registry
from lenpred.sched.job import Job, Running

REFRESH_S = 0.05  # seconds between re-keyings of a dynamic policy's queue
LEVEL = 1e8  # leveled keys: level * LEVEL + arrival (FCFS within a level)
NEVER = -math.inf  # victim key of a request that may not be preempted
R = TypeVar("R", bound=Running)  # the caller's request type, handed back by worst()

__all__ = [
    "FCFS", "LEVEL", "NEVER", "QUEUE_POLICIES", "REFRESH_S", "Gittins", "HighestResponseRatioNext",
    "LeastAttainedService", "LimitedPreemptionSPRPT", "OracleRemaining", "QueuePolicy", "RiskAverse",
    "ShortestPredictedJobFirst", "ShortestPredictedRemaining", "SkipJoinMLFQ", "make_queue_policy",
]


class QueuePolicy:
    """Base: subclasses define :meth:`base` (the size/time a request is ordered by).

    ``PARAMS`` maps each keyword a policy takes to its valid range ``(low, high, low_open)``;
    a keyword outside it, or one the policy does not take, is a one-line error.
    """

    name: ClassVar[str] = "?"
    preemptive: ClassVar[bool] = False  # policy-driven preemption by default
    needs_dist: ClassVar[bool] = False  # reads req.dist (a predictive distribution)
    dynamic: ClassVar[bool] = False  # key depends on the time: queues are re-keyed every REFRESH_S
    takes_aging: ClassVar[bool] = True
    PARAMS: ClassVar[dict[str, tuple[float, float, bool]]] = {}
    DEFAULTS: ClassVar[dict[str, float]] = {}

    def __init__(self, aging: float = 0.0, quantile_z: float = 0.0, preempt: bool | None = None,
                 **params: float) -> None:
        if not (math.isfinite(aging) and aging >= 0):
            raise ConfigError(f"policy {self.name!r}: aging must be >= 0 tokens per second, got {aging!r}",
                              "set aging to 0 (none) or a positive number")
        if aging and not self.takes_aging:
            raise ConfigError(f"policy {self.name!r} takes no aging (got {aging!r})",
                              "drop aging: this policy bounds waiting by itself")
        self.aging = float(aging)
        self.quantile_z = float(quantile_z)
        self.preempt = self.preemptive if preempt is None else bool(preempt)
        for k, v in params.items():
            if k not in self.PARAMS:
                took = ", ".join(sorted(self.PARAMS)) or "none"
                raise ConfigError(f"policy {self.name!r} takes no parameter {k!r}", f"its parameters: {took}")
            lo, hi, open_lo = self.PARAMS[k]
            ok = isinstance(v, int | float) and math.isfinite(v) and (v > lo if open_lo else v >= lo) and v <= hi
            if not ok:
                rng = f"{'(' if open_lo else '['}{lo:g}, {hi:g}{']' if math.isfinite(hi) else ')'}"
                raise ConfigError(f"policy {self.name!r}: {k} must be in {rng}, got {v!r}", f"set {k} to a number in {rng}")
        self.params = {**self.DEFAULTS, **{k: float(v) for k, v in params.items()}}

    def base(self, req: Job, gen: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def key(self, req: Job, gen: int, now: float = 0.0) -> float:
        """Priority key for ``req`` having generated ``gen`` tokens. Smaller runs first."""
        return self.base(req, gen) + self.aging * req.arrival

    def victim_key(self, req: Job, gen: int) -> float:
        """Key of a running request when choosing whom to preempt (largest first)."""
        return self.key(req, gen)

    def beats(self, waiting: float, running: float) -> bool:
        """Whether a waiting request with key ``waiting`` may preempt a running one with ``running``."""
        return waiting < running

    def worst(self, running: Iterable[R], step: int) -> tuple[R | None, float]:
        """The running request to preempt first (largest victim key; ties: the later-joined, as vLLM
        preempts the newest) and its key; ``step``: the instance's step count (gen = r.gen + step -
        r.base_step)."""
        vkey = self.victim_key
        victim: R | None = None
        worst = NEVER
        for r in running:
            k = vkey(r, r.gen + (step - r.base_step))
            if k >= worst:
                worst = k
                victim = r
        return victim, worst


QUEUE_POLICIES: Registry[type[QueuePolicy]] = Registry("queue policy")


@QUEUE_POLICIES.register("fcfs")
class FCFS(QueuePolicy):
    """First come, first served (takes no aging: arrival order is already the aged order)."""

    name = "fcfs"
    takes_aging = False

    def base(self, req: Job, gen: int) -> float:
        return req.arrival

    def key(self, req: Job, gen: int, now: float = 0.0) -> float:
        return req.arrival


class _Leveled(QueuePolicy):
    """Keys ``level * LEVEL + arrival``: FCFS within a level; only a lower level preempts."""

    takes_aging = False
    preemptive = True

    def level(self, req: Job, gen: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def key(self, req: Job, gen: int, now: float = 0.0) -> float:
        return self.level(req, gen) * LEVEL + req.arrival

    def beats(self, waiting: float, running: float) -> bool:
        return waiting // LEVEL < running // LEVEL


@QUEUE_POLICIES.register("las")
class LeastAttainedService(_Leveled):
    """Least attained service, counted in quanta of ``quantum`` tokens (no prediction): a request
    that has generated fewer quanta goes first and preempts one that has generated more."""

    name = "las"
    PARAMS = {"quantum": (1.0, 1e6, False)}
    DEFAULTS = {"quantum": 32.0}

    def level(self, req: Job, gen: int) -> int:
        return int(gen // self.params["quantum"])


@QUEUE_POLICIES.register("mlfq")
class SkipJoinMLFQ(_Leveled):
    """FastServe's skip-join multi-level feedback queue (no prediction). Level i has a quantum of
    ``quantum * 2**i`` generated tokens; a request that uses up its level's quantum is demoted one
    level. It joins at the first level whose quantum covers its prefill, counted as
    ``prompt / join_ratio`` tokens (``join_ratio``: prompt tokens prefilled in the time of one decode
    token of a full batch; ~780 for llama8b-h100 at batch 200)."""

    name = "mlfq"
    LEVELS = 16
    PARAMS = {"quantum": (1.0, 1e6, False), "join_ratio": (0.0, 1e9, True)}
    DEFAULTS = {"quantum": 8.0, "join_ratio": 780.0}

    def __init__(self, aging: float = 0.0, quantile_z: float = 0.0, preempt: bool | None = None,
                 **params: float) -> None:
        super().__init__(aging, quantile_z, preempt, **params)
        q = self.params["quantum"]
        self._quanta = [q * 2.0**i for i in range(self.LEVELS)]
        # per joining level: the attained service at which each later level starts
        self._bounds = [list(np.cumsum(self._quanta[j:])) for j in range(self.LEVELS)]

    def join_level(self, req: Job) -> int:
        need = req.prompt / self.params["join_ratio"]
        for i, q in enumerate(self._quanta):
            if q >= need:
                return i
        return self.LEVELS - 1

    def level(self, req: Job, gen: int) -> int:
        j = self.join_level(req)
        return min(j + bisect_right(self._bounds[j], gen), self.LEVELS - 1)


@QUEUE_POLICIES.register("sjf")
class ShortestPredictedJobFirst(QueuePolicy):
    """Shortest predicted job first: the prediction made at arrival (+ ``quantile_z`` spreads)."""

    name = "sjf"

    def base(self, req: Job, gen: int) -> float:
        if self.quantile_z and req.spread is not None:
            return req.pred + self.quantile_z * req.spread
        return req.pred


@QUEUE_POLICIES.register("srpt")
class ShortestPredictedRemaining(QueuePolicy):
    """Shortest predicted remaining tokens, using the latest re-prediction when there is one."""

    name = "srpt"

    def base(self, req: Job, gen: int) -> float:
        return req.pred_remaining(gen)


@QUEUE_POLICIES.register("trail")
class LimitedPreemptionSPRPT(ShortestPredictedRemaining):
    """TRAIL's shortest predicted remaining processing time with *limited* preemption: a running
    request may be preempted only while it has generated less than ``preempt_fraction`` of its
    (latest) predicted length, when its KV is still small."""

    name = "trail"
    preemptive = True
    PARAMS = {"preempt_fraction": (0.0, 1.0, True)}
    DEFAULTS = {"preempt_fraction": 0.5}

    def victim_key(self, req: Job, gen: int) -> float:
        if gen >= self.params["preempt_fraction"] * req.pred_cur:
            return NEVER
        return self.key(req, gen)


@QUEUE_POLICIES.register("hrrn")
class HighestResponseRatioNext(QueuePolicy):
    """Highest response ratio next, ``(wait + size) / size`` with the size in seconds = predicted
    remaining tokens / ``tokens_per_s`` (a request's decode rate in a full batch). Time-dependent:
    queues are re-keyed every :data:`REFRESH_S`; waiting bounds itself (no aging)."""

    name = "hrrn"
    dynamic = True
    takes_aging = False
    PARAMS = {"tokens_per_s": (0.0, 1e6, True)}
    DEFAULTS = {"tokens_per_s": 50.0}

    def key(self, req: Job, gen: int, now: float = 0.0) -> float:
        size = req.pred_remaining(gen)
        wait = now - req.arrival
        return -1.0 - (wait if wait > 0.0 else 0.0) * self.params["tokens_per_s"] / (size if size > 1.0 else 1.0)


@QUEUE_POLICIES.register("oracle")
class OracleRemaining(QueuePolicy):
    """True remaining output tokens: the upper bound any predictor can reach."""

    name = "oracle"

    def base(self, req: Job, gen: int) -> float:
        return float(req.output - gen)


@QUEUE_POLICIES.register("gittins")
class Gittins(QueuePolicy):
    """Gittins rank of the request's predictive distribution conditioned on the ``gen`` tokens it
    has generated (:meth:`lenpred.sched.dists.LengthDist.rank`), refreshed by re-predictions. A wide
    distribution with short mass gets a short quantum and is demoted (preempted) only if it does not
    finish in it."""

    name = "gittins"
    preemptive = True
    needs_dist = True

    def base(self, req: Job, gen: int) -> float:
        return req.dist.rank(gen)

    def worst(self, running: Iterable[R], step: int) -> tuple[R | None, float]:
        # the base class's loop with the rank lookup inlined: this runs at every step of a full batch
        aging = self.aging
        victim: R | None = None
        worst = NEVER
        for r in running:
            a = r.gen + (step - r.base_step)
            d = r.dist
            k = (d.ranks[a] if a < d.last else d.rank(a)) + aging * r.arrival
            if k >= worst:
                worst = k
                victim = r
        return victim, worst


@QUEUE_POLICIES.register("risk")
class RiskAverse(QueuePolicy):
    """TIE's score ``E[R] + beta * CVaR_alpha[R]`` of the remaining length R given what was generated:
    a prompt whose distribution has a long tail is ranked behind one of equal mean and a short tail."""

    name = "risk"
    needs_dist = True
    PARAMS = {"beta": (0.0, 100.0, False), "alpha": (0.0, 1.0, True)}
    DEFAULTS = {"beta": 0.3, "alpha": 0.9}

    def __init__(self, aging: float = 0.0, quantile_z: float = 0.0, preempt: bool | None = None,
                 **params: float) -> None:
        super().__init__(aging, quantile_z, preempt, **params)
        if self.params["alpha"] >= 1.0:
            raise ConfigError(f"policy 'risk': alpha must be in (0, 1), got {self.params['alpha']!r}",
                              "set alpha between 0 and 1, e.g. 0.9")

    def base(self, req: Job, gen: int) -> float:
        return req.dist.risk(gen, self.params["alpha"], self.params["beta"])


def make_queue_policy(name: str, aging: float = 0.0, quantile_z: float = 0.0, preempt: bool | None = None,
                      **params: float) -> QueuePolicy:
    """A queue policy by name (unknown names list the valid ones; bad parameters are one line)."""
    return QUEUE_POLICIES.get(name)(aging=aging, quantile_z=quantile_z, preempt=preempt, **params)
