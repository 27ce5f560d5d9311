"""The HTTP app in process (FastAPI's TestClient): answers, bad input in OpenAI's error format, metrics."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from lenpred.serve.app import create_app
from lenpred.serve.service import Batching, PredictionService
from serve.serve_testing import FakeRunner

LIMIT = 4096


@pytest.fixture()
def client():
    svc = PredictionService(FakeRunner(), Batching(max_batch=16, max_wait_ms=5))
    with TestClient(create_app(svc, max_body_bytes=LIMIT), raise_server_exceptions=False) as c:
        yield c


def _post(c: TestClient, body: str | bytes, **headers: str):
    return c.post("/v1/predict", content=body, headers={"content-type": "application/json", **headers})


def test_predict_prompt_and_messages(client) -> None:
    r = client.post("/v1/predict", json={"prompt": "hello"})
    assert r.status_code == 200
    body = r.json()
    assert body["predicted_tokens"] == 50.0 and body["q10"] == 25.0 and body["q90"] == 100.0
    assert body["head"] == "fake-head" and body["card_hash"] == "feedfacecafebeef" and body["elapsed_ms"] > 0
    r = client.post("/v1/predict", json={"messages": [{"role": "user", "content": [{"type": "text", "text": "abc"}]}],
                                         "model": "whatever"})
    assert r.status_code == 200 and r.json()["predicted_tokens"] == 30.0


BAD = [
    ("malformed-json", '{"prompt": "x"', 400, "not valid JSON", None),
    ("not-json-at-all", "prompt=x", 400, "not valid JSON", None),
    ("empty-body", "", 400, "request body is missing", None),
    ("array-body", "[1, 2]", 400, "got a JSON array", None),
    ("both", json.dumps({"prompt": "x", "messages": [{"role": "user", "content": "y"}]}), 400, "got both", None),
    ("neither", json.dumps({"model": "m"}), 400, "got neither", None),
    ("empty-prompt", json.dumps({"prompt": ""}), 400, "'prompt' is empty", None),
    ("prompt-not-a-string", json.dumps({"prompt": 42}), 400, "valid string", "prompt"),
    ("messages-not-a-list", json.dumps({"messages": "hi"}), 400, "valid list", "messages"),
    ("message-bad-role", json.dumps({"messages": [{"role": "robot", "content": "hi"}]}), 400, "unknown role",
     "messages[0].role"),
    ("content-wrong-type", json.dumps({"messages": [{"role": "user", "content": 7}]}), 400, "messages[0].content",
     "messages[0].content"),
    ("unknown-field", json.dumps({"prompt": "x", "max_tokens": 5}), 400, "unknown field 'max_tokens'", "max_tokens"),
    ("refused-by-the-head", json.dumps({"prompt": "bad"}), 400, "this prompt is bad", "prompt"),
    # a lone surrogate is not Unicode: refused at the door (before this, it failed its whole micro-batch)
    ("lone-surrogate-prompt", '{"prompt": "tea \\ud800"}', 400, "prompt holds a lone surrogate (\\ud800 at character 4)",
     "prompt"),
    ("lone-surrogate-in-a-part", '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}',
     400, "lone surrogate", "messages[0].content[0].text"),
    ("lone-surrogate-ignored-key", '{"messages": [{"role": "user", "content": "hi", "name": "\\ud83d"}]}', 400,
     "messages[0].name holds a lone surrogate", "messages[0].name"),
    ("too-large", json.dumps({"prompt": "x" * (LIMIT + 10)}), 413, f"limit of {LIMIT} bytes", None),
    # refused before it is parsed, as the router refuses it (Python's parser fails past ~1000 levels)
    ("nested-1500-deep", '{"prompt": "x", "pad": ' + "[" * 1500 + "]" * 1500 + "}", 400,
     "1501 levels deep, deeper than the limit of 128 levels", None),
]


@pytest.mark.parametrize("body, status, expect, param", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_gets_an_openai_error(client, body, status, expect, param) -> None:
    r = _post(client, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert expect in err["message"]
    assert err["type"] == "invalid_request_error"
    assert err["param"] == param
    assert "Traceback" not in r.text


def test_a_surrogate_pair_is_text(client) -> None:
    r = _post(client, '{"prompt": "tea \\ud83c\\udf75"}')  # U+1F375, escaped as JSON escapes it
    assert r.status_code == 200 and r.json()["predicted_tokens"] == 50.0  # 5 characters


@pytest.mark.parametrize("ctype, expect", [
    ("text/plain", "request body was sent as text/plain, not as JSON"),
    ("application/x-www-form-urlencoded", "sent as application/x-www-form-urlencoded (what curl -d sends), not as JSON"),
])
def test_a_json_object_not_sent_as_json_names_the_content_type(client, ctype, expect) -> None:
    r = _post(client, json.dumps({"prompt": "hello"}), **{"content-type": ctype})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert expect in err["message"] and "Content-Type: application/json" in err["message"]
    assert "JSON string" not in err["message"] and err["code"] == "unsupported_content_type"
    r = _post(client, '"hello"')  # sent as JSON, and a string: that is what it says
    assert r.status_code == 400 and "got a JSON string" in r.json()["error"]["message"]


def test_chunked_body_over_the_limit_is_refused(client) -> None:
    def chunks():
        yield b'{"prompt": "'
        for _ in range(LIMIT // 100 + 2):
            yield b"y" * 100
        yield b'"}'

    r = client.post("/v1/predict", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "over this service's limit" in r.json()["error"]["message"]


def test_unknown_route_and_method(client) -> None:
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = client.get("/v1/predict")
    assert r.status_code == 405 and "not allowed" in r.json()["error"]["message"]


def test_a_bad_request_fails_alone_in_its_micro_batch(client) -> None:
    """30 valid requests and one the model cannot take, sent at once: the 30 get their answers."""
    texts = ["a" * (i + 1) for i in range(30)]
    with ThreadPoolExecutor(31) as ex:
        out = list(ex.map(lambda t: client.post("/v1/predict", json={"prompt": t}), texts + ["boom"]))
    assert [r.status_code for r in out] == [200] * 30 + [500]
    assert [r.json()["predicted_tokens"] for r in out[:30]] == [10.0 * (i + 1) for i in range(30)]
    assert "the model fell over" in out[30].json()["error"]["message"]


def test_a_failed_model_call_is_a_500_in_openai_format_and_the_service_lives_on(client) -> None:
    r = client.post("/v1/predict", json={"prompt": "boom"})
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
    assert "the model fell over" in r.json()["error"]["message"]
    assert client.post("/v1/predict", json={"prompt": "ok"}).status_code == 200


def test_healthz_and_metrics(client) -> None:
    h = client.get("/healthz")
    assert h.status_code == 200
    assert h.json()["status"] == "ok" and h.json()["head"] == "fake-head" and h.json()["max_batch"] == 16
    with ThreadPoolExecutor(8) as ex:  # concurrent HTTP requests: batched by the service
        codes = list(ex.map(lambda i: client.post("/v1/predict", json={"prompt": "a" * (i + 1)}).status_code, range(24)))
    assert codes == [200] * 24
    _post(client, "{")
    m = client.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    text = m.text
    assert 'lenpred_serve_requests_total{endpoint="/v1/predict",status="200"} 24.0' in text
    assert 'lenpred_serve_requests_total{endpoint="/v1/predict",status="400"} 1.0' in text
    assert 'lenpred_serve_errors_total{type="invalid_request_error"} 1.0' in text
    assert "lenpred_serve_batch_size_bucket" in text and "lenpred_serve_request_latency_seconds_bucket" in text
    calls = next(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith("lenpred_serve_model_calls_total"))
    sizes = next(float(ln.split()[-1]) for ln in text.splitlines() if ln.startswith("lenpred_serve_batch_size_sum"))
    assert sizes == 24 and 1 <= calls <= 24
    client.get("/some/probe/path")
    assert 'endpoint="other",status="404"' in client.get("/metrics").text  # unknown paths share one label


def test_health_is_503_while_the_batcher_is_not_running() -> None:
    app = create_app(PredictionService(FakeRunner()))
    with TestClient(app) as c:  # the lifespan starts the batcher
        assert c.get("/healthz").json()["status"] == "ok"
    r = TestClient(app).get("/healthz")  # no lifespan: stopped
    assert r.status_code == 503 and r.json()["status"] == "stopped"


def test_openapi_documents_the_models(client) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert {"PredictRequest", "PredictResponse", "ChatMessage", "ErrorResponse", "HealthResponse"} <= set(schemas)
    op = spec["paths"]["/v1/predict"]["post"]
    assert {"200", "400", "413", "503", "504"} <= set(op["responses"])
    assert "predicted_tokens" in schemas["PredictResponse"]["properties"]


def test_a_json_object_without_a_content_type_is_not_called_a_string(client) -> None:
    """Issue 29 part 11: a JSON object sent with no Content-Type was called "a JSON string"."""
    r = client.post("/v1/predict", content=json.dumps({"prompt": "hello"}).encode())
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert "JSON string" not in err["message"] and err["code"] == "unsupported_content_type"
    assert "sent without a Content-Type, not as JSON" in err["message"]
    assert "Content-Type: application/json" in err["message"]


def test_a_body_that_is_not_utf8_names_utf8(client) -> None:
    """Issue 29 part 11: a non-UTF-8 body said "There was an error parsing the body"."""
    r = _post(client, '{"prompt": "caf\xe9"}'.encode("latin-1"))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert "is not UTF-8" in err["message"] and "There was an error parsing" not in err["message"], err
    assert err["code"] == "invalid_json"
