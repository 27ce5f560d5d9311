"""Fuzzing an HTTP surface from its own OpenAPI document (schemathesis): requests that the document calls
valid and requests it calls invalid, for every operation, sent to the app served by uvicorn from a thread.

The run is bounded by a number of examples, not by time, and is the same on every run (``derandomize``):
a failure is reproduced by running the test again, on any machine, at any speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["AppThread", "assert_openai_error", "fuzz", "is_positive", "until"]


class AppThread:
    """An ASGI app served by uvicorn on a free loopback port from a background thread (lifespan on)."""

    def __init__(self, app: Any) -> None:
        import socket

        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    access_log=False, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the app's server thread did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> AppThread:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def assert_openai_error(resp: Any) -> dict[str, Any]:
    """The ``error`` object of an OpenAI-format error answer (``{"error": {"message", "type", ...}}``)."""
    ctype = {k.lower(): v for k, v in resp.headers.items()}.get("content-type", "")  # schemathesis: a list of values
    ctype = ctype[0] if isinstance(ctype, list) else ctype
    assert ctype.startswith("application/json"), (resp.status_code, ctype, resp.text[:300])
    err = resp.json().get("error")
    assert isinstance(err, dict) and isinstance(err.get("message"), str) and isinstance(err.get("type"), str), \
        resp.text[:300]
    assert err["message"] and {"param", "code"} <= set(err), err
    return err


def is_positive(case: Any) -> bool:
    """Whether schemathesis generated ``case`` as valid by the document."""
    from schemathesis import GenerationMode

    return case.meta.generation.mode == GenerationMode.POSITIVE


def fuzz(spec: dict[str, Any], base_url: str, check: Callable[[Any, Any], None], max_examples: int) -> dict[str, int]:
    """Send ``max_examples`` requests generated from the OpenAPI document ``spec`` (valid and invalid ones,
    every operation) to ``base_url``; ``check(case, response)`` asserts on each. Returns how many requests
    each ``"METHOD /path valid|invalid status"`` got (hypothesis shrinks a failure to a small example)."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    schema = schemathesis.openapi.from_dict(spec)
    cases = st.one_of(schema.as_strategy(schemathesis.GenerationMode.POSITIVE),
                      schema.as_strategy(schemathesis.GenerationMode.NEGATIVE))
    seen: dict[str, int] = {}

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=True, print_blob=True,
              phases=[Phase.explicit, Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
    @given(case=cases)
    def run(case: Any) -> None:
        resp = case.call(base_url=base_url, timeout=60)
        key = (f"{case.method} {case.path} {'valid' if is_positive(case) else 'invalid'} "
               f"{resp.status_code}")
        seen[key] = seen.get(key, 0) + 1
        check(case, resp)

    run()
    return seen


def until(cond: Callable[[], bool], what: str) -> None:
    """Wait for state that a server thread changes; fail after a minute."""
    deadline = time.monotonic() + 60
    while not cond():
        assert time.monotonic() < deadline, f"{what} did not hold within 60 s"
        time.sleep(0.02)
