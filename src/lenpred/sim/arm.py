"""An experiment's arm: what it runs (:class:`ArmPolicy`) and where its predicted lengths come from
(:class:`PredictionConfig`).

:class:`ArmPolicy` holds the queue policy as typed parameters (:data:`lenpred.sched.params.QueueParams`,
a discriminated union on the policy's name: each policy's model holds only the parameters it takes),
the dispatchers and the KV rules; its queue policies are built once, when it is made. A file and the
CLI keep the flat keys (``{"name": "a", "queue": "sjf", "aging": 100}``): :class:`PolicyConfig` reads
them through :class:`_PolicyFile` (the flat format's fields, checks and one-line errors) into the
typed parts, and writes them back flat, in the same order.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from lenpred.config import Config
from lenpred.errors import ConfigError, LenpredError
from lenpred.sched.params import (
    PlainParams,
    QueueParams,
    build_flat_pair,
    build_pair,
    check_keys,
    params_model,
)
from lenpred.sched.queue import QueuePolicy
from lenpred.sched.recommended import RECOMMENDED

__all__ = [
    "ADMISSIONS", "POLICY_PARAMS", "PREDICTED_ADMISSIONS", "TABLE_MODELS", "VICTIMS", "ArmPolicy", "PolicyConfig", "PredictionConfig",
    "policies_for", "prediction_models", "recommended_policy",
]

# KV preemption victim and decode admission rules (lenpred.sim.preemption)
VICTIMS = ("policy", "latest", "predicted-remaining", "true-remaining")
ADMISSIONS = ("fits-now", "watermark", "predicted-peak", "true-peak", "predicted-horizon", "true-horizon")
# admission rules and dispatchers that read the predicted lengths (an arm without predictions may not use them)
PREDICTED_ADMISSIONS = ("predicted-peak", "predicted-horizon")
# the per-policy parameters of an arm, in the flat format's key order: together the keys of every queue
# policy's PARAMS (lenpred.sched.queue / boost; tests/sim/test_sim_arm.py holds them equal)
POLICY_PARAMS = ("quantum", "join_ratio", "beta", "alpha", "preempt_fraction", "tokens_per_s", "gamma",
                 "s_per_token", "boost_s", "short_threshold")
# prediction models that are not synthetic predictors: a predictions table, a trace's own column
TABLE_MODELS = ("table", "input")


def prediction_models() -> list[str]:
    """Every valid ``prediction.model``: the synthetic predictors plus ``table`` and ``input``."""
    from lenpred.sim.noise import SYNTHETIC

    return sorted([*SYNTHETIC.names(), *TABLE_MODELS])


class PredictionConfig(Config):
    """Where a policy arm's predicted lengths come from.

    A synthetic predictor (:mod:`lenpred.sim.noise`: oracle, lognormal, additive,
    constant, prompt-median), a predictions table (``table`` with ``path``: a Parquet file written
    by ``lenpred predict`` or :meth:`lenpred.predictions.Predictions.write`), or ``input`` (a
    request table's own ``predicted_tokens`` column). Every one becomes a predictions table joined
    to the workload by ``(prompt_id, sample_idx)``; a request without a prediction is an error.
    """

    model: str = Field("lognormal", description="synthetic predictor, 'table' (with path) or 'input'")
    rel_mae: float | None = Field(0.30, description="lognormal/additive: MAE / mean true length")
    mae: float | None = Field(None, description="additive: absolute MAE in tokens (wins over rel_mae)")
    repredict_every: int | None = Field(None, description="re-predict the remaining length every k tokens")
    path: str | None = Field(None, description="model 'table': the predictions Parquet file")

    @model_validator(mode="after")
    def _check(self) -> PredictionConfig:
        valid = prediction_models()
        if self.model not in valid:
            raise ConfigError(f"unknown prediction model {self.model!r}", f"use one of: {', '.join(valid)}")
        if self.rel_mae is not None and not (math.isfinite(self.rel_mae) and self.rel_mae >= 0):
            raise ConfigError(f"prediction.rel_mae must be >= 0, got {self.rel_mae}")
        if self.mae is not None and not (math.isfinite(self.mae) and self.mae >= 0):
            raise ConfigError(f"prediction.mae must be >= 0, got {self.mae}")
        if self.model in ("lognormal", "additive") and self.rel_mae is None and self.mae is None:
            raise ConfigError(f"prediction model {self.model!r} needs rel_mae or mae")
        if self.model == "lognormal" and self.mae is not None:
            raise ConfigError("prediction model 'lognormal' takes rel_mae (multiplicative), not mae",
                              "use model 'additive' for an absolute MAE")
        if self.repredict_every is not None and self.repredict_every < 1:
            raise ConfigError(f"prediction.repredict_every must be an integer >= 1, got {self.repredict_every!r}")
        if self.model == "table" and not self.path:
            raise ConfigError("prediction model 'table' needs a path",
                              "set prediction.path to a predictions .parquet file (or pass --predictions FILE)")
        if self.path is not None and self.model != "table":
            raise ConfigError(f"prediction.path is only read by model 'table', not {self.model!r}",
                              "set model to 'table', or drop path")
        return self


# An arm as a file and the flags write it: flat keys, read by PolicyConfig into its typed parts. It checks
# what needs no policy built (the name, the KV rules, the aging's sign) and is PolicyConfig's JSON schema.
class _PolicyFile(Config):
    """One arm of an experiment: queue order + dispatch (+ its own predictions if given)."""

    model_config = ConfigDict(title="PolicyConfig")

    name: str = Field("fcfs-rr", description="arm name (unique)")
    queue: str = Field("fcfs", description="queue order at decode (and colocated) instances")
    dispatch: str = Field("round-robin", description="dispatch to decode (and colocated) instances")
    prefill_queue: str | None = Field(None, description="default: same as queue")
    prefill_dispatch: str | None = Field(None, description="default: same as dispatch")
    aging: float = Field(0.0, description="tokens per second of waiting (size-based queues)")
    quantile_z: float = Field(0.0, description="sjf orders by pred + z * spread")
    preempt: bool | None = Field(None, description="policy-driven preemption at decode (default: the policy's own; "
                                 "las, mlfq, trail and gittins preempt)")
    quantum: float | None = Field(None, description="las: tokens per quantum (32); mlfq: the top level's quantum (8)")
    join_ratio: float | None = Field(None, description="mlfq skip-join: prompt tokens per attained-service token (780)")
    beta: float | None = Field(None, description="risk: weight of CVaR_alpha (0.3)")
    alpha: float | None = Field(None, description="risk: CVaR level in (0, 1) (0.9)")
    preempt_fraction: float | None = Field(None, description="trail: preemptible while generated < this x predicted (0.5)")
    tokens_per_s: float | None = Field(None, description="hrrn: decode rate that turns tokens into seconds (50)")
    gamma: float | None = Field(None, description="gboost/uniboost: decay rate, 1/s (default: solved from the "
                                "measured rate, lenpred.sched.boost.solve_gamma)")
    s_per_token: float | None = Field(None, description="gboost/uniboost: server seconds per token (default: the "
                                      "profile's full-batch step / batch)")
    boost_s: float | None = Field(None, description="boost2: seconds a short-labelled request is boosted (10)")
    short_threshold: float | None = Field(None, description="boost2: predicted total tokens under which a "
                                          "request is short (200)")
    victim: str = Field("policy", description="KV preemption victim: policy (the queue key's largest), latest "
                        "(the latest arrival, vLLM's), predicted-remaining or true-remaining (the most tokens left)")
    admission: str = Field("fits-now", description="decode admission: fits-now (the current KV fits, less the "
                           "watermark), watermark (fits less kv_reserve: no prediction), predicted-peak (also the sum of predicted peak KV fits, S3), true-peak, "
                           "predicted-horizon (also the batch's most future KV, requests leaving at their predicted "
                           "ends, fits) or true-horizon")
    max_outstanding: int | None = Field(None, description="late binding: a decode (colocated) instance holds at "
                                        "most this many requests; the rest wait in one central queue in "
                                        "policy order, sent by the dispatcher to an instance with room (as "
                                        "lenpred route's max_outstanding). Unset: early binding")
    kv_reserve: float | None = Field(None, description="admission watermark: the share of KV kept free for "
                                     "running requests to grow into, in [0, 0.9] (default 0.1)")
    prediction: PredictionConfig | None = Field(None, description="default: the config's top-level prediction")

    @model_validator(mode="after")
    def _check(self) -> _PolicyFile:
        if not self.name:
            raise ConfigError("every policy needs a non-empty name")
        for key, valid in (("victim", VICTIMS), ("admission", ADMISSIONS)):
            if getattr(self, key) not in valid:
                raise ConfigError(f"policy {self.name!r}: unknown {key} {getattr(self, key)!r}",
                                  f"use one of: {', '.join(valid)}")
        if not (math.isfinite(self.aging) and self.aging >= 0):
            raise ConfigError(f"policy {self.name!r}: aging must be >= 0")
        if self.max_outstanding is not None and self.max_outstanding < 1:
            raise ConfigError(f"policy {self.name!r}: max_outstanding must be an integer >= 1, got "
                              f"{self.max_outstanding}", "give the requests one decode instance may hold (its "
                              "batch slots), or leave it unset for early binding")
        _check_reserve(self.kv_reserve, self.admission, f"policy {self.name!r}: ")
        return self


class ArmPolicy(Config):
    """What an arm runs: the queue policy with its parameters (decode and colocated instances; the
    prefill queue runs ``prefill_queue``, default the same policy), the dispatchers, the KV rules."""

    queue: QueueParams = Field(default_factory=lambda: PlainParams(name="fcfs"))
    dispatch: str = "round-robin"
    prefill_queue: str | None = None
    prefill_dispatch: str | None = None
    victim: str = "policy"
    admission: str = "fits-now"
    max_outstanding: int | None = None  # late binding (lenpred.sim.gate); None: early binding
    kv_reserve: float | None = None  # admission "watermark": share of KV kept free (None: 0.1)

    @field_validator("queue", mode="before")
    @classmethod
    def _known(cls, v: Any) -> Any:
        if isinstance(v, dict):
            check_keys(v)
        return v

    @model_validator(mode="after")
    def _check(self) -> ArmPolicy:
        for key, valid in (("victim", VICTIMS), ("admission", ADMISSIONS)):
            if getattr(self, key) not in valid:
                raise ConfigError(f"unknown {key} {getattr(self, key)!r}", f"use one of: {', '.join(valid)}")
        if self.max_outstanding is not None and self.max_outstanding < 1:
            raise ConfigError(f"max_outstanding must be an integer >= 1, got {self.max_outstanding}",
                              "give the requests one decode instance may hold (its batch slots), or leave it "
                              "unset for early binding")
        _check_reserve(self.kv_reserve, self.admission, "")
        self.queue_policies  # noqa: B018 - a policy that refuses its parameters fails here
        return self

    @cached_property
    def queue_policies(self) -> tuple[QueuePolicy, QueuePolicy]:
        """The decode and prefill queue policies, built once (when the arm is made) and kept for what a
        run does not change: names, ``needs_dist``, parameters. Not for running: a boost policy's
        ``calibrate`` rewrites its gamma, seconds per token and caches per run, so each
        :class:`~lenpred.sim.engine.Simulator` builds its own pair (:func:`policies_for`)."""
        return policies_for(self)

    @property
    def needs_dist(self) -> bool:
        """Whether the queue policies read a predictive distribution."""
        return any(p.needs_dist for p in self.queue_policies)


class PolicyConfig(Config):
    """One arm of an experiment: its policy and, if given, its own predictions. Read from and written as
    the flat keys of :class:`_PolicyFile`; the arm's name prefixes every error its policy raises."""

    name: str = "fcfs-rr"
    policy: ArmPolicy = Field(default_factory=ArmPolicy)
    prediction: PredictionConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        if not isinstance(data, dict) or isinstance(data.get("policy"), ArmPolicy):
            return data  # not an object (pydantic says so), or already typed
        flat = _PolicyFile(**data)
        return {"name": flat.name, "policy": _arm_policy(flat), "prediction": flat.prediction}

    @model_serializer(mode="wrap")
    def _to_flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        d = handler(self)
        p = d["policy"]
        values = {**p["queue"], **p, **d, "queue": p["queue"]["name"]}  # the arm's name, not the queue's
        out = {k: values.get(k) for k in _PolicyFile.model_fields}
        for k in ("max_outstanding", "kv_reserve"):  # unset: written as before these existed
            if out[k] is None:
                del out[k]
        return out

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        """The schema of the file format (flat keys), alone or inside a :class:`SimConfig`'s."""
        return handler(_PolicyFile.__pydantic_core_schema__)

    @property
    def needs_dist(self) -> bool:
        """Whether the arm's queue policies read a predictive distribution."""
        return self.policy.needs_dist


def _check_reserve(reserve: float | None, admission: str, where: str) -> None:
    if reserve is None:
        return
    if not (math.isfinite(reserve) and 0.0 <= reserve <= 0.9):
        raise ConfigError(f"{where}kv_reserve must be in [0, 0.9], got {reserve}",
                          "give the share of KV the watermark admission keeps free, e.g. 0.1")
    if admission != "watermark":
        raise ConfigError(f"{where}kv_reserve is read only by admission 'watermark', not {admission!r}",
                          "set admission to 'watermark', or drop kv_reserve")


def _arm_policy(flat: _PolicyFile) -> ArmPolicy:
    """The typed policy of a checked flat arm; its queue policies are built here (today's checks, in
    today's order: the decode queue's aging, parameters and ranges, then the prefill queue's)."""
    given = {k: v for k in POLICY_PARAMS if (v := getattr(flat, k)) is not None}
    try:
        pair = build_flat_pair(flat.queue, flat.prefill_queue, flat.aging, flat.quantile_z, flat.preempt, given)
    except LenpredError as e:
        raise ConfigError(f"policy {flat.name!r}: {e.problem}", e.fix) from None
    queue = params_model(flat.queue)(name=flat.queue, aging=flat.aging, quantile_z=flat.quantile_z,
                                     preempt=flat.preempt, **given)
    arm = ArmPolicy.model_construct(queue=queue, dispatch=flat.dispatch, prefill_queue=flat.prefill_queue,
                                    prefill_dispatch=flat.prefill_dispatch, victim=flat.victim,
                                    admission=flat.admission, max_outstanding=flat.max_outstanding,
                                    kv_reserve=flat.kv_reserve)
    arm.__dict__["queue_policies"] = pair  # checked above: keep the pair (what the cached property holds)
    return arm


def policies_for(policy: ArmPolicy) -> tuple[QueuePolicy, QueuePolicy]:
    """A new pair of decode and prefill queue policies: one per run, since a run calibrates its boost
    policies in place (``policy.queue_policies`` is the pair kept for questions that do not run them)."""
    return build_pair(policy.queue, policy.prefill_queue)


def recommended_policy() -> PolicyConfig:
    """The recommended policy's arm (:data:`lenpred.sched.recommended.RECOMMENDED`)."""
    return PolicyConfig(**RECOMMENDED)
