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

**A policy's parameters** are its :attr:`QueuePolicy.Params`: a frozen pydantic model (:class:`PolicyParams`)
that names the policy (``name``, the tag of :data:`lenpred.sched.params.QueueParams`) and holds every
parameter it takes, with its default, its range (:class:`Range`) and its description: the one place a
default is written. A simulator arm's ``queue`` and the router's ``priority.queue`` are these models;
a key a policy does not take is refused, naming the ones it does. What a router needs to know about a
policy is a class attribute beside them: :attr:`~QueuePolicy.routable`, :attr:`~QueuePolicy.key_unit`,
:attr:`~QueuePolicy.needs_prediction`, :attr:`~QueuePolicy.needs_dist`. A new policy is one class here
(or in :mod:`lenpred.sched.boost`) with its ``Params`` model, registered in :data:`QUEUE_POLICIES`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import numpy as np
from pydantic import Field, model_validator

from lenpred.config import Config
from lenpred.errors import ConfigError, FieldError, LenpredError
from lenpred.registry import Registry
from lenpred.sched.job import Job, Running

REFRESH_S = 0.05  # seconds between re-keyings of a dynamic policy's queue
LEVEL = 1e8  # leveled keys: level * LEVEL + arrival (FCFS within a level)
NEVER = -math.inf  # victim key of a request that may not be preempted
R = TypeVar("R", bound=Running)  # the caller's request type, handed back by worst()

__all__ = [
    "FCFS", "LEVEL", "NEVER", "QUEUE_POLICIES", "REFRESH_S", "AgingParams", "FCFSParams", "Gittins",
    "GittinsParams", "HRRNParams", "HighestResponseRatioNext", "KeyUnit", "LASParams", "LeastAttainedService",
    "LimitedPreemptionSPRPT", "MLFQParams", "OracleParams", "OracleRemaining", "PolicyParams", "QueuePolicy", "Range",
    "RiskAverse", "RiskParams", "SJFParams", "SRPTParams", "ShortestPredictedJobFirst", "ShortestPredictedRemaining",
    "SkipJoinMLFQ", "TrailParams", "flat_params", "make_queue_policy", "queue_params",
]

# what a policy's key counts: "s" a (boosted) arrival time in seconds, "tokens" a size in tokens, "level"
# a leveled key (level * LEVEL + arrival), "ratio" HRRN's response ratio
KeyUnit = Literal["s", "tokens", "level", "ratio"]


@dataclass(frozen=True)
class Range:
    """The valid range of a numeric parameter (field metadata: ``Annotated[float, Range(0.0, 1.0)]``),
    checked by :class:`PolicyParams`; the value must be a finite number in it."""

    lo: float = -math.inf
    hi: float = math.inf
    open_lo: bool = False
    open_hi: bool = False

    def holds(self, v: float) -> bool:
        return (math.isfinite(v) and (v > self.lo if self.open_lo else v >= self.lo)
                and (v < self.hi if self.open_hi else v <= self.hi))

    def __str__(self) -> str:
        if not math.isfinite(self.lo) and not math.isfinite(self.hi):
            return "a finite number"
        left = "(" if self.open_lo or not math.isfinite(self.lo) else "["
        right = ")" if self.open_hi or not math.isfinite(self.hi) else "]"
        return f"in {left}{self.lo:g}, {self.hi:g}{right}"


class PolicyParams(Config):
    """Base of every queue policy's parameters: the policy's ``name`` (each subclass narrows it to its
    own ``Literal``, the union's tag) and ``preempt`` (policy-driven preemption at decode; each policy's
    model sets its own default). Subclasses add their parameters as fields with a default, a
    :class:`Range` and a description. A key the policy does not take, and a value outside its range, are
    one line naming the policy."""

    name: str
    preempt: bool = Field(False, description="policy-driven preemption at decode: a waiting request that beats "
                                             "the worst running one takes its place")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        name = data.get("name", cls.model_fields["name"].default)
        for k, v in data.items():
            if k not in cls.model_fields:
                if k == "aging":
                    raise FieldError(f"policy {name!r} takes no aging (got {v!r})",
                                     "drop aging: this policy bounds waiting by itself")
                raise FieldError(f"policy {name!r} takes no parameter {k!r}",
                                 f"its parameters: {', '.join(cls.parameters())}")
            if isinstance(v, bool) and cls.model_fields[k].annotation is not bool:
                raise FieldError(f"policy {name!r}: {k} must be a number, got {v!r}", f"give {k} as a number")
        return data

    @model_validator(mode="after")
    def _ranges(self) -> PolicyParams:
        for k, f in type(self).model_fields.items():
            v = getattr(self, k)
            if not isinstance(v, int | float) or isinstance(v, bool):
                continue
            for r in (m for m in f.metadata if isinstance(m, Range)):
                if not r.holds(float(v)):
                    raise FieldError(f"policy {self.name!r}: {k} must be {r}, got {v!r}", f"set {k} to a number {r}")
        return self

    @classmethod
    def parameters(cls) -> list[str]:
        """The keys this policy takes besides ``name``."""
        return [k for k in cls.model_fields if k != "name"]

    def own(self) -> dict[str, Any]:
        """The policy's own parameters: every one but ``name``, ``preempt``, ``aging`` and ``quantile_z``."""
        return {k: getattr(self, k) for k in type(self).model_fields if k not in _SHARED}


_SHARED = frozenset({"name", "preempt", "aging", "quantile_z"})


class AgingParams(PolicyParams):
    """A size-based policy: it takes ``aging``, so a long request does not wait forever."""

    aging: Annotated[float, Range(0.0)] = Field(0.0, description="tokens of priority a request gains per second "
                                                                 "it waits (0: none)")


class QueuePolicy:
    """Base: subclasses define :meth:`base` (the size/time a request is ordered by) and their
    :attr:`Params` (the parameters they take, :class:`PolicyParams`). A policy is built from its
    validated parameters (:func:`make_queue_policy` builds them from a name and keywords)."""

    name: ClassVar[str] = "?"
    Params: ClassVar[type[PolicyParams]] = PolicyParams
    # what a scheduler around the policy must know (the simulator, lenpred.route.priority):
    needs_prediction: ClassVar[bool] = False  # reads a predicted length (req.pred / pred_remaining)
    needs_dist: ClassVar[bool] = False  # reads a predictive distribution (req.dist, or a spread)
    dynamic: ClassVar[bool] = False  # key depends on the time: queues are re-keyed every REFRESH_S
    key_unit: ClassVar[KeyUnit] = "tokens"
    # a router can run it: its key at arrival, from what a router sees (the arrival, a prediction and its
    # spread), is its order (a router orders a request once; a backend's priority field is fixed at admission)
    routable: ClassVar[bool] = False

    def __init__(self, params: PolicyParams | None = None) -> None:
        p = self.Params.model_validate({"name": self.name}) if params is None else params
        if type(p) is not self.Params:
            raise ConfigError(f"policy {self.name!r} got the parameters of {p.name!r}",
                              f"build it from {self.Params.__name__} (lenpred.sched.queue.make_queue_policy)")
        self.config = p
        self.aging = float(getattr(p, "aging", 0.0))
        self.quantile_z = float(getattr(p, "quantile_z", 0.0))
        self.preempt = p.preempt
        self.params: dict[str, float] = {k: float(v) for k, v in p.own().items() if isinstance(v, int | float)}

    @classmethod
    def takes(cls, key: str) -> bool:
        """Whether the policy takes the parameter ``key`` (``aging``, ``quantile_z``, ...)."""
        return key in cls.Params.model_fields

    @classmethod
    def time_keyed(cls) -> bool:
        """Whether its key is a time (seconds): a backend's priority field carries it in milliseconds."""
        return cls.key_unit == "s"

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


class FCFSParams(PolicyParams):
    name: Literal["fcfs"] = "fcfs"


@QUEUE_POLICIES.register("fcfs")
class FCFS(QueuePolicy):
    """First come, first served (takes no aging: arrival order is already the aged order)."""

    name = "fcfs"
    Params = FCFSParams
    key_unit = "s"
    routable = True

    def base(self, req: Job, gen: int) -> float:
        return req.arrival

    def key(self, req: Job, gen: int, now: float = 0.0) -> float:
        return req.arrival


class _Leveled(QueuePolicy):
    """Keys ``level * LEVEL + arrival``: FCFS within a level; only a lower level preempts (their
    parameters' ``preempt`` defaults to true)."""

    key_unit = "level"

    def level(self, req: Job, gen: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def key(self, req: Job, gen: int, now: float = 0.0) -> float:
        return self.level(req, gen) * LEVEL + req.arrival

    def beats(self, waiting: float, running: float) -> bool:
        return waiting // LEVEL < running // LEVEL


class LASParams(PolicyParams):
    name: Literal["las"] = "las"
    preempt: bool = True
    quantum: Annotated[float, Range(1.0, 1e6)] = Field(32.0, description="tokens per quantum")


@QUEUE_POLICIES.register("las")
class LeastAttainedService(_Leveled):
    """Least attained service, counted in quanta of ``quantum`` tokens (no prediction): a request
    that has generated fewer quanta goes first and preempts one that has generated more."""

    name = "las"
    Params = LASParams

    def level(self, req: Job, gen: int) -> int:
        return int(gen // self.params["quantum"])


class MLFQParams(PolicyParams):
    name: Literal["mlfq"] = "mlfq"
    preempt: bool = True
    quantum: Annotated[float, Range(1.0, 1e6)] = Field(8.0, description="the top level's quantum in tokens")
    join_ratio: Annotated[float, Range(0.0, 1e9, open_lo=True)] = Field(
        780.0, description="prompt tokens prefilled in the time of one decode token of a full batch")


@QUEUE_POLICIES.register("mlfq")
class SkipJoinMLFQ(_Leveled):
    """FastServe's skip-join multi-level feedback queue (no prediction). Level i has a quantum of
    ``quantum * 2**i`` generated tokens; a request that uses up its level's quantum is demoted one
    level. It joins at the first level whose quantum covers its prefill, counted as
    ``prompt / join_ratio`` tokens (``join_ratio``: prompt tokens prefilled in the time of one decode
    token of a full batch; ~780 for llama8b-h100 at batch 200)."""

    name = "mlfq"
    Params = MLFQParams
    LEVELS = 16

    def __init__(self, params: PolicyParams | None = None) -> None:
        super().__init__(params)
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


class SJFParams(AgingParams):
    name: Literal["sjf"] = "sjf"
    quantile_z: Annotated[float, Range()] = Field(0.0, description="order by pred + z * spread (z > 0: "
                                                                   "risk-averse)")


@QUEUE_POLICIES.register("sjf")
class ShortestPredictedJobFirst(QueuePolicy):
    """Shortest predicted job first: the prediction made at arrival (+ ``quantile_z`` spreads)."""

    name = "sjf"
    Params = SJFParams
    needs_prediction = True
    routable = True

    def base(self, req: Job, gen: int) -> float:
        if self.quantile_z and req.spread is not None:
            return req.pred + self.quantile_z * req.spread
        return req.pred


class SRPTParams(AgingParams):
    name: Literal["srpt"] = "srpt"


@QUEUE_POLICIES.register("srpt")
class ShortestPredictedRemaining(QueuePolicy):
    """Shortest predicted remaining tokens, using the latest re-prediction when there is one."""

    name = "srpt"
    Params: ClassVar[type[PolicyParams]] = SRPTParams  # trail, a subclass, has its own
    needs_prediction = True

    def base(self, req: Job, gen: int) -> float:
        return req.pred_remaining(gen)


class TrailParams(AgingParams):
    name: Literal["trail"] = "trail"
    preempt: bool = True
    preempt_fraction: Annotated[float, Range(0.0, 1.0, open_lo=True)] = Field(
        0.5, description="a running request is preemptible while generated < this x predicted")


@QUEUE_POLICIES.register("trail")
class LimitedPreemptionSPRPT(ShortestPredictedRemaining):
    """TRAIL's shortest predicted remaining processing time with *limited* preemption: a running
    request may be preempted only while it has generated less than ``preempt_fraction`` of its
    (latest) predicted length, when its KV is still small."""

    name = "trail"
    Params = TrailParams

    def victim_key(self, req: Job, gen: int) -> float:
        if gen >= self.params["preempt_fraction"] * req.pred_cur:
            return NEVER
        return self.key(req, gen)


class HRRNParams(PolicyParams):
    name: Literal["hrrn"] = "hrrn"
    tokens_per_s: Annotated[float, Range(0.0, 1e6, open_lo=True)] = Field(
        50.0, description="decode rate that turns predicted tokens into seconds")


@QUEUE_POLICIES.register("hrrn")
class HighestResponseRatioNext(QueuePolicy):
    """Highest response ratio next, ``(wait + size) / size`` with the size in seconds = predicted
    remaining tokens / ``tokens_per_s`` (a request's decode rate in a full batch). Time-dependent:
    queues are re-keyed every :data:`REFRESH_S`; waiting bounds itself (no aging)."""

    name = "hrrn"
    Params = HRRNParams
    needs_prediction = True
    dynamic = True
    key_unit = "ratio"

    def key(self, req: Job, gen: int, now: float = 0.0) -> float:
        size = req.pred_remaining(gen)
        wait = now - req.arrival
        return -1.0 - (wait if wait > 0.0 else 0.0) * self.params["tokens_per_s"] / (size if size > 1.0 else 1.0)


class OracleParams(AgingParams):
    name: Literal["oracle"] = "oracle"


@QUEUE_POLICIES.register("oracle")
class OracleRemaining(QueuePolicy):
    """True remaining output tokens: the upper bound any predictor can reach."""

    name = "oracle"
    Params = OracleParams

    def base(self, req: Job, gen: int) -> float:
        return float(req.output - gen)


class GittinsParams(AgingParams):
    name: Literal["gittins"] = "gittins"
    preempt: bool = True


@QUEUE_POLICIES.register("gittins")
class Gittins(QueuePolicy):
    """Gittins rank of the request's predictive distribution conditioned on the ``gen`` tokens it
    has generated (:meth:`lenpred.sched.dists.LengthDist.rank`), refreshed by re-predictions. A wide
    distribution with short mass gets a short quantum and is demoted (preempted) only if it does not
    finish in it."""

    name = "gittins"
    Params = GittinsParams
    needs_prediction = True
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


class RiskParams(AgingParams):
    name: Literal["risk"] = "risk"
    beta: Annotated[float, Range(0.0, 100.0)] = Field(0.3, description="weight of CVaR_alpha")
    alpha: Annotated[float, Range(0.0, 1.0, open_lo=True, open_hi=True)] = Field(0.9, description="CVaR level")


@QUEUE_POLICIES.register("risk")
class RiskAverse(QueuePolicy):
    """TIE's score ``E[R] + beta * CVaR_alpha[R]`` of the remaining length R given what was generated:
    a prompt whose distribution has a long tail is ranked behind one of equal mean and a short tail."""

    name = "risk"
    Params = RiskParams
    needs_prediction = True
    needs_dist = True

    def base(self, req: Job, gen: int) -> float:
        return req.dist.risk(gen, self.params["alpha"], self.params["beta"])


def queue_params(value: Any) -> PolicyParams:
    """A policy's validated parameters from its name (its defaults), a mapping ``{"name": POLICY, ...}``
    or a :class:`PolicyParams` (returned as is). An unknown name lists the valid ones; a key the policy
    does not take, a value outside its range or of the wrong type is one line (a
    :class:`~lenpred.errors.FieldError`, so a config that holds it adds its path)."""
    if isinstance(value, PolicyParams):
        return value
    data = {"name": value} if isinstance(value, str) else value
    if not isinstance(data, dict):
        raise FieldError(f"a queue policy is a name or an object with its name, got {type(value).__name__}",
                         'write e.g. "sjf" or {"name": "sjf", "aging": 100}')
    name = data.get("name")
    if not isinstance(name, str):
        raise FieldError("the queue policy's name is missing", 'write e.g. {"name": "sjf", "aging": 100}')
    try:
        return QUEUE_POLICIES.get(name).Params.from_dict(data)
    except LenpredError as e:
        raise FieldError(e.problem, e.fix) from None


_OFF = {"aging": 0.0, "quantile_z": 0.0}  # flat values that mean "not used": every arm was written with both


def flat_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``{"name": name, ...params}`` as a policy's parameters given flat (beside a policy's name, as files
    were written before and keywords are given): a value of None is not given, and ``aging`` /
    ``quantile_z`` of 0 (off) are dropped for a policy that does not take them; any other key stays, so
    the policy's model refuses one it does not take, naming those it does."""
    takes = QUEUE_POLICIES.get(name).Params.model_fields if name in QUEUE_POLICIES else {}
    return {"name": name, **{k: v for k, v in params.items()
                             if v is not None and not (k in _OFF and v == _OFF[k] and k not in takes)}}


def make_queue_policy(policy: str | PolicyParams | dict[str, Any], **params: Any) -> QueuePolicy:
    """A new queue policy from its parameters (:func:`queue_params`), or from its name and keyword
    parameters given flat (``make_queue_policy("sjf", aging=100)``, :func:`flat_params`): unknown names
    list the valid ones, a parameter the policy does not take or out of its range is one line."""
    if params:
        if not isinstance(policy, str):
            raise ConfigError("give keyword parameters with a policy name, not with its parameters' object",
                              "pass make_queue_policy(NAME, **params), or the parameters' object alone")
        policy = flat_params(policy, params)
    p = queue_params(policy)
    return QUEUE_POLICIES.get(p.name)(p)
