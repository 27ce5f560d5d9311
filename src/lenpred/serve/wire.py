"""The OpenAI wire format that the prediction service and the router share: the error body, the text of
a chat message, and the door check for text that is not Unicode.

* :func:`error_body` -- ``{"error": {"message", "type", "param", "code"}}``, every error both servers answer;
* :func:`content_text` -- a message's text: its ``content`` string, or its ``text`` parts joined by
  newlines (other parts, ``image_url`` and the like, carry no text for a length prediction);
* :func:`find_lone_surrogate` / :class:`InvalidText` -- a JSON string may escape half of a UTF-16
  surrogate pair on its own (``"\\ud800"``): ``json.loads`` accepts it, but the result is not Unicode,
  and a tokenizer or a backend fails on it (llama.cpp answers 500). Both servers refuse such a request
  at the door with 400, naming where the surrogate is;
* :func:`too_deep` -- the door check for nesting: a body whose arrays and objects nest deeper than
  :data:`MAX_JSON_DEPTH` is refused with 400 before it is parsed. Python's parser, and every recursive
  walk over a parsed body (the surrogate check, the re-encoding a router sends on, pydantic), would
  otherwise fail on a body nested a few thousand levels deep with a ``RecursionError``.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "InvalidText", "content_text", "error_body", "find_lone_surrogate", "json_depth",
           "may_hold_surrogate", "too_deep"]

# deeper than any OpenAI request (a tool's JSON schema nested ten levels is ~30), far below Python's recursion
# limit; the default of serde_json, the parser of several Rust servers
MAX_JSON_DEPTH = 128

_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED = re.compile(rb"\\u[dD][89abcdefABCDEF]")  # how a surrogate appears in a JSON text (UTF-8 cannot carry one)
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a string literal, escapes included
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_FIX = "send the text as valid UTF-8 (in JSON, a \\uD800-\\uDFFF escape must be half of a surrogate pair)"


def error_body(message: str, type_: str = "invalid_request_error", code: str | None = None,
               param: str | None = None) -> dict[str, Any]:
    """OpenAI's error body."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _part(p: Any, key: str) -> Any:
    return p.get(key) if isinstance(p, dict) else getattr(p, key, None)


def content_text(content: Any) -> str:
    """The text of a message's ``content``: the string, or the ``text`` parts of a list joined by newlines
    (parts as dicts or as objects with ``type`` and ``text``); None is empty."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(t for p in content if _part(p, "type") == "text" and isinstance(t := _part(p, "text"), str))


class InvalidText(ValueError):
    """A string of a request holds a lone surrogate. ``param`` names where (``messages[0].content``)."""

    def __init__(self, param: str, text: str, index: int) -> None:
        self.param = param
        self.problem = (f"{param} holds a lone surrogate (\\u{ord(text[index]):04x} at character {index}), "
                        "which is not Unicode text")
        self.fix = _FIX
        super().__init__(f"{self.problem} -- fix: {_FIX}")


def may_hold_surrogate(raw: bytes) -> bool:
    """False when the JSON text ``raw`` cannot hold a surrogate (the fast path: no escape of one)."""
    return _ESCAPED.search(raw) is not None


def find_lone_surrogate(obj: Any, param: str = "") -> InvalidText | None:
    """The first string in a decoded JSON value (keys included) that holds a lone surrogate, as the error
    to raise; None when every string is Unicode. A valid pair is decoded to one character by ``json``."""
    if isinstance(obj, str):
        m = _SURROGATE.search(obj)
        return InvalidText(param or "the request", obj, m.start()) if m else None
    if isinstance(obj, dict):
        for k, v in obj.items():
            where = f"{param}.{k}" if param else str(k)
            bad = find_lone_surrogate(k, f"a key of {param or 'the request'}") or find_lone_surrogate(v, where)
            if bad is not None:
                return bad
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            bad = find_lone_surrogate(v, f"{param}[{i}]")
            if bad is not None:
                return bad
    return None


def json_depth(raw: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``raw`` nest (0 for a scalar), brackets inside strings
    not counted. Linear in C and numpy, without parsing: safe on any input."""
    import numpy as np

    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    b = np.frombuffer(brackets, np.uint8)
    steps = ((b >> 1) & 1).astype(np.int64) * 2 - 1  # '[' and '{' have bit 1 set (+1), ']' and '}' not (-1)
    return int(np.cumsum(steps).max())


def too_deep(raw: bytes, limit: int = MAX_JSON_DEPTH) -> str | None:
    """The error message for a JSON text nested deeper than ``limit``, or None. A body with at most ``limit``
    brackets in all (most requests) is let through without a closer look."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return None
    depth = json_depth(raw)
    if depth <= limit:
        return None
    return (f"the request body nests arrays and objects {depth} levels deep, deeper than the limit of {limit} "
            "levels")
