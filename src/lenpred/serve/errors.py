"""Errors of the prediction service, each with the HTTP status and the OpenAI error fields it maps to.

They are :class:`~lenpred.errors.LenpredError` subclasses, so a library caller (the router, in
process) catches them like any other lenpred error; :mod:`lenpred.serve.app` turns them into
``{"error": {"message", "type", "param", "code"}}`` bodies with :attr:`ServeError.status`.
"""

from __future__ import annotations

from lenpred.errors import LenpredError

__all__ = [
    "ServeError", "BadRequestError", "ContextLengthError", "OverloadedError", "PredictTimeoutError",
    "ServiceStoppedError", "InternalError",
]


class ServeError(LenpredError):
    """A request the service could not answer. ``status``/``type``/``code`` become the HTTP reply."""

    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(self, problem: str, fix: str | None = None, *, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(problem, fix)
        self.param = param
        if code is not None:
            self.code = code


class BadRequestError(ServeError):
    """The request itself is wrong (400): nothing the service can do with it."""

    status = 400
    type = "invalid_request_error"


class ContextLengthError(BadRequestError):
    """The rendered prompt has more tokens than the head's target model accepts."""

    code = "context_length_exceeded"


class OverloadedError(ServeError):
    """The request queue is full (503): retry later or add capacity."""

    status = 503
    type = "overloaded_error"
    code = "queue_full"


class PredictTimeoutError(ServeError):
    """The prediction did not finish within the service's timeout (504)."""

    status = 504
    type = "timeout_error"
    code = "timeout"


class ServiceStoppedError(ServeError):
    """The service is stopping or stopped (503)."""

    status = 503
    type = "server_error"
    code = "stopped"


class InternalError(ServeError):
    """The model call failed for a reason that is not the request's fault (500)."""

    status = 500
    type = "server_error"
    code = "internal_error"
