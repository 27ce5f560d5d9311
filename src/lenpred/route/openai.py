"""What the router needs to know about the OpenAI API: request checks, errors, SSE counting.

The router forwards bodies as they are (plus the priority field), so it checks only what it reads
itself: the body is a JSON object, ``model`` is a string, chat requests have ``messages`` (a list of
objects with a ``role``), completions a ``prompt`` (a string, a list of strings, or token ids),
``stream`` / ``n`` / ``max_tokens`` have the right types. Everything else is the backend's to judge,
except text that is not Unicode (a lone surrogate), which no backend can read: it is refused here.
The error body and a message's text are the prediction service's (:mod:`lenpred.serve.openai`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from lenpred.serve.openai import content_text, error_body, find_lone_surrogate, may_hold_surrogate

__all__ = ["ApiError", "Query", "SSECounter", "parse_request", "sse_error_event"]


class ApiError(Exception):
    """An error answered to the client in OpenAI's format: ``{"error": {message, type, param, code}}``."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)


def sse_error_event(message: str, type_: str = "server_error", code: str | None = "backend_failed") -> bytes:
    """A clean end for a stream that broke after it started: an error event, then ``[DONE]``
    (openai-python raises ``APIError`` on the first; plain SSE readers stop at the second)."""
    return b"data: " + json.dumps(error_body(message, type_, code)).encode() + b"\n\ndata: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Query:
    """What the estimator and the dispatcher read from a request."""

    kind: str  # "chat" or "completion"
    model: str
    stream: bool
    prompt: str | None  # completions: the (first) prompt text
    messages: tuple[dict[str, str], ...] | None  # chat: role + text content
    prompt_token_ids: int | None  # completions given as token ids: how many
    n_sequences: int  # choices generated: n x number of prompts
    max_tokens: int | None

    @property
    def chars(self) -> int:
        if self.messages is not None:
            return sum(len(m["content"]) for m in self.messages)
        return len(self.prompt or "")


def _int_field(body: dict[str, Any], name: str, low: int) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ApiError(400, f"'{name}' must be an integer >= {low}, got {json.dumps(v)[:40]}", param=name)
    return v


def _content_text(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):  # content parts: keep the text ones
        if not all(isinstance(p, dict) for p in content):
            raise ApiError(400, f"messages[{i}].content parts must be objects", param=f"messages[{i}].content")
        return content_text(content)
    raise ApiError(400, f"messages[{i}].content must be a string or a list of content parts",
                   param=f"messages[{i}].content")


def _messages(body: dict[str, Any]) -> tuple[dict[str, str], ...]:
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "'messages' must be a non-empty list of {role, content} objects", param="messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
        out.append({"role": m["role"], "content": _content_text(m.get("content"), i)})
    return tuple(out)


def _prompt(body: dict[str, Any]) -> tuple[str | None, int | None, int]:
    """(first prompt text, token-id count of the first prompt, number of prompts)."""
    p = body.get("prompt")
    bad = ApiError(400, "'prompt' must be a string, a list of strings, or a list of token ids", param="prompt")
    if isinstance(p, str):
        return p, None, 1
    if not isinstance(p, list) or not p:
        raise bad
    if all(isinstance(x, str) for x in p):
        return p[0], None, len(p)
    if all(isinstance(x, int) and not isinstance(x, bool) for x in p):
        return None, len(p), 1
    if all(isinstance(x, list) and x and all(isinstance(t, int) for t in x) for x in p):
        return None, len(p[0]), len(p)
    raise bad


def parse_request(raw: bytes, kind: str) -> tuple[dict[str, Any], Query]:
    """The body as a dict and what the router reads from it; :class:`ApiError` (400) if it is not a
    request of this kind."""
    try:
        body = json.loads(raw)
    except UnicodeDecodeError:
        raise ApiError(400, "the request body is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"the request body is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    if may_hold_surrogate(raw):
        bad = find_lone_surrogate(body)
        if bad is not None:  # no backend can read it (llama.cpp answers 500): refused here, not retried
            raise ApiError(400, str(bad), code="invalid_text", param=bad.param)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "you must provide a model parameter (a non-empty string)", param="model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    n = _int_field(body, "n", 1) or 1
    max_tokens = _int_field(body, "max_tokens", 1)
    if kind == "chat":
        max_tokens = _int_field(body, "max_completion_tokens", 1) or max_tokens
        q = Query("chat", model, stream, None, _messages(body), None, n, max_tokens)
    else:
        text, ids, n_prompts = _prompt(body)
        q = Query("completion", model, stream, text, None, ids, n * n_prompts, max_tokens)
    return body, q


# a data event carries generated text: a non-empty string under one of these keys (the role chunk at the start
# of a chat stream, the finish chunk and the usage chunk carry none, and are no token)
_TEXT = re.compile(rb'"(?:content|reasoning_content|text|arguments)"\s*:\s*"(?!")')


class SSECounter:
    """Counts the data events of an SSE stream as it passes, and among them the token events (one ~ one
    token on vLLM, SGLang and llama.cpp: those with generated text), notes ``[DONE]``, an error event, and
    the exact ``usage.completion_tokens`` when the stream carries it. Bytes are forwarded untouched; this
    only reads them."""

    __slots__ = ("events", "token_events", "done", "usage_tokens", "error", "_tail")

    def __init__(self) -> None:
        self.events = 0  # data events other than [DONE] and errors: the backend has started answering
        self.token_events = 0
        self.done = False
        self.usage_tokens: int | None = None
        self.error: str | None = None
        self._tail = b""

    def feed(self, chunk: bytes) -> int:
        """Account for ``chunk``; returns the number of new token events in it."""
        data = self._tail + chunk if self._tail else chunk
        lines = data.split(b"\n")
        self._tail = lines.pop()  # an incomplete last line waits for the next chunk
        new = 0
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
            elif b'"error"' in payload and payload.startswith(b'{"error"'):
                self.error = _error_message(payload)
            else:
                self.events += 1
                if _TEXT.search(payload) is not None:
                    new += 1
                if b'"usage"' in payload and b"completion_tokens" in payload:
                    self._usage(payload)
        self.token_events += new
        return new

    def _usage(self, payload: bytes) -> None:
        try:
            u = json.loads(payload).get("usage") or {}
            if isinstance(u.get("completion_tokens"), int):
                self.usage_tokens = u["completion_tokens"]
        except (ValueError, AttributeError):
            pass

    @property
    def tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.token_events


def _error_message(payload: bytes) -> str:
    try:
        e = json.loads(payload)["error"]
        return str(e.get("message", e)) if isinstance(e, dict) else str(e)
    except (ValueError, KeyError, TypeError):
        return payload[:200].decode(errors="replace")


def backend_message(content: bytes, limit: int = 300) -> str:
    """One line from a backend's error body: its OpenAI error message, FastAPI's ``detail``, or the text."""
    try:
        j = json.loads(content)
        if isinstance(j, dict):
            e = j.get("error", j.get("detail", j.get("message")))
            if isinstance(e, dict):
                e = e.get("message", e)
            if e is not None:
                return " ".join(str(e).split())[:limit]
    except (ValueError, UnicodeDecodeError):
        pass
    text = content.decode(errors="replace").strip()
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return (first or "(empty body)")[:limit]
