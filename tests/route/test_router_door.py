"""What the router refuses at the door, before any backend sees it: a body nested too deep, a body over
the size limit, and a request that OpenAI's schema calls malformed (which a backend may answer with 500,
and the router would then retry elsewhere and answer 502). And what it must not refuse: valid OpenAI
bodies in their other shapes, unknown fields included."""

from __future__ import annotations

import json

import httpx
from route_testing import RouterThread, sse_data

from lenpred.route.config import RouterConfig
from lenpred.serve.wire import MAX_JSON_DEPTH, json_depth, too_deep


def _cfg(stubs, **limits) -> RouterConfig:
    return RouterConfig.from_dict({
        "backends": [{"url": s.url, "name": s.name} for s in stubs], "policy": "round-robin", "log_requests": False,
        "health": {"interval_s": 0.2, "timeout_s": 5.0}, "timeouts": {"connect_s": 5.0, "read_s": 3.0, "total_s": 30.0},
        "limits": limits,
    })


def _post(url: str, body: dict | bytes, path: str = "/v1/chat/completions") -> httpx.Response:
    if isinstance(body, dict):
        return httpx.post(url + path, json=body, timeout=15)
    return httpx.post(url + path, content=body, headers={"content-type": "application/json"}, timeout=15)


def _openai_error(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status and resp.headers["content-type"] == "application/json", resp.text[:300]
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error", err
    return err


USER = [{"role": "user", "content": "hi"}]
# (what, body, path, the field named in the error)
MALFORMED = [
    ("null content of a user message", {"model": "stub", "messages": [{"role": "user", "content": None}]},
     "/v1/chat/completions", "messages[0].content"),
    ("a user message without content", {"model": "stub", "messages": [{"role": "user"}]},
     "/v1/chat/completions", "messages[0].content"),
    ("content of another type", {"model": "stub", "messages": [{"role": "user", "content": 7}]},
     "/v1/chat/completions", "messages[0].content"),
    ("a content part that is not an object", {"model": "stub", "messages": [{"role": "user", "content": ["hi"]}]},
     "/v1/chat/completions", "messages[0].content[0]"),
    ("a text part without text", {"model": "stub", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "/v1/chat/completions", "messages[0].content[0].text"),
    ("a role OpenAI does not have", {"model": "stub", "messages": [{"role": "robot", "content": "beep"}]},
     "/v1/chat/completions", "messages[0].role"),
    ("a temperature that is a word", {"model": "stub", "messages": USER, "temperature": "hot"},
     "/v1/chat/completions", "temperature"),
    ("a negative temperature", {"model": "stub", "messages": USER, "temperature": -1}, "/v1/chat/completions",
     "temperature"),
    ("top_p as a string", {"model": "stub", "messages": USER, "top_p": "0.9"}, "/v1/chat/completions", "top_p"),
    ("top_p above 1", {"model": "stub", "messages": USER, "top_p": 1.5}, "/v1/chat/completions", "top_p"),
    ("max_tokens as a string", {"model": "stub", "messages": USER, "max_tokens": "5"}, "/v1/chat/completions",
     "max_tokens"),
    ("max_tokens as a fraction", {"model": "stub", "prompt": "x", "max_tokens": 2.5}, "/v1/completions",
     "max_tokens"),
    ("a seed past the I-JSON integer range", {"model": "stub", "prompt": "x", "seed": 1 << 64}, "/v1/completions", "seed"),
    ("a penalty out of range", {"model": "stub", "messages": USER, "presence_penalty": 3}, "/v1/chat/completions",
     "presence_penalty"),
    ("stop with a number", {"model": "stub", "prompt": "x", "stop": ["a", 1]}, "/v1/completions", "stop"),
    ("stream_options that is a string", {"model": "stub", "messages": USER, "stream_options": "usage"},
     "/v1/chat/completions", "stream_options"),
    ("chat logprobs as a number", {"model": "stub", "messages": USER, "logprobs": 3}, "/v1/chat/completions",
     "logprobs"),
]


def test_a_malformed_request_is_400_before_any_backend_sees_it(two):
    a, b = two
    a.fault("500")  # as llama.cpp answers some of these: without the check, the client would get its 500
    b.fault("500")
    with RouterThread(_cfg(two)) as r:
        for what, body, path, param in MALFORMED:
            err = _openai_error(_post(r.url, body, path), 400)
            assert err["param"] == param, (what, err)
        assert all(x.outstanding_requests() == 0 for x in r.router.pool.backends)
    assert a.requests() == [] and b.requests() == []


def test_valid_bodies_in_their_other_shapes_pass_unchanged(two):
    a, b = two
    parts = [{"type": "image_url", "image_url": {"url": "data:,"}}, {"type": "text", "text": "describe it"}]
    bodies = [
        ("/v1/chat/completions", {"model": "stub", "messages": [{"role": "user", "content": parts}], "max_tokens": 2,
                                  "x_vendor_field": {"anything": [1, "two", None]}}),
        ("/v1/chat/completions", {"model": "stub", "max_completion_tokens": 2, "temperature": 0, "top_p": 1,
                                  "stream": None, "n": None, "seed": -3, "stop": None, "logprobs": False,
                                  "stream_options": None, "tools": [{"type": "function", "function": {"name": "f"}}],
                                  "messages": [{"role": "system", "content": "be brief"},
                                               {"role": "assistant", "content": None, "tool_calls": []},
                                               {"role": "tool", "content": "42", "tool_call_id": "c1"},
                                               {"role": "user", "content": "and so?", "name": "ann"}]}),
        ("/v1/completions", {"model": "stub", "prompt": [[1, 2, 3], [4]], "max_tokens": 2, "logprobs": 1,
                             "echo": False, "temperature": 3.5, "top_k": -1, "min_p": 0.05, "stop": "\n"}),
    ]
    with RouterThread(_cfg([a])) as r:
        for path, body in bodies:
            resp = _post(r.url, body, path)
            assert resp.status_code == 200, resp.text
        stream = _post(r.url, {**bodies[0][1], "stream": True, "stream_options": {"include_usage": True}})
        assert sse_data(stream.text)[-1] == "[DONE]"
    seen = a.requests()
    assert len(seen) == 4 and seen[0]["body"]["x_vendor_field"] == {"anything": [1, "two", None]}
    assert seen[2]["body"]["temperature"] == 3.5  # above OpenAI's 2, which vLLM and llama.cpp accept


def test_json_nested_thousands_deep_is_400_at_both_doors(two):
    deep = b"[" * 5000 + b"]" * 5000
    with RouterThread(_cfg(two)) as r:
        for path, raw in [
            ("/v1/chat/completions", b'{"model": "stub", "messages": [{"role": "user", "content": "x"}], "x": '
                                     + deep + b"}"),
            ("/v1/completions", b'{"model": "stub", "prompt": ' + deep + b"}"),
            ("/v1/chat/completions", deep),
        ]:
            err = _openai_error(_post(r.url, raw, path), 400)
            assert err["code"] == "json_too_deep" and f"limit of {MAX_JSON_DEPTH} levels" in err["message"], err
        ok = _post(r.url, {"model": "stub", "messages": USER, "max_tokens": 1, "x": [[[[[[[[1]]]]]]]]})
        assert ok.status_code == 200  # nesting within the limit is fine
    assert len(two[0].requests()) + len(two[1].requests()) == 1  # the deep ones reached no backend


def test_a_huge_body_is_413_with_the_limit_stated(two):
    with RouterThread(_cfg(two)) as r:  # the default limit: 4 MiB
        big = json.dumps({"model": "stub", "prompt": "x" * (5 << 20)}).encode()
        chunked = iter([big[i:i + 65536] for i in range(0, len(big), 65536)])  # no content-length: read to the limit
        for content in (big, chunked):
            resp = httpx.post(r.url + "/v1/completions", content=content, timeout=30,
                              headers={"content-type": "application/json"})
            err = _openai_error(resp, 413)
            assert err["code"] == "request_too_large" and "limit of 4194304 bytes" in err["message"]
    assert two[0].requests() == [] and two[1].requests() == []


def test_the_depth_of_json_text():
    assert json_depth(b"1") == 0 and json_depth(b"[]") == 1 and json_depth(b'{"a": [{"b": []}]}') == 4
    assert json_depth(b'["[[[[", "\\\\", "]]]", {"k": "{"}]') == 2  # brackets inside strings do not count
    assert too_deep(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) is None
    assert "129 levels" in too_deep(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1))
    many = json.dumps({"messages": [{"role": "user", "content": "[" * 50}] * 400}).encode()
    assert too_deep(many) is None  # many brackets, all shallow
