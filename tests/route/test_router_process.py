"""The real `lenpred route` process: a stop (SIGTERM) lets the streams in flight finish and exits 0, as
`lenpred serve` does (it was killed by the signal: exit code -15)."""

from __future__ import annotations

import signal

import httpx
from route_testing import RouterProcess, Stub, sse_data


def test_sigterm_drains_the_streams_in_flight_and_exits_0(tmp_path) -> None:
    with Stub("slow", log_dir=tmp_path, tokens_per_s=20) as stub:  # 20 tokens: a second of streaming
        router = RouterProcess({"backends": [{"url": stub.url, "name": "slow"}], "log_requests": False},
                               log_dir=tmp_path)
        router.start()  # returns once /healthz answers: the router is up
        try:
            body = {"model": "stub", "messages": [{"role": "user", "content": "count"}], "max_tokens": 20,
                    "stream": True}
            with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=60) as s:
                lines = s.iter_lines()
                got = [next(ln for ln in lines if ln.startswith("data:"))]  # the stream is in flight
                router.proc.send_signal(signal.SIGTERM)
                got += list(lines)
            assert router.proc.wait(timeout=60) == 0
        finally:
            router.stop()
        evs = sse_data("\n".join(got))
        assert evs[-1] == "[DONE]"
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in evs[:-1])
        assert text == "".join(f" t{i}" for i in range(20))  # the whole answer, after the signal
        assert "lenpred route: stopped" in router.log.read_text()
