"""The prediction service fuzzed from its own OpenAPI document (schemathesis): whatever the request, no
5xx, every error in OpenAI's format, and a request the document calls invalid is refused with a 4xx."""

from __future__ import annotations

from fuzz_testing import AppThread, assert_openai_error, fuzz, is_positive
from lenpred.serve.app import create_app
from lenpred.serve.service import Batching, PredictionService
from serve.serve_testing import FakeRunner

EXAMPLES = 100  # requests in all, valid and invalid, over the service's three operations


def test_the_service_fuzzed_from_its_openapi_document():
    app = create_app(PredictionService(FakeRunner(), Batching(max_batch=16, max_wait_ms=1)))
    with AppThread(app) as s:
        def check(case, resp) -> None:
            assert resp.status_code < 500, (case.method, case.path, case.body, resp.status_code, resp.text[:300])
            if resp.status_code >= 400:
                assert_openai_error(resp)
            if case.path == "/v1/predict" and not is_positive(case):
                assert 400 <= resp.status_code < 500, (case.body, resp.status_code, resp.text[:300])

        seen = fuzz(app.openapi(), s.url, check, EXAMPLES)
    assert any(k.startswith("POST /v1/predict valid 200") for k in seen), seen
    assert any(k.startswith("POST /v1/predict invalid 400") for k in seen), seen
