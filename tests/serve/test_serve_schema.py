"""The wire format: exactly one of prompt / messages, content parts, roles, errors in OpenAI's shape."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from lenpred.serve.schema import ChatMessage, ErrorResponse, PredictRequest, PredictResponse


@pytest.mark.parametrize("body, expect", [
    ({}, "got neither"),
    ({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "got both"),
    ({"prompt": ""}, "'prompt' is empty"),
    ({"prompt": "   \n"}, "'prompt' is empty"),
    ({"messages": []}, "empty list"),
    ({"messages": [{"role": "user", "content": ""}]}, "every message"),
    ({"messages": [{"role": "usr", "content": "x"}]}, "unknown role 'usr'"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "needs a 'text' string"),
    ({"prompt": 3}, "valid string"),
    ({"prompt": "x", "temperature": 0.2}, "Extra inputs"),
])
def test_bad_requests_are_refused_with_a_reason(body, expect) -> None:
    with pytest.raises(ValidationError, match=expect):
        PredictRequest.model_validate(body)


def test_content_parts_keep_text_and_ignore_the_rest() -> None:
    m = ChatMessage.model_validate({"role": "user", "content": [
        {"type": "text", "text": "one"}, {"type": "image_url", "image_url": {"url": "data:..."}},
        {"type": "text", "text": "two"}]})
    assert m.text == "one\ntwo"
    assert m.as_template_message() == {"role": "user", "content": "one\ntwo"}
    # OpenAI keys the service does not read are accepted (a router forwards whole messages)
    m2 = ChatMessage.model_validate({"role": "assistant", "content": None, "tool_calls": []})
    assert m2.text == ""


def test_a_valid_request_and_the_model_field() -> None:
    r = PredictRequest(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
                       model="smollm2")
    assert r.prompt is None and r.messages[1].text == "hi" and r.model == "smollm2"


def test_error_and_response_shapes() -> None:
    e = ErrorResponse.of("bad", "invalid_request_error", "prompt", "x").model_dump()
    assert e == {"error": {"message": "bad", "type": "invalid_request_error", "param": "prompt", "code": "x"}}
    r = PredictResponse(predicted_tokens=1.0, q10=None, q50=None, q90=None, head="h", card_hash=None, elapsed_ms=0.1)
    assert set(r.model_dump()) >= {"predicted_tokens", "q10", "q50", "q90", "head", "card_hash", "elapsed_ms"}
