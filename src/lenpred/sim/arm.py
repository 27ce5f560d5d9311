"""An experiment's arm: what it runs (:class:`ArmPolicy`) and where its predicted lengths come from
(:class:`PredictionConfig`).

:class:`ArmPolicy` holds the queue policy as typed parameters (:data:`lenpred.sched.params.QueueParams`,
a discriminated union on the policy's name: each policy's model holds only the parameters it takes, with
their defaults), the dispatchers and the KV rules; its queue policies are built once, when it is made.
:class:`PolicyConfig` is an arm: an :class:`ArmPolicy` with a name and its own predictions. A file gives
the queue as an object (``{"name": "a", "queue": {"name": "sjf", "aging": 100}}``) or, as input sugar,
with flat keys (``{"name": "a", "queue": "sjf", "aging": 100}``), validated by the same model.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from lenpred.config import Config
from lenpred.errors import ConfigError, FieldError
from lenpred.sched.dispatch import DISPATCHERS
from lenpred.sched.params import QueueParams, build_pair, with_flat_keys
from lenpred.sched.queue import FCFSParams, QueuePolicy, queue_params
from lenpred.sched.recommended import PREDICTION_ARM, RECOMMENDED

__all__ = [
    "ADMISSIONS", "PREDICTED_ADMISSIONS", "TABLE_MODELS", "VICTIMS", "ArmPolicy", "PolicyConfig", "PredictionConfig",
    "policies_for", "prediction_models", "prediction_policy", "recommended_policy",
]

# KV preemption victim and decode admission rules (lenpred.sim.preemption)
VICTIMS = ("policy", "latest", "predicted-remaining", "true-remaining")
ADMISSIONS = ("fits-now", "watermark", "predicted-peak", "true-peak", "predicted-horizon", "true-horizon")
# the admission rules that read the predicted lengths
PREDICTED_ADMISSIONS = ("predicted-peak", "predicted-horizon")
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
            raise ConfigError(f"prediction.rel_mae must be >= 0, got {self.rel_mae}", "give the MAE as a share of the mean true length, e.g. 0.3")
        if self.mae is not None and not (math.isfinite(self.mae) and self.mae >= 0):
            raise ConfigError(f"prediction.mae must be >= 0, got {self.mae}", "give the MAE in tokens, e.g. 50")
        if self.model in ("lognormal", "additive") and self.rel_mae is None and self.mae is None:
            raise ConfigError(f"prediction model {self.model!r} needs rel_mae or mae", "set prediction.rel_mae (e.g. 0.3) or prediction.mae")
        if self.model == "lognormal" and self.mae is not None:
            raise ConfigError("prediction model 'lognormal' takes rel_mae (multiplicative), not mae",
                              "use model 'additive' for an absolute MAE")
        if self.repredict_every is not None and self.repredict_every < 1:
            raise ConfigError(f"prediction.repredict_every must be an integer >= 1, got {self.repredict_every!r}", "give the tokens between re-predictions, e.g. 32, or leave it unset")
        if self.model == "table" and not self.path:
            raise ConfigError("prediction model 'table' needs a path",
                              "set prediction.path to a predictions .parquet file (or pass --predictions FILE)")
        if self.path is not None and self.model != "table":
            raise ConfigError(f"prediction.path is only read by model 'table', not {self.model!r}",
                              "set model to 'table', or drop path")
        return self


class ArmPolicy(Config):
    """What an arm runs: the queue policy with its parameters (decode and colocated instances; the
    prefill queue runs ``prefill_queue``, default the same policy), the dispatchers, the KV rules. Its
    queue policies are built when it is made (a policy that refuses its parameters fails here)."""

    queue: QueueParams = Field(default_factory=FCFSParams, description=(
        'queue order at decode (and colocated) instances: {"name": POLICY, ...its parameters} (lenpred.sched; '
        '`lenpred simulate --list`), or a name alone for its defaults'))
    dispatch: str = Field("round-robin", description="dispatch to decode (and colocated) instances")
    prefill_queue: str | None = Field(None, description="default: the same policy as queue (with its "
                                      "parameters); another policy gets queue's aging and quantile_z where it "
                                      "takes them")
    prefill_dispatch: str | None = Field(None, description="default: same as dispatch")
    victim: str = Field("policy", description="KV preemption victim: policy (the queue key's largest), latest "
                        "(the latest arrival, vLLM's), predicted-remaining or true-remaining (the most tokens left)")
    admission: str = Field("fits-now", description="decode admission: fits-now (the current KV fits, less the "
                           "watermark), watermark (fits less kv_reserve: no prediction), predicted-peak (also the sum of predicted peak KV fits, S3), true-peak, "
                           "predicted-horizon (also the batch's most future KV, requests leaving at their predicted "
                           "ends, fits) or true-horizon")
    max_outstanding: int | None = Field(None, description="late binding: a decode (colocated) instance holds at "
                                        "most this many requests; the rest wait in one queue for the pool, in "
                                        "policy order, sent by the dispatcher to an instance with room (as "
                                        "lenpred route's max_outstanding). Unset: early binding")
    kv_reserve: float | None = Field(None, description="admission watermark: the share of KV kept free for "
                                     "running requests to grow into, in [0, 0.9] (unset: 0.1)")

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        return with_flat_keys(data) if isinstance(data, dict) else data

    @field_validator("queue", mode="before")
    @classmethod
    def _queue(cls, v: Any) -> Any:
        return queue_params(v)

    @model_validator(mode="after")
    def _check(self) -> ArmPolicy:
        for key, valid in (("victim", VICTIMS), ("admission", ADMISSIONS)):
            if getattr(self, key) not in valid:
                raise FieldError(f"unknown {key} {getattr(self, key)!r}", f"use one of: {', '.join(valid)}")
        for key in ("dispatch", "prefill_dispatch"):
            name = getattr(self, key)
            if name is not None and name not in DISPATCHERS:
                raise FieldError(f"unknown {key} {name!r}", f"use one of: {', '.join(DISPATCHERS.names())}")
        if self.max_outstanding is not None and self.max_outstanding < 1:
            raise FieldError(f"max_outstanding must be an integer >= 1, got {self.max_outstanding}",
                             "give the requests one decode instance may hold (its batch slots), or leave it "
                             "unset for early binding")
        if self.kv_reserve is not None:
            if not (math.isfinite(self.kv_reserve) and 0.0 <= self.kv_reserve <= 0.9):
                raise FieldError(f"kv_reserve must be in [0, 0.9], got {self.kv_reserve}",
                                 "give the share of KV the watermark admission keeps free, e.g. 0.1")
            if self.admission != "watermark":
                raise FieldError(f"kv_reserve is read only by admission 'watermark', not {self.admission!r}",
                                 "set admission to 'watermark', or drop kv_reserve")
        self.queue_policies  # noqa: B018 - a prefill queue that refuses its parameters fails here
        return self

    @model_serializer(mode="wrap")
    def _unset_left_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Late binding and the watermark's reserve are written only when set: an arm without them reads and
        writes as it did before they existed."""
        d = handler(self)
        for k in ("max_outstanding", "kv_reserve"):
            if d.get(k, 0) is None:
                del d[k]
        return d

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

    @property
    def policy(self) -> ArmPolicy:
        """What the arm runs (itself: a :class:`PolicyConfig` is an :class:`ArmPolicy` with a name)."""
        return self


class _Named(Config):
    """An arm's name (a base of :class:`PolicyConfig`, so it comes first in its file and its errors)."""

    name: str = Field("fcfs-rr", description="arm name (unique)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v:
            raise FieldError("every policy needs a non-empty name", "give each policy a name, e.g. \"fcfs+rr\"")
        return v


class PolicyConfig(ArmPolicy, _Named):
    """One arm of an experiment: its name, its policy (:class:`ArmPolicy`'s fields) and, if given, its own
    predictions. Written with the queue policy as its typed object (``{"name": "sjf+lpt", "queue": {"name":
    "sjf", "aging": 0.0, ...}, "dispatch": ...}``); read from that or from flat keys
    (:func:`lenpred.sched.params.with_flat_keys`)."""

    prediction: PredictionConfig | None = Field(None, description="default: the config's top-level prediction")


def policies_for(policy: ArmPolicy) -> tuple[QueuePolicy, QueuePolicy]:
    """A new pair of decode and prefill queue policies: one per run, since a run calibrates its boost
    policies in place (``policy.queue_policies`` is the pair kept for questions that do not run them)."""
    return build_pair(policy.queue, policy.prefill_queue)


def recommended_policy(batch: int) -> PolicyConfig:
    """The recommended policy's arm (:data:`lenpred.sched.recommended.RECOMMENDED`): late binding with
    ``batch`` (the decode batch limit) requests per instance."""
    return PolicyConfig(**RECOMMENDED, max_outstanding=batch)


def prediction_policy(batch: int) -> PolicyConfig:
    """The arm that shows what a prediction adds on top of the recommended one
    (:data:`lenpred.sched.recommended.PREDICTION_ARM`: the same late binding, shortest predicted first with aging)."""
    return PolicyConfig(**PREDICTION_ARM, max_outstanding=batch)
