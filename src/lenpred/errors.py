"""One exception tree for everything lenpred reports to a user.

Every error carries a message that names the problem *and* the fix; the CLI prints it on one line
and exits non-zero. Library callers can catch :class:`LenpredError` (or a subclass) as usual.
"""

from __future__ import annotations


class LenpredError(Exception):
    """Base class. ``str(err)`` is a one-line message meant for a person."""

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if not fix else f"{problem} -- fix: {fix}")


class ConfigError(LenpredError):
    """Invalid arguments or configuration values."""


class ModelError(LenpredError):
    """A model cannot be found, loaded or used as asked."""




class DataError(LenpredError):
    """Prompt files or run directories that are malformed, empty or inconsistent."""


class ContextLengthError(DataError):
    """A prompt has more tokens than the target model's context (HTTP: context_length_exceeded)."""


class CardMismatchError(DataError):
    """An artifact was made under another run card than the one it is combined with."""


class EngineError(LenpredError):
    """A generation engine failed (unreachable server, missing optional dependency, ...)."""


class FieldError(ConfigError, ValueError):
    """Raised by a config validator: pydantic reports it with the field's path (it is a ValueError)
    and :mod:`lenpred.config` keeps its problem and fix."""


class UnknownKeyError(ConfigError):
    """A registry lookup with a key that is not registered."""


class NotFittedError(LenpredError):
    """An estimator was used before ``fit``."""
