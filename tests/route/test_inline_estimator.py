"""Estimator kind 'inline': a cheap text head on the router's loop, refused at load when it is too slow for
that (its measured latency and the limit named), the fallback kept; proxy runtimes refused on other heads."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from lenpred.errors import ConfigError
from lenpred.route.bodies import Query
from lenpred.route.config import EstimatorConfig, RouterConfig
from lenpred.route.estimators import (
    InlineEstimator,
    WithFallback,
    make_estimator,
    measure_latency,
    query_text,
)
from lenpred.serve.heads import RawPrediction

ROOT = Path(__file__).resolve().parents[2]
GBDT = ROOT / "data/heads/gbdt-smollm2-sharegpt"
NGRAM = ROOT / "data/heads/ngram-smollm2-sharegpt"


class Stub:
    """A text runner whose every prediction takes ``cost_ms`` on ``clock`` (a fake clock: no machine speed)."""

    predictor, input_kind, meta, path = "stub", "text", {"card_hash": "c0ffee"}, Path("/heads/stub")

    def __init__(self, cost_ms: float = 0.0, sleep_s: float = 0.0, fail: bool = False) -> None:
        self.now, self.cost_ms, self.sleep_s, self.fail, self.calls = 0.0, cost_ms, sleep_s, fail, 0

    def clock(self) -> float:
        return self.now

    def predict_texts(self, texts: list[str]) -> list[RawPrediction]:
        self.calls += 1
        self.now += self.cost_ms / 1e3
        if self.sleep_s:
            time.sleep(self.sleep_s)  # deliberately far above the budget, whatever the machine
        if self.fail:
            raise RuntimeError("the head broke")
        return [RawPrediction(100.0 + len(t), 80.0, 100.0, 140.0) for t in texts]


def _cfg(**kw) -> EstimatorConfig:
    return EstimatorConfig(kind="inline", head="/heads/stub", **kw)


def _chat(text: str) -> Query:
    return Query("chat", "m", False, None, ({"role": "system", "content": "be brief"}, {"role": "user", "content": text}),
                 None, 1, None)


def test_slow_head_refused_naming_its_latency_and_the_limit():
    stub = Stub(cost_ms=12.5)
    with pytest.raises(ConfigError) as e:
        InlineEstimator(stub, _cfg(inline_p50_ms=2.0, inline_check_calls=50), clock=stub.clock)
    msg = str(e.value)
    assert "takes 12.50 ms p50 / 12.50 ms p99" in msg and "over the inline budget of 2 ms p50 / 5 ms p99" in msg
    assert "kind 'head'" in msg and "'remote'" in msg
    assert stub.calls == 1 + 26  # one warm-up, then it stops once more than half of 50 calls were over


def test_p99_budget_alone_refuses():
    stub = Stub(cost_ms=3.0)  # under the 4 ms p50 budget, over the 2.5 ms p99 one
    with pytest.raises(ConfigError, match=r"3\.00 ms p99 .* budget of 4 ms p50 / 2\.5 ms p99"):
        InlineEstimator(stub, _cfg(inline_p50_ms=4.0, inline_p99_ms=2.5, inline_check_calls=10), clock=stub.clock)


def test_really_slow_head_refused_with_the_real_clock():
    stub = Stub(sleep_s=0.05)  # 50 ms a call: over a 2 ms budget on any machine
    with pytest.raises(ConfigError, match=r"takes \d+\.\d\d ms p50 .* over the inline budget of 2 ms p50"):
        InlineEstimator(stub, _cfg(inline_check_calls=3))
    assert stub.calls == 3  # warm-up + 2 calls over the budget (more than half of 3): no more


def test_fast_head_answers_inline_and_falls_back_when_it_fails():
    stub = Stub(cost_ms=0.1)
    inline = InlineEstimator(stub, _cfg(), clock=stub.clock)
    assert inline.latency_ms == (pytest.approx(0.1), pytest.approx(0.1))
    est = WithFallback(inline, make_estimator(EstimatorConfig(kind="chars")), 0.0)
    e = asyncio.run(est.estimate(_chat("hello there")))
    assert (e.tokens, e.source, e.card_hash) == (111.0, "inline:stub", "c0ffee")  # 100 + len of the user text
    ids = Query("completion", "m", False, None, None, 12, 1, None)
    assert asyncio.run(est.estimate(ids)).source == "chars+fallback"  # token ids: no text to read
    stub.fail = True
    e = asyncio.run(est.estimate(_chat("x" * 40)))
    assert e.source == "chars+fallback" and e.tokens == 12.0  # (40 + 8 system) characters / 4
    stub.fail = False
    assert asyncio.run(est.estimate(_chat("again"))).source == "inline:stub"  # no pause: retried at once


def test_a_burst_is_predicted_in_batches():
    stub = Stub(cost_ms=0.1)
    inline = InlineEstimator(stub, _cfg(inline_max_batch=2, inline_check_calls=4), clock=stub.clock)
    before = stub.calls

    async def burst() -> list:
        return await asyncio.gather(*(inline.estimate(_chat("x" * (i + 1))) for i in range(5)))

    got = asyncio.run(burst())
    assert [e.tokens for e in got] == [101.0, 102.0, 103.0, 104.0, 105.0]  # each its own answer, in order
    assert stub.calls - before == 3  # 5 requests of one loop turn, 2 per call


def test_query_text_reads_what_serve_reads():
    assert query_text(_chat("last one")) == "last one"
    q = Query("chat", "m", False, None, ({"role": "user", "content": "first"}, {"role": "assistant", "content": "a"},
                                         {"role": "user", "content": "  "}), None, 1, None)
    assert query_text(q) == "first"  # the last user message *with text*
    assert query_text(Query("completion", "m", False, "  ", None, None, 1, None)) is None


def test_measure_latency_quantiles():
    ticks = iter([0, 1, 1, 4, 4, 6])  # clock readings (s): calls of 1, 3, 2 s
    p50, p99, n = measure_latency(lambda t: None, ["a"], 3, 1e9, clock=lambda: next(ticks))
    assert (p50, p99, n) == (2000.0, 3000.0, 3)


def test_config_bad_values():
    with pytest.raises(ConfigError, match="estimator.head is required for kind 'inline'"):
        EstimatorConfig(kind="inline")
    with pytest.raises(ConfigError, match="inline_p50_ms must be a number > 0"):
        _cfg(inline_p50_ms=0)
    with pytest.raises(ConfigError, match="inline_check_calls must be >= 1"):
        _cfg(inline_check_calls=0)
    with pytest.raises(ConfigError, match="runtime_tolerance must be >= 0"):
        _cfg(runtime_tolerance=-1)
    cfg = RouterConfig.model_validate({"backends": [{"url": "http://127.0.0.1:1"}],
                                       "estimator": {"kind": "inline", "head": str(GBDT)}})
    assert cfg.estimator.inline_p50_ms == 2.0 and cfg.estimator.inline_p99_ms == 5.0


def test_committed_heads_inline_and_runtime_refused_on_them():
    est = make_estimator(EstimatorConfig(kind="inline", head=str(GBDT), inline_p50_ms=1e6, inline_p99_ms=1e6,
                                         inline_check_calls=3))
    e = asyncio.run(est.estimate(_chat("Write a long essay about the history of Rome.")))
    assert e.source == "inline:gbdt-smollm2-sharegpt" and 1 <= e.tokens <= 1024 and e.spread > 0
    with pytest.raises(ConfigError, match="runtime 'onnx' applies to the proxy head's encoder.*a ngram head"):
        make_estimator(EstimatorConfig(kind="inline", head=str(NGRAM), runtime="onnx"))


def test_router_end_to_end_with_an_inline_head(tmp_path):
    """A router whose estimator is an ngram head inline: the header names it, short and long prompts get
    short and long predictions, and the longer one the larger priority number."""
    import httpx
    import numpy as np
    from route_testing import RouterThread, Stub

    from lenpred.predictors.ngram import NgramHead
    from lenpred.predictors.targets import Targets

    rng = np.random.default_rng(0)
    kind = rng.integers(0, 2, 200)
    texts = [("Answer with one word: is {i} even?" if k == 0 else "Write a detailed long essay about topic {i}.")
             .format(i=i) for i, k in enumerate(kind)]
    y = np.clip(np.where(kind == 0, 7.0, 620.0)[:, None] + rng.normal(0, 5, (200, 2)), 1, None)
    NgramHead(n_features_log2=12).fit(texts, Targets(y, np.zeros_like(y, dtype=bool), 1024.0)).save(
        tmp_path / "ngram-route")
    stub = Stub("h").start()
    try:
        cfg = RouterConfig.from_dict({"backends": [{"url": stub.url, "name": "h"}], "priority": {"queue": "sjf"},
                                      "estimator": {"kind": "inline", "head": str(tmp_path / "ngram-route"),
                                                    # the budget check is timed: other tests cover it with a
                                                    # fake clock; here a busy machine must not fail the test
                                                    "inline_p50_ms": 1e6, "inline_p99_ms": 1e6},
                                      "log_requests": False})
        with RouterThread(cfg) as r:
            got = {}
            for p in ("Answer with one word: is 4001 even?", "Write a detailed long essay about topic 4001."):
                body = {"model": "stub", "messages": [{"role": "user", "content": p}]}
                resp = httpx.post(r.url + "/v1/chat/completions", json=body, timeout=30)
                assert resp.status_code == 200, resp.text
                assert resp.headers["x-lenpred-estimator"] == "inline:ngram-route"
                got[p] = float(resp.headers["x-lenpred-predicted-tokens"])
        short, long_ = got.values()
        assert short < 50 and 400 < long_ <= 1024, got  # the planted 7 and 620 tokens, up to the head's error
        sent = [q for q in stub.requests() if q["headers"].get("x-lenpred-predicted-tokens")]
        assert sent[-1]["body"]["priority"] > sent[-2]["body"]["priority"]
    finally:
        stub.stop()
