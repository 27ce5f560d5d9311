"""Each queue policy's parameters as a typed config, and the policy built from it.

:data:`QueueParams` is a pydantic discriminated union on the policy's ``name``: one model per policy
(or per family that takes the same parameters), each holding the knobs every queue policy takes
(``aging``, ``quantile_z``, ``preempt``) and only the parameters of its own ``PARAMS``. A parameter
left ``None`` takes the policy's default. Ranges are the policy's own (checked when it is built, by
:class:`~lenpred.sched.queue.QueuePolicy`), so a config and a direct :func:`make_queue_policy` call
refuse the same values with the same line.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import Field

from lenpred.config import Config
from lenpred.errors import ConfigError
from lenpred.sched import boost as _boost  # noqa: F401 - registers the boost policies
from lenpred.sched.queue import QUEUE_POLICIES, QueuePolicy, make_queue_policy

__all__ = [
    "Boost2Params", "BoostParams", "HRRNParams", "LASParams", "MLFQParams", "PlainParams", "QueueParams",
    "RiskParams", "TrailParams", "build_flat_pair", "build_pair", "check_keys", "params_model",
]


class _Params(Config):
    """What every queue policy's constructor takes; subclasses add their own ``PARAMS`` as fields."""

    name: str
    aging: float = Field(0.0, description="tokens per second of waiting (size-based queues)")
    quantile_z: float = Field(0.0, description="sjf orders by pred + z * spread")
    preempt: bool | None = Field(None, description="policy-driven preemption (default: the policy's own)")

    def own(self) -> dict[str, float]:
        """The policy's own parameters that were set (``None`` = the policy's default)."""
        return {k: v for k in type(self).model_fields if k not in _COMMON and (v := getattr(self, k)) is not None}


_COMMON = frozenset(_Params.model_fields)


class PlainParams(_Params):
    """Policies with no parameter of their own."""

    name: Literal["fcfs", "sjf", "srpt", "oracle", "gittins"]


class LASParams(_Params):
    name: Literal["las"]
    quantum: float | None = Field(None, description="tokens per quantum (32)")


class MLFQParams(_Params):
    name: Literal["mlfq"]
    quantum: float | None = Field(None, description="the top level's quantum in tokens (8)")
    join_ratio: float | None = Field(None, description="prompt tokens per attained-service token (780)")


class TrailParams(_Params):
    name: Literal["trail"]
    preempt_fraction: float | None = Field(None, description="preemptible while generated < this x predicted (0.5)")


class HRRNParams(_Params):
    name: Literal["hrrn"]
    tokens_per_s: float | None = Field(None, description="decode rate that turns tokens into seconds (50)")


class RiskParams(_Params):
    name: Literal["risk"]
    beta: float | None = Field(None, description="weight of CVaR_alpha (0.3)")
    alpha: float | None = Field(None, description="CVaR level in (0, 1) (0.9)")


class BoostParams(_Params):
    name: Literal["gboost", "uniboost"]
    gamma: float | None = Field(None, description="decay rate, 1/s (default: solved from the measured rate)")
    s_per_token: float | None = Field(None, description="server seconds per token (default: the profile's)")


class Boost2Params(_Params):
    name: Literal["boost2"]
    boost_s: float | None = Field(None, description="seconds a short-labelled request is boosted (10)")
    short_threshold: float | None = Field(None, description="predicted total tokens under which a request is "
                                          "short (200)")


_MODELS: tuple[type[_Params], ...] = (PlainParams, LASParams, MLFQParams, TrailParams, HRRNParams, RiskParams,
                                      BoostParams, Boost2Params)
QueueParams = Annotated[
    PlainParams | LASParams | MLFQParams | TrailParams | HRRNParams | RiskParams | BoostParams | Boost2Params,
    Field(discriminator="name"),
]


def params_model(name: str) -> type[_Params]:
    """The parameter model of the queue policy ``name`` (an unknown name: the registry's one line)."""
    QUEUE_POLICIES.get(name)
    model = next((m for m in _MODELS if name in get_args(m.model_fields["name"].annotation)), None)
    if model is None:  # a policy registered without a parameter model
        raise ConfigError(f"queue policy {name!r} has no parameter model", "add one to lenpred.sched.params")
    return model


def check_keys(data: dict[str, Any]) -> None:
    """One line, in the policy's own words, for a policy name or a parameter it does not take (before
    pydantic's discriminated union would say it less plainly)."""
    name = data.get("name")
    if not isinstance(name, str):
        return  # pydantic names the missing or mistyped tag
    model = params_model(name)
    for k in data:
        if k not in model.model_fields:
            took = ", ".join(sorted(QUEUE_POLICIES.get(name).PARAMS)) or "none"
            raise ConfigError(f"policy {name!r} takes no parameter {k!r}", f"its parameters: {took}")


def build_pair(queue: _Params, prefill_queue: str | None = None) -> tuple[QueuePolicy, QueuePolicy]:
    """New decode and prefill queue policies of typed parameters (:func:`build_flat_pair`)."""
    return build_flat_pair(queue.name, prefill_queue, queue.aging, queue.quantile_z, queue.preempt, queue.own())


def build_flat_pair(queue: str, prefill_queue: str | None, aging: float, quantile_z: float, preempt: bool | None,
                    params: dict[str, float]) -> tuple[QueuePolicy, QueuePolicy]:
    """New decode and prefill queue policies: the decode queue takes everything; the prefill queue
    (default: the decode queue's policy) gets the aging when it ages, ``quantile_z``, and ``params``
    only when it runs the same policy; never ``preempt``. A name, a parameter or a range the policy
    does not take is the policy's own one line, decode queue first."""
    dec = make_queue_policy(queue, aging, quantile_z, preempt, **params)
    pq = prefill_queue or queue
    pre_aging = aging if QUEUE_POLICIES.get(pq).takes_aging else 0.0  # an fcfs/las prefill queue does not age
    pre = make_queue_policy(pq, pre_aging, quantile_z, **(params if pq == queue else {}))
    return dec, pre
