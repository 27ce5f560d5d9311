"""The router fuzzed from its own OpenAPI document (schemathesis), in front of a stub backend: whatever
the request, no 5xx, every error in OpenAI's format, a request the document calls valid is served and
one it calls invalid is refused with a 4xx, and nothing is left in the load accounting afterwards."""

from __future__ import annotations

import copy

from route_testing import RouterThread, Stub

from fuzz_testing import assert_openai_error, fuzz, is_positive, until
from lenpred.route.config import RouterConfig

COMPLETIONS = ("/v1/chat/completions", "/v1/completions")
EXAMPLES = 150  # requests in all, valid and invalid, over the router's six operations


def _pin_model(spec: dict, model: str) -> dict:
    """The document with ``model`` fixed to the one the stub serves (any other is a 404 from the router,
    which would hide the rest of the body from a valid request)."""
    spec = copy.deepcopy(spec)
    for path in COMPLETIONS:
        body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        body["properties"]["model"] = {"type": "string", "enum": [model]}
    return spec


def test_the_router_fuzzed_from_its_openapi_document(tmp_path):
    with Stub("fz", log_dir=tmp_path, cap_tokens=3) as stub, RouterThread(RouterConfig.from_dict({
        "backends": [{"url": stub.url, "name": "fz"}], "log_requests": False,
        "health": {"interval_s": 0.5, "timeout_s": 5.0}, "timeouts": {"connect_s": 5.0, "read_s": 10.0, "total_s": 30.0},
    })) as r:
        spec = _pin_model(r.app.openapi(), "stub")

        def check(case, resp) -> None:
            assert resp.status_code < 500, (case.method, case.path, case.body, resp.status_code, resp.text[:300])
            if resp.status_code >= 400:
                assert_openai_error(resp)
            if case.path in COMPLETIONS:
                if is_positive(case):  # the document and the router's checks agree: valid is served ...
                    assert resp.status_code == 200, (case.body, resp.text[:300])
                else:  # ... and invalid is refused by the router itself
                    assert 400 <= resp.status_code < 500, (case.body, resp.status_code, resp.text[:300])

        seen = fuzz(spec, r.url, check, EXAMPLES)
        pool = r.router.pool
        until(lambda: not r.router.drain.tasks, "no request task left")
        assert all(b.outstanding_requests() == 0 and b.outstanding_tokens() == 0 for b in pool.backends)
        assert pool.n_waiting == 0
    # the run reached the backend with valid requests and was refused for invalid ones, on both paths
    for path in COMPLETIONS:
        assert any(k.startswith(f"POST {path} valid 200") for k in seen), seen
        assert any(k.startswith(f"POST {path} invalid 4") for k in seen), seen
