"""What a scheduling policy reads of a request: the :class:`Job` protocol.

A queue policy orders requests by their arrival, their prompt, what a predictor said about them
(``pred``, ``spread``, the latest prediction ``pred_cur`` after re-predictions, the predictive
distribution ``dist``: :class:`lenpred.sched.dists.LengthDist`) and, for the oracle yardstick, the
true output length. The simulator's request entity has every field; a policy never sees more.
:class:`Running` adds what the simulator knows of a request in a running batch, for choosing whom to
preempt. :class:`Arrived` is a request as known when it arrives, before its first token: what the
router orders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from lenpred.errors import ConfigError

__all__ = ["Arrived", "Job", "Running"]


class Job(Protocol):
    """A request as a queue policy reads it (read-only)."""

    @property
    def arrival(self) -> float: ...  # seconds

    @property
    def prompt(self) -> int: ...  # prompt tokens

    @property
    def output(self) -> int: ...  # true output tokens (the oracle policy's yardstick)

    @property
    def pred(self) -> float: ...  # predicted output tokens at arrival

    @property
    def spread(self) -> float | None: ...  # predictive standard deviation, tokens

    @property
    def pred_cur(self) -> float: ...  # latest predicted total output tokens

    @property
    def dist(self) -> Any: ...  # LengthDist | None: the current predictive distribution

    def pred_remaining(self, gen: int) -> float:
        """The latest predicted total minus ``gen`` generated tokens, floored at 0."""
        ...


class Running(Job, Protocol):
    """A request in a running batch: ``gen`` tokens generated as of the instance's step ``base_step``."""

    @property
    def gen(self) -> int: ...

    @property
    def base_step(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Arrived:
    """A request as known when it arrives, before it has generated a token (a :class:`Job`): its arrival
    (seconds), its prediction, and its prompt length and predictive distribution where known. Its true
    length is not known, so the ``oracle`` policy cannot order it."""

    arrival: float
    pred: float
    spread: float | None = None
    prompt: int = 0
    dist: Any = None  # LengthDist | None

    @property
    def pred_cur(self) -> float:
        return self.pred

    @property
    def output(self) -> int:
        raise ConfigError("the true output length of a request that has not finished is unknown",
                          "the oracle policy orders simulated requests only")

    def pred_remaining(self, gen: int) -> float:
        r = self.pred - gen
        return r if r > 0.0 else 0.0
