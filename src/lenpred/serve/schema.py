"""The prediction service's wire format: pydantic models for requests, responses and errors.

These are the API (FastAPI builds the OpenAPI schema from them) and the in-process contract the
router codes against. A request carries either ``prompt`` (a string, treated as one user message)
or ``messages`` (OpenAI chat messages: ``content`` a string or a list of content parts, of which
the ``text`` parts are read and any other kind, e.g. ``image_url``, is ignored); exactly one.
Errors use OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``. A request whose text holds
a lone surrogate is refused (:func:`lenpred.serve.wire.find_lone_surrogate`, the router's door check too).
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lenpred.serve.wire import content_text, find_lone_surrogate

__all__ = [
    "ContentPart", "ChatMessage", "PredictRequest", "PredictResponse", "ErrorDetail", "ErrorResponse",
    "HealthResponse", "ROLES",
]

ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class ContentPart(BaseModel):
    """One part of a message's content list: ``{"type": "text", "text": ...}`` is read; other types
    (``image_url``, ``input_audio``, ...) are accepted and ignored (a length head reads text)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="part type; only 'text' parts enter the prediction")
    text: str | None = Field(None, description="the text of a 'text' part")

    @model_validator(mode="after")
    def _text_part_has_text(self) -> Self:
        if self.type == "text" and self.text is None:
            raise ValueError("a content part of type 'text' needs a 'text' string")
        return self


class ChatMessage(BaseModel):
    """An OpenAI chat message. Other OpenAI keys (``name``, ``tool_calls``, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    role: str = Field(description=f"one of {', '.join(ROLES)}")
    content: str | list[ContentPart] | None = Field(
        None, description="a string, or a list of content parts (text parts are read)")

    @field_validator("role")
    @classmethod
    def _known_role(cls, v: str) -> str:
        if v not in ROLES:
            raise ValueError(f"unknown role {v!r}: use one of {', '.join(ROLES)}")
        return v

    @property
    def text(self) -> str:
        """The message's text: the string, or its text parts joined by newlines."""
        return content_text(self.content)

    def as_template_message(self) -> dict[str, str]:
        """``{"role", "content"}`` with string content, as chat templates expect."""
        return {"role": self.role, "content": self.text}


class PredictRequest(BaseModel):
    """Predict the output length of one request: ``prompt`` or ``messages``, exactly one."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"prompt": "Write a haiku about tea."},
                     {"messages": [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "What is a GPU?"}]}]})

    prompt: str | None = Field(None, description="prompt text, rendered as one user message")
    messages: list[ChatMessage] | None = Field(None, description="OpenAI-style chat messages")
    model: str | None = Field(
        None, description="the model the request is for (informational: the head decides the model)")

    @model_validator(mode="before")
    @classmethod
    def _unicode(cls, data: Any) -> Any:
        """Every string must be Unicode: a lone surrogate fails a tokenizer (and, before this check, the
        request's whole micro-batch)."""
        bad = find_lone_surrogate(data) if isinstance(data, dict) else None
        if bad is not None:
            raise bad
        return data

    @model_validator(mode="after")
    def _one_input(self) -> Self:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' (a string) and 'messages' (a list of chat messages), "
                             f"got {'both' if self.prompt is not None else 'neither'}")
        if self.prompt is not None and not self.prompt.strip():
            raise ValueError("'prompt' is empty")
        if self.messages is not None:
            if not self.messages:
                raise ValueError("'messages' is an empty list")
            if not any(m.text.strip() for m in self.messages):
                raise ValueError("every message in 'messages' is empty (no text)")
        return self


class PredictResponse(BaseModel):
    """Predicted total output tokens of the request, its 10/50/90% quantiles, and what made them."""

    predicted_tokens: float = Field(description="point prediction of the total output tokens (the head's median)")
    q10: float | None = Field(None, description="10% quantile of the output length (tokens)")
    q50: float | None = Field(None, description="50% quantile (tokens)")
    q90: float | None = Field(None, description="90% quantile (tokens)")
    head: str = Field(description="name of the head that served the prediction (its directory name)")
    card_hash: str | None = Field(None, description="card hash of the run the head was trained on")
    elapsed_ms: float = Field(description="time from the request's arrival to its prediction, queueing included (ms)")
    predictor: str | None = Field(None, description="the head's predictor (proxy, ridge, mlp, ...)")
    prompt_tokens: int | None = Field(
        None, description="tokens of the rendered prompt (hidden-state heads; the target's own count)")


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error body."""

    error: ErrorDetail

    @classmethod
    def of(cls, message: str, type: str, param: str | None = None, code: str | None = None) -> ErrorResponse:
        return cls(error=ErrorDetail(message=message, type=type, param=param, code=code))


class HealthResponse(BaseModel):
    status: str = Field(description="'ok' while the batcher runs")
    head: str
    predictor: str
    input_kind: str = Field(description="'text' (proxy: no target model) or 'features' (the service runs the prefill)")
    card_hash: str | None
    model: str | None = Field(None, description="target model whose prefill the service runs (hidden-state heads)")
    max_batch: int
    max_wait_ms: float
    queue_depth: int
    model_calls: int
    uptime_s: float
    extra: dict[str, Any] = Field(default_factory=dict)
