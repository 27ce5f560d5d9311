"""The request bodies the router accepts, and its error body, as JSON schemas: the router's OpenAPI
document (``/openapi.json``, ``/docs``) shows them, and a fuzzer generates requests from them.

They state what :func:`lenpred.route.bodies.parse_request` checks, and no more: a body these schemas
accept is forwarded, one they refuse is answered 400 by the router itself. Every property not named
here passes through to the backend (``additionalProperties``), as OpenAI's other fields and the
engines' own extensions do. The handlers read the raw body (the router forwards it as it came), so
FastAPI does not validate against these schemas; ``parse_request`` does.
"""

from __future__ import annotations

from typing import Any

from lenpred.route.bodies import INT64, INTEGERS, NO_CONTENT_ROLES, NUMBERS, ROLES

__all__ = ["CHAT_REQUEST", "COMPLETION_REQUEST", "ERROR_RESPONSES", "request_body"]

_NULL = {"type": "null"}
_STR = {"type": "string"}
_BOOL = {"type": ["boolean", "null"]}


_DOUBLE = 1.7976931348623157e308  # a number must be a finite double


def _integer(low: int | None) -> dict[str, Any]:
    return {"type": ["integer", "null"], "minimum": INT64[0] if low is None else low, "maximum": INT64[1]}


def _number(low: float | None, high: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": ["number", "null"], "minimum": -_DOUBLE, "maximum": _DOUBLE}
    if low is not None:
        out["minimum"] = low
    if high is not None:
        out["maximum"] = high
    return out


_PART = {  # a content part: any type; a text part carries a string 'text' (another may, or null)
    "type": "object", "required": ["type"],
    "properties": {"type": _STR, "text": {"type": ["string", "null"]}},
    "if": {"properties": {"type": {"const": "text"}}}, "then": {"required": ["text"], "properties": {"text": _STR}},
}
_CONTENT = {"anyOf": [_STR, {"type": "array", "items": _PART}]}
_MESSAGE = {
    "type": "object", "required": ["role"],
    "properties": {"role": {"enum": list(ROLES)}, "name": {"type": ["string", "null"]}, "content": {"anyOf": [_CONTENT, _NULL]}},
    # only an assistant (or function) message may come without content: one that calls a tool
    "if": {"properties": {"role": {"enum": sorted(NO_CONTENT_ROLES)}}},
    "then": {},
    "else": {"required": ["content"], "properties": {"content": _CONTENT}},
}


def _common(kind: str) -> dict[str, Any]:
    props: dict[str, Any] = {
        "model": {"type": "string", "minLength": 1, "description": "a model some backend serves"},
        "stream": _BOOL,
        "stop": {"anyOf": [_STR, {"type": "array", "items": _STR}, _NULL]},
        "stream_options": {"type": ["object", "null"], "properties": {"include_usage": _BOOL}},
        "user": {"type": ["string", "null"]},
        "response_format": {"type": ["object", "null"]},
        "logit_bias": {"type": ["object", "null"],
                       "additionalProperties": {"type": "number", "minimum": -_DOUBLE, "maximum": _DOUBLE}},
    }
    props |= {name: _integer(low) for name, low in INTEGERS.items()}
    props |= {name: _number(low, high) for name, (low, high) in NUMBERS.items()}
    if kind == "chat":
        props |= {"logprobs": _BOOL, "parallel_tool_calls": _BOOL,
                  "tool_choice": {"type": ["string", "object", "null"]},
                  "tools": {"type": ["array", "null"], "items": {"type": "object"}}}
    else:
        props |= {"logprobs": _integer(0), "echo": _BOOL, "suffix": {"type": ["string", "null"]}}
    return props


CHAT_REQUEST: dict[str, Any] = {
    "type": "object", "title": "ChatCompletionRequest", "required": ["model", "messages"],
    "additionalProperties": True,
    "properties": {**_common("chat"), "messages": {"type": "array", "minItems": 1, "items": _MESSAGE}},
}
_IDS = {"type": "array", "minItems": 1, "items": {"type": "integer"}}
COMPLETION_REQUEST: dict[str, Any] = {
    "type": "object", "title": "CompletionRequest", "required": ["model", "prompt"],
    "additionalProperties": True,
    "properties": {**_common("completion"), "prompt": {"anyOf": [
        _STR, {"type": "array", "minItems": 1, "items": _STR}, _IDS, {"type": "array", "minItems": 1, "items": _IDS}]}},
}

_ERROR = {
    "type": "object", "title": "ErrorResponse", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type"], "properties": {
        "message": _STR, "type": _STR, "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}},
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"description": what, "content": {"application/json": {"schema": _ERROR}}}
    for status, what in [
        (400, "not a well-formed request of this kind (invalid_request_error, naming the field)"),
        (404, "no backend serves the model (model_not_found)"),
        (413, "the body is over limits.max_body_bytes (request_too_large)"),
        (429, "every backend is busy and the router's queue is full, or the backend's own 429"),
        (502, "every backend tried failed (backend_error, backend_unreachable, backend_garbage)"),
        (503, "no healthy backend, no slot within limits.queue_timeout_s, or the router is stopping"),
        (504, "past timeouts.total_s, or no first token within timeouts.read_s"),
    ]
}


def request_body(schema: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI ``requestBody`` of ``schema`` in JSON (for a FastAPI route's ``openapi_extra``)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
