"""What the router needs to know about the OpenAI API: request checks, errors, SSE counting.

The router forwards bodies as they are (plus the priority field), but a body that OpenAI's schema calls
malformed is refused here with 400, before any backend sees it: a backend may answer such a request with
500 (llama.cpp does for ``"content": null`` or ``"temperature": "hot"``), which the router would take for
a failing backend and retry. Checked: the body is a JSON object nested at most
:data:`lenpred.serve.wire.MAX_JSON_DEPTH` levels; ``model`` is a string; chat requests have ``messages``
(objects with one of OpenAI's roles, :data:`ROLES`, and a ``content`` that is a string or a list of content
parts, null only for an assistant or function message; a part is an object with a string ``type``, a ``text``
part has a string ``text``), completions a ``prompt`` (a string, a list of strings, or token ids); the common
fields, when present and not null, have OpenAI's types and ranges (:data:`INTEGERS`, :data:`NUMBERS`,
``stream``, ``stop``, ``stream_options``, ``logprobs``, ...). Unknown fields pass through untouched. Text
that is not Unicode (a lone surrogate) is refused too: no backend can read it. The error body and a
message's text are the prediction service's (:mod:`lenpred.serve.wire`); :mod:`lenpred.route.schema`
is the same contract as JSON schemas (the router's OpenAPI document).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from lenpred.serve.wire import content_text, error_body, find_lone_surrogate, may_hold_surrogate, too_deep

__all__ = ["INT64", "INTEGERS", "NO_CONTENT_ROLES", "NUMBERS", "ROLES", "ApiError", "Query", "SSECounter", "flatten_content",
           "parse_request", "with_osl", "sse_error_event"]

# integer fields: the lowest value allowed (None: any); every integer must fit in 64 bits, as the engines parse it
INTEGERS: dict[str, int | None] = {"n": 1, "max_tokens": 1, "max_completion_tokens": 1, "seed": None,
                                   "top_logprobs": 0, "best_of": 1, "top_k": None}
# the interoperable integer range of I-JSON (RFC 7493): +-(2**53 - 1), the integers every JSON parser holds exactly.
# The OpenAPI document states this bound, and a schema tool that compares bounds as doubles (schemathesis does) reads
# any integer past it as past it; with an int64 bound (2**63 - 1024) it read 2**63 - 1023 as equal to the bound.
INT64 = (-((1 << 53) - 1), (1 << 53) - 1)
# number fields: (lowest, highest) allowed (None: unbounded), OpenAI's ranges where vLLM, SGLang and llama.cpp
# agree with them (none caps the temperature at OpenAI's 2); every number must be a finite double
NUMBERS: dict[str, tuple[float | None, float | None]] = {
    "temperature": (0.0, None), "top_p": (0.0, 1.0), "frequency_penalty": (-2.0, 2.0),
    "presence_penalty": (-2.0, 2.0), "min_p": (0.0, 1.0), "repetition_penalty": (0.0, None)}
# roles whose message may have no content (a tool call instead)
NO_CONTENT_ROLES = frozenset({"assistant", "function"})
# OpenAI's message roles (function: the deprecated form of tool); any other is refused here, not by a backend
# (llama-cpp-python's chat template answers an unknown role with a 500)
ROLES = ("system", "developer", "user", "assistant", "tool", "function")


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
    parts: bool = False  # chat: some message's content is a list of parts (a string-only backend needs it flattened)
    media: str | None = None  # chat: where the first part that is not text is ("messages[0].content[1]")
    media_type: str | None = None  # ... and its type ("image_url")

    @property
    def chars(self) -> int:
        if self.messages is not None:
            return sum(len(m["content"]) for m in self.messages)
        return len(self.prompt or "")


def _shown(v: Any) -> str:
    """A value as an error message quotes it: short."""
    if isinstance(v, dict | list):
        return "an object" if isinstance(v, dict) else "an array"
    return json.dumps(v)[:40]


def _integral(v: Any) -> int | None:
    """``v`` as an int when it is a JSON integer: an int, or a float without a fraction (JSON Schema's integer,
    which the engines' parsers take too); None otherwise."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _int_field(body: dict[str, Any], name: str, low: int | None) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    i = _integral(v)
    lo = INT64[0] if low is None else low
    if i is None or not lo <= i <= INT64[1]:
        what = "an integer" if low is None else f"an integer >= {low}"
        if i is not None and i >= lo:
            what += f" in the range every JSON parser holds exactly (at most {INT64[1]})"
        raise ApiError(400, f"'{name}' must be {what}, got {_shown(v)}", param=name)
    return i


def _as_float(v: Any) -> float | None:
    """``v`` as a finite double, or None when it is not a JSON number that is one (a boolean, NaN, 1e400)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _number_field(body: dict[str, Any], name: str, low: float | None, high: float | None) -> None:
    v = body.get(name)
    if v is None:
        return
    f = _as_float(v)
    if f is None or (low is not None and f < low) or (high is not None and f > high):
        bounds = (f" from {low:g} to {high:g}" if low is not None and high is not None
                  else f" >= {low:g}" if low is not None else "")
        raise ApiError(400, f"'{name}' must be a number{bounds}, got {_shown(v)}", param=name)


def _typed_field(body: dict[str, Any], name: str, types: tuple[type, ...], what: str) -> None:
    v = body.get(name)
    if v is not None and not isinstance(v, types):
        raise ApiError(400, f"'{name}' must be {what}, got {_shown(v)}", param=name)


def _check_common(body: dict[str, Any], kind: str) -> None:
    """The common optional fields: OpenAI's types and ranges when present and not null."""
    for name, low in INTEGERS.items():
        _int_field(body, name, low)
    for name, (lo, hi) in NUMBERS.items():
        _number_field(body, name, lo, hi)
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and all(isinstance(x, str) for x in stop)):
        raise ApiError(400, f"'stop' must be a string or a list of strings, got {_shown(stop)}", param="stop")
    opts = body.get("stream_options")
    _typed_field(body, "stream_options", (dict,), "an object")
    if isinstance(opts, dict) and opts.get("include_usage") is not None and not isinstance(opts["include_usage"], bool):
        raise ApiError(400, "'stream_options.include_usage' must be true or false", param="stream_options.include_usage")
    if kind == "chat":
        _typed_field(body, "logprobs", (bool,), "true or false")
        _typed_field(body, "parallel_tool_calls", (bool,), "true or false")
        _typed_field(body, "tool_choice", (str, dict), "a string or an object")
        tools = body.get("tools")
        if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
            raise ApiError(400, f"'tools' must be a list of objects, got {_shown(tools)}", param="tools")
    else:
        _int_field(body, "logprobs", 0)
        _typed_field(body, "echo", (bool,), "true or false")
        _typed_field(body, "suffix", (str,), "a string")
    _typed_field(body, "user", (str,), "a string")
    _typed_field(body, "response_format", (dict,), "an object")
    bias = body.get("logit_bias")
    if bias is not None and not (isinstance(bias, dict) and all(_as_float(x) is not None for x in bias.values())):
        raise ApiError(400, "'logit_bias' must be an object of token ids to numbers", param="logit_bias")


def _content_text(content: Any, i: int, role: str) -> str:
    where = f"messages[{i}].content"
    if isinstance(content, str):
        return content
    if content is None:
        if role in NO_CONTENT_ROLES:
            return ""
        raise ApiError(400, f"{where} must be a string or a list of content parts (a {role} message needs "
                            "content; only an assistant or function message may leave it null)", param=where)
    if isinstance(content, list):  # content parts: keep the text ones
        for j, p in enumerate(content):
            if not isinstance(p, dict) or not isinstance(p.get("type"), str):
                raise ApiError(400, f"{where}[{j}] must be an object with a string 'type'", param=f"{where}[{j}]")
            text = p.get("text")
            if (p["type"] == "text" or text is not None) and not isinstance(text, str):
                raise ApiError(400, f"{where}[{j}].text must be a string", param=f"{where}[{j}].text")
        return content_text(content)
    raise ApiError(400, f"{where} must be a string or a list of content parts, got {_shown(content)}", param=where)


def _messages(body: dict[str, Any]) -> tuple[tuple[dict[str, str], ...], bool, tuple[str, str] | None]:
    """(role + text of each message, whether any content is a list of parts, where the first non-text part is
    and its type)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ApiError(400, "'messages' must be a non-empty list of {role, content} objects", param="messages")
    out = []
    parts, media = False, None
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
        if m["role"] not in ROLES:
            raise ApiError(400, f"messages[{i}].role must be one of {', '.join(ROLES)}; got {_shown(m['role'])}",
                           param=f"messages[{i}].role")
        if m.get("name") is not None and not isinstance(m["name"], str):
            raise ApiError(400, f"messages[{i}].name must be a string", param=f"messages[{i}].name")
        content = m.get("content")
        out.append({"role": m["role"], "content": _content_text(content, i, m["role"])})
        if isinstance(content, list):
            parts = True
            if media is None:
                j = next((j for j, p in enumerate(content) if p["type"] != "text"), None)
                if j is not None:
                    media = f"messages[{i}].content[{j}]", content[j]["type"]
    return tuple(out), parts, media


def flatten_content(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with every chat message's list of text parts joined into one string (newlines between the
    parts, as vLLM does for a model whose template takes strings): for a backend that takes only string
    content (llama-cpp-python's chat templates answer a list with a 500). A new dict; the request's own body
    is not changed. Non-text parts must have been kept away from such a backend (``Query.media``)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not any(isinstance(m.get("content"), list) for m in msgs):
        return body
    flat = [{**m, "content": content_text(m["content"])} if isinstance(m.get("content"), list) else m for m in msgs]
    return {**body, "messages": flat}


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
    if all(_integral(x) is not None for x in p):
        return None, len(p), 1
    if all(isinstance(x, list) and x and all(_integral(t) is not None for t in x) for x in p):
        return None, len(p[0]), len(p)
    raise bad


def _decode(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or :class:`ApiError` (400) naming why not."""
    deep = too_deep(raw)  # before parsing: the parser (and every walk after it) recurses per level
    if deep is not None:
        raise ApiError(400, deep, code="json_too_deep")
    try:
        body = json.loads(raw)
    except UnicodeDecodeError:
        raise ApiError(400, "the request body is not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"the request body is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except (ValueError, RecursionError) as e:  # an integer of more digits than Python converts
        raise ApiError(400, f"the request body is not valid JSON ({e})"[:200]) from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    if may_hold_surrogate(raw):
        bad = find_lone_surrogate(body)
        if bad is not None:  # no backend can read it (llama.cpp answers 500): refused here, not retried
            raise ApiError(400, str(bad), code="invalid_text", param=bad.param)
    return body


def parse_request(raw: bytes, kind: str) -> tuple[dict[str, Any], Query]:
    """The body as a dict and what the router reads from it; :class:`ApiError` (400) if it is not a
    well-formed request of this kind."""
    body = _decode(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "you must provide a model parameter (a non-empty string)", param="model")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    _check_common(body, kind)
    if kind == "chat":
        messages, parts, media = _messages(body)
    else:
        text, ids, n_prompts = _prompt(body)
    n = _int_field(body, "n", 1) or 1
    max_tokens = _int_field(body, "max_tokens", 1)
    if kind == "chat":
        max_tokens = _int_field(body, "max_completion_tokens", 1) or max_tokens
        q = Query("chat", model, bool(stream), None, messages, None, n, max_tokens, parts,
                  *(media or (None, None)))
    else:
        q = Query("completion", model, bool(stream), text, None, ids, n * n_prompts, max_tokens)
    return body, q


# a data event carries generated text: a non-empty string under one of these keys (the role chunk at the start
# of a chat stream, the finish chunk and the usage chunk carry none, and are no token)
_TEXT = re.compile(rb'"(?:content|reasoning_content|text|arguments)"\s*:\s*"(?!")')
_SPACE = frozenset(b" \t\r\x0b\x0c")  # what bytes.strip() takes off a line's payload (a line has no \n)


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
        """Account for ``chunk``; returns the number of new token events in it. The chunk is read in place:
        no list of lines and no copy of a line or its payload for an event of the usual shape (``data:``, at
        most one space, then the payload); any other (more whitespace) is copied, stripped and read exactly."""
        data = self._tail + chunk if self._tail else chunk
        end = data.rfind(b"\n")
        if end < 0:  # an incomplete line waits for the next chunk
            self._tail = data
            return 0
        self._tail = data[end + 1:] if end + 1 < len(data) else b""
        new = 0
        pos = 0
        while pos <= end:
            nl = data.find(b"\n", pos, end + 1)
            if data.startswith(b"data:", pos, nl):
                start = pos + 5
                if start < nl and data[start] == 32:  # "data: {...}"
                    start += 1
                c = data[start] if start < nl else -1
                if c in _SPACE:  # more whitespace around the payload than one space: the exact reading
                    new += self._payload(data[pos + 5:nl].strip())
                elif c == 91 and data.startswith(b"[DONE]", start) and data[start:nl].strip() == b"[DONE]":  # [
                    self.done = True
                elif c == 123 and data.startswith(b'{"error"', start):  # {
                    self.error = _error_message(data[start:nl].strip())
                else:
                    self.events += 1
                    if _TEXT.search(data, start, nl) is not None:
                        new += 1
                    if data.find(b'"usage"', start, nl) >= 0 and data.find(b"completion_tokens", start, nl) >= 0:
                        self._usage(data[start:nl])
            pos = nl + 1
        self.token_events += new
        return new

    def _payload(self, payload: bytes) -> int:
        """One data event's stripped payload, read as a copy: 1 if it is a token event."""
        if payload == b"[DONE]":
            self.done = True
        elif payload.startswith(b'{"error"'):
            self.error = _error_message(payload)
        else:
            self.events += 1
            if b'"usage"' in payload and b"completion_tokens" in payload:
                self._usage(payload)
            return 1 if _TEXT.search(payload) is not None else 0
        return 0

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


def with_osl(body: dict[str, Any], tokens: float | None) -> dict[str, Any]:
    """``body`` with ``nvext.agent_hints.osl`` = the predicted output tokens (NVIDIA Dynamo's expected
    output sequence length), unless there is no prediction or the client set an ``osl`` itself; the
    client's other ``nvext`` fields are kept. A new dict: the request's own body is not changed."""
    ext = body.get("nvext")
    if tokens is None or (ext is not None and not isinstance(ext, dict)):
        return body
    hints = (ext or {}).get("agent_hints")
    if hints is not None and (not isinstance(hints, dict) or "osl" in hints):
        return body
    return {**body, "nvext": {**(ext or {}), "agent_hints": {**(hints or {}), "osl": max(1, int(round(tokens)))}}}
