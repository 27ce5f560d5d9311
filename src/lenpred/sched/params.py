"""The queue policy as a config: :data:`QueueParams`, the one shape a simulator arm's ``queue`` and the
router's ``priority.queue`` take, and the flat keys read into it.

:data:`QueueParams` is a pydantic discriminated union on ``name`` of every registered policy's
``Params`` model (:class:`~lenpred.sched.queue.PolicyParams`: frozen, unknown keys refused, each
parameter's default, range and description written once, beside its policy in
:mod:`lenpred.sched.queue` / :mod:`lenpred.sched.boost`). In a file it is an object or a bare name::

    "queue": {"name": "sjf", "aging": 100}        "queue": "gboost"   (its defaults)

**Flat keys** (input sugar, as files were written before): a policy's parameters beside ``queue``
(``{"queue": "sjf", "aging": 100}``) are moved into it by :func:`with_flat_keys` and validated by the
same model (:func:`lenpred.sched.queue.flat_params`: a flat key set to null is not given, and ``aging`` /
``quantile_z`` of 0, off, are dropped for a policy that does not take them: every arm written before
carried both).

:func:`build_pair` builds an arm's decode and prefill queue policies from its typed parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import Field

from lenpred.errors import FieldError, LenpredError
from lenpred.sched import boost as _boost  # noqa: F401 - registers the boost policies
from lenpred.sched.queue import (
    QUEUE_POLICIES,
    PolicyParams,
    QueuePolicy,
    flat_params,
    make_queue_policy,
    queue_params,
)

__all__ = ["FLAT_KEYS", "QueueParams", "build_pair", "prefill_params", "with_flat_keys"]

_MODELS: tuple[type[PolicyParams], ...] = tuple(QUEUE_POLICIES.get(n).Params for n in QUEUE_POLICIES.names())

if TYPE_CHECKING:
    QueueParams = PolicyParams
else:
    # every registered policy's model, told apart by its name (a policy added to the registry is in it)
    QueueParams = Annotated[Union[_MODELS], Field(discriminator="name")]  # noqa: UP007 - a tuple of types

# the keys a policy's parameters may be given by beside ``queue`` (flat): every policy's but ``name``
FLAT_KEYS: frozenset[str] = frozenset(k for m in _MODELS for k in m.parameters())


def with_flat_keys(data: Mapping[str, Any], default: str = "fcfs") -> dict[str, Any]:
    """``data`` (an arm or the router's priority block) with the flat policy keys beside ``queue`` moved
    into it: ``{"queue": "sjf", "aging": 100}`` -> ``{"queue": {"name": "sjf", "aging": 100}}`` (a
    missing ``queue`` is ``default``; flat keys beside a ``queue`` object are added to it and win). A
    flat key the policy does not take stays, so its model refuses it, naming the ones it does take."""
    flat = {k: data[k] for k in FLAT_KEYS if k in data}
    if not flat:
        return dict(data)
    out = {k: v for k, v in data.items() if k not in FLAT_KEYS}
    q = out.get("queue", default)
    if isinstance(q, PolicyParams):
        q = q.model_dump()
    if isinstance(q, str):
        q = {"name": q}
    if not isinstance(q, dict) or not isinstance(q.get("name"), str):
        return out | {"queue": q}  # the model says what is wrong with it
    return out | {"queue": {**q, **flat_params(q["name"], flat)}}


def prefill_params(queue: PolicyParams, prefill_queue: str | None = None) -> PolicyParams:
    """The prefill queue's parameters: the decode queue's (``preempt`` left at its default: prefill
    instances do not preempt) when it runs the same policy (``prefill_queue`` None: it does); another
    policy gets the decode queue's ``aging`` and ``quantile_z`` where it takes them, and its own defaults."""
    name = prefill_queue or queue.name
    if name == queue.name:
        return queue_params({k: v for k, v in queue.model_dump().items() if k != "preempt"})
    try:
        cls = QUEUE_POLICIES.get(name)
    except LenpredError as e:  # an unknown name: one line listing the valid ones
        raise FieldError(f"prefill_queue: {e.problem}", e.fix) from None
    shared = {k: getattr(queue, k) for k in ("aging", "quantile_z") if cls.takes(k) and hasattr(queue, k)}
    return queue_params({"name": name, **shared})


def build_pair(queue: PolicyParams, prefill_queue: str | None = None) -> tuple[QueuePolicy, QueuePolicy]:
    """New decode and prefill queue policies of an arm (:func:`prefill_params`)."""
    return make_queue_policy(queue), make_queue_policy(prefill_params(queue, prefill_queue))
