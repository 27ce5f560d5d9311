"""The router's own loop: the garbage collector's pauses as a metric, the running outstanding-tokens total of
each backend, and the per-chunk SSE accounting."""

from __future__ import annotations

import asyncio
import gc
import json
import random

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from benchmarks import router_report as report
from lenpred.errors import ConfigError
from lenpred.route.backends import Backend, Flight, Pool, QueueTimeout
from lenpred.route.bodies import _TEXT, SSECounter
from lenpred.route.config import BackendConfig, RouterConfig
from lenpred.route.prometheus import GcTimer


def test_gc_timer_counts_each_collection_by_generation_while_installed():
    hist = Histogram("t_gc_pause_seconds", "x", ["generation"], registry=(reg := CollectorRegistry()),
                     buckets=(0.001, 0.005))
    timer = GcTimer(hist)
    timer.install()
    timer.install()  # once only
    try:
        gc.collect(0)
        gc.collect(1)
        gc.collect(1)
    finally:
        timer.remove()
    gc.collect(0)  # after remove: not counted
    assert timer not in gc.callbacks
    figs = report.gc_pauses(generate_latest(reg).decode(), "t_gc_pause_seconds")
    # a collection of generation 0 may also run on its own between the calls (allocations): at least one
    assert figs["0"]["count"] >= 1 and figs["1"]["count"] == 2 and figs["2"]["count"] == 0
    assert figs["1"]["over_5ms"] <= figs["1"]["over_1ms"] <= 2 and figs["1"]["mean_ms"] > 0


def test_gc_pauses_reads_the_metrics_text_by_hand():
    text = "\n".join([
        'lenpred_route_gc_pause_seconds_bucket{generation="1",le="0.0005"} 1.0',
        'lenpred_route_gc_pause_seconds_bucket{generation="1",le="0.001"} 2.0',
        'lenpred_route_gc_pause_seconds_bucket{generation="1",le="0.005"} 3.0',
        'lenpred_route_gc_pause_seconds_bucket{generation="1",le="+Inf"} 4.0',
        'lenpred_route_gc_pause_seconds_count{generation="1"} 4.0',
        'lenpred_route_gc_pause_seconds_sum{generation="1"} 0.0124',
        'lenpred_route_other_count 9.0'])
    assert report.gc_pauses(text) == {"1": {"count": 4, "total_ms": 12.4, "mean_ms": 3.1, "over_1ms": 2, "over_5ms": 1}}


# ---------------------------------------------------------------- the running outstanding-tokens total
def _brute(b) -> float:
    return sum(f.remaining() for f in b.flights.values())


def test_running_total_by_hand():
    b = Backend(BackendConfig(url="http://b:1"), 0)
    b.admit(Flight("x", 100.0, 0.0, 0.0, prefill=50.0))  # 100 output + 50 prompt work before the first token
    b.admit(Flight("y", 10.0, 0.0, 0.0))
    assert b.outstanding_tokens() == 160.0
    b.progress(b.flights["x"], 1)  # the first token: the prompt work is done, 99 left
    assert b.outstanding_tokens() == 109.0
    b.progress(b.flights["y"], 30)  # past its prediction: at least one token is still expected
    assert b.outstanding_tokens() == 100.0
    b.progress(Flight("x", 5.0, 0.0, 0.0), 2)  # a flight of the same rid that is not the one here: no change
    assert b.outstanding_tokens() == 100.0
    assert b.finish("y") and not b.finish("y")
    assert b.outstanding_tokens() == 99.0
    b.admit(Flight("x", 7.0, 0.0, 0.0))  # the same rid again replaces the earlier flight
    assert b.outstanding_tokens() == 7.0 and b.outstanding_requests() == 1
    assert b.finish("x") and b.outstanding_tokens() == 0.0


def test_running_total_equals_the_sum_after_random_admits_finishes_and_cancellations():
    rng = random.Random(7)

    async def go() -> None:
        pool = Pool([BackendConfig(url=f"http://b{i}:1", max_outstanding=4) for i in range(3)],
                    "least-predicted-tokens", max_queued=64)
        running: dict[str, tuple] = {}  # rid -> (backend, flight)
        waiting: dict[str, asyncio.Task] = {}

        async def take(f: Flight) -> None:
            try:
                b = await pool.acquire(f, "m", frozenset(), timeout_s=rng.choice([0.001, 60.0]))
            except QueueTimeout:
                return
            running[f.rid] = (b, f)

        for step in range(3000):
            op = rng.random()
            if op < 0.35:
                f = Flight(f"r{step}", rng.uniform(1, 2000), rng.choice([0.0, rng.uniform(1, 500)]),
                           rng.random(), prefill=rng.choice([0.0, rng.uniform(0, 300)]))
                waiting[f.rid] = asyncio.create_task(take(f))
            elif op < 0.65 and running:
                b, f = running[rng.choice(list(running))]
                b.progress(f, f.gen + rng.randint(0, 40))
            elif op < 0.9 and running:
                b, f = running.pop(rng.choice(list(running)))
                pool.release(b, f.rid)  # done, failed, or the client gone: one way out
            elif waiting:
                waiting.pop(rng.choice(list(waiting))).cancel()  # the client left while it waited
            for _ in range(2):
                await asyncio.sleep(0)
            waiting = {k: t for k, t in waiting.items() if not t.done()}
            for b in pool.backends:
                assert b.outstanding_tokens() == pytest.approx(_brute(b), rel=1e-9, abs=1e-6)
        for t in waiting.values():
            t.cancel()
        await asyncio.gather(*waiting.values(), return_exceptions=True)
        for b, f in list(running.values()):
            pool.release(b, f.rid)
        for b in pool.backends:
            assert b.outstanding_requests() == 0 and b.outstanding_tokens() == 0.0
        assert pool.n_waiting == 0

    asyncio.run(go())


# ---------------------------------------------------------------- the SSE accounting, read in place
class _LineCounter:
    """The SSE accounting as it was written before (a list of lines, each payload copied and stripped): the
    reference the in-place reading must agree with."""

    def __init__(self) -> None:
        self.events = self.token_events = 0
        self.done, self.usage, self.error, self.tail = False, None, None, b""

    def feed(self, chunk: bytes) -> int:
        lines = (self.tail + chunk).split(b"\n")
        self.tail = lines.pop()
        new = 0
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
            elif b'"error"' in payload and payload.startswith(b'{"error"'):
                self.error = json.loads(payload)["error"]["message"]
            else:
                self.events += 1
                new += _TEXT.search(payload) is not None
                if b'"usage"' in payload and b"completion_tokens" in payload:
                    self.usage = json.loads(payload)["usage"]["completion_tokens"]
        self.token_events += new
        return new


_EVENTS = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n',
           b'data:{"choices":[{"delta":{"role":"assistant","content":""}}]}\r\n\r\n',
           b'data: {"choices":[{"text":" t1"}]}\n\n', b": keep-alive\n\n", b"event: x\n",
           b'data: {"choices":[{"delta":{"content":"say \\"error\\""}}]}\n\n',
           b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":17}}\n\n',
           b'data: {"error":{"message":"boom"}}\n\n', b"data: [DONE]  \n\n", b"data: [DONE]x\n\n",
           # more whitespace than one space (the exact, copying reading), empty payloads
           b"data:  [DONE]\n\n", b'data:\t{"error":{"message":"tab"}}\n', b'data:   {"choices":[{"text":"x"}]}\r\n',
           b"data:\n\n", b"data: \n", b'data: \r{"choices":[{"text":"y"}]}\n', b"data:[DONE]\n"]


def test_sse_counter_reads_in_place_as_the_line_splitter_did():
    rng = random.Random(3)
    for _ in range(300):
        stream = b"".join(rng.choice(_EVENTS) for _ in range(rng.randint(1, 12)))
        cuts = sorted(rng.sample(range(1, len(stream)), k=min(len(stream) - 1, rng.randint(0, 6))))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        new, ref = SSECounter(), _LineCounter()
        for p in pieces:
            assert new.feed(p) == ref.feed(p)
        assert (new.events, new.token_events, new.done, new.usage_tokens, new.error) == (
            ref.events, ref.token_events, ref.done, ref.usage, ref.error)


# ---------------------------------------------------------------- the collector's settings
def test_gc_config_refuses_thresholds_that_would_stall_or_disable_it():
    cfg = RouterConfig.model_validate({"backends": [{"url": "http://a:1"}], "gc": {"thresholds": [50000, 20, 100]}})
    assert cfg.gc.thresholds == (50000, 20, 100) and cfg.gc.freeze
    assert RouterConfig.model_validate({"backends": [{"url": "http://a:1"}], "gc": {"thresholds": None}}).gc.thresholds is None
    for bad in ([0, 10, 10], [700, 0, 10]):
        with pytest.raises(ConfigError, match=r"gc.thresholds must be \[>= 100, >= 1, >= 1\], got "):
            RouterConfig.model_validate({"backends": [{"url": "http://a:1"}], "gc": {"thresholds": bad}})


def test_the_router_sets_the_thresholds_while_it_serves_and_puts_them_back():
    from fastapi.testclient import TestClient

    from lenpred.route.app import create_app

    before = gc.get_threshold()
    cfg = RouterConfig.model_validate({"backends": [{"url": "http://127.0.0.1:9", "models": ["m"]}],
                                       "gc": {"thresholds": [12345, 7, 3]}, "health": {"interval_s": 60}})
    with TestClient(create_app(cfg)):
        assert gc.get_threshold() == (12345, 7, 3)
    assert gc.get_threshold() == before
