"""The micro-batcher: batches form under concurrency, each request gets its own answer, nothing hangs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from lenpred.errors import ConfigError
from lenpred.serve.errors import (
    BadRequestError,
    InternalError,
    OverloadedError,
    PredictTimeoutError,
    ServiceStoppedError,
)
from lenpred.serve.schema import PredictRequest
from lenpred.serve.service import Batching, PredictionService
from serve.serve_testing import LONG, SHORT, FakeRunner, GatedRunner


def _req(text: str) -> PredictRequest:
    return PredictRequest(prompt=text)


def run(coro):
    return asyncio.run(coro)


def test_concurrent_requests_share_model_calls_and_keep_their_own_answers() -> None:
    fake = FakeRunner(sleep=0.01)
    svc = PredictionService(fake, Batching(max_batch=8, max_wait_ms=5))

    async def go():
        async with svc:
            return await asyncio.gather(*(svc.predict(_req("x" * (i + 1))) for i in range(32)))

    out = run(go())
    assert [r.predicted_tokens for r in out] == [10.0 * (i + 1) for i in range(32)]  # each its own, in order
    assert [r.q90 for r in out] == [20.0 * (i + 1) for i in range(32)]
    assert sum(fake.sizes) == 32 and max(fake.sizes) <= 8
    assert len(fake.sizes) == 4  # 32 requests at once, 8 per call
    assert out[0].head == "fake-head" and out[0].card_hash == "feedfacecafebeef" and out[0].predictor == "fake"
    assert all(r.elapsed_ms > 0 for r in out)


def test_a_lone_request_waits_for_batch_mates_until_max_wait() -> None:
    fake = FakeRunner()
    svc = PredictionService(fake, Batching(max_batch=64, max_wait_ms=20))

    async def go():
        async with svc:
            return await svc.predict(_req("abc"))

    r = run(go())
    assert r.predicted_tokens == 30.0 and fake.sizes == [1]
    assert r.elapsed_ms >= 19  # it waited for batch mates (the loop's timer may fire a clock tick early)


def test_a_full_batch_runs_without_waiting_for_max_wait() -> None:
    fake = FakeRunner()
    svc = PredictionService(fake, Batching(max_batch=2, max_wait_ms=3_600_000))  # an hour: only a full batch runs

    async def go():
        async with svc:  # (a batcher that waited for max_wait would fail this at the 60 s bound)
            return await asyncio.wait_for(asyncio.gather(svc.predict(_req("a")), svc.predict(_req("bb"))), 60)

    out = run(go())
    assert [r.predicted_tokens for r in out] == [10.0, 20.0] and fake.sizes == [2]


def test_requests_arriving_during_a_call_join_the_next_batch() -> None:
    fake = GatedRunner()
    svc = PredictionService(fake, Batching(max_batch=64, max_wait_ms=1))

    async def go():
        async with svc:
            first = asyncio.create_task(svc.predict(_req("a")))
            await fake.running()  # the first call is running now
            rest = [asyncio.create_task(svc.predict(_req("b" * k))) for k in range(1, 11)]
            while svc.queue_depth < 10:
                await asyncio.sleep(0)
            fake.gate.set()
            return await first, await asyncio.gather(*rest)

    first, rest = run(go())
    assert fake.sizes == [1, 10]
    assert [r.predicted_tokens for r in rest] == [10.0 * k for k in range(1, 11)]


def test_one_bad_request_fails_alone_and_so_does_one_the_model_cannot_take() -> None:
    fake = FakeRunner()
    svc = PredictionService(fake, Batching(max_batch=64, max_wait_ms=5))

    async def go():
        async with svc:
            a = await asyncio.gather(svc.predict(_req("ok")), svc.predict(_req("bad")), svc.predict(_req("fine")),
                                     return_exceptions=True)
            b = await asyncio.gather(*(svc.predict(_req("x" * (i + 1))) for i in range(30)), svc.predict(_req("boom")),
                                     return_exceptions=True)
            c = await svc.predict(_req("after"))
            return a, b, c

    a, b, c = run(go())
    assert a[0].predicted_tokens == 20.0 and a[2].predicted_tokens == 40.0
    assert isinstance(a[1], BadRequestError) and "this prompt is bad" in str(a[1]) and a[1].status == 400
    assert fake.sizes[1] == 31  # the 31 shared one model call, which failed; then each ran alone
    assert [r.predicted_tokens for r in b[:30]] == [10.0 * (i + 1) for i in range(30)]
    assert isinstance(b[30], InternalError) and "the model fell over" in str(b[30]) and b[30].status == 500
    assert c.predicted_tokens == 50.0  # the service survived both


def test_timeout_and_a_full_queue_answer_at_once() -> None:
    fake = GatedRunner()
    svc = PredictionService(fake, Batching(max_batch=1, max_wait_ms=0, max_queue=2, timeout_s=0.2))

    async def go():
        async with svc:
            tasks = [asyncio.create_task(svc.predict(_req("z")))]
            await fake.running()  # the first one runs (and is held there)
            tasks += [asyncio.create_task(svc.predict(_req("z"))) for _ in range(2)]
            while svc.queue_depth < 2:  # two wait: the queue (2) is full
                await asyncio.sleep(0)
            with pytest.raises(OverloadedError, match="queue is full"):
                await svc.predict(_req("one too many"))
            out = await asyncio.gather(*tasks, return_exceptions=True)
            fake.gate.set()
            return out

    out = run(go())
    assert all(isinstance(e, PredictTimeoutError) and e.status == 504 for e in out)


def test_stop_answers_whatever_still_waits() -> None:
    fake = GatedRunner()
    svc = PredictionService(fake, Batching(max_batch=1, max_wait_ms=0))

    async def go():
        await svc.start()
        tasks = [asyncio.create_task(svc.predict(_req("w"))) for _ in range(3)]
        await fake.running()
        await svc.stop()
        fake.gate.set()
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)

    out = run(go())
    assert all(isinstance(e, ServiceStoppedError) for e in out)


def test_predict_starts_the_batcher_by_itself_and_predict_many_keeps_order() -> None:
    svc = PredictionService(FakeRunner(), Batching(max_batch=4, max_wait_ms=2))

    async def go():
        out = await svc.predict_many([_req("a" * k) for k in range(1, 10)])
        await svc.stop()
        return out

    assert [r.predicted_tokens for r in run(go())] == [10.0 * k for k in range(1, 10)]


@pytest.mark.parametrize("kw, expect", [({"max_batch": 0}, "max_batch"), ({"max_wait_ms": -1}, "max_wait_ms"),
                                        ({"timeout_s": 0}, "timeout_s"), ({"max_queue": 0}, "max_queue")])
def test_bad_settings(kw, expect) -> None:
    with pytest.raises(ConfigError, match=expect):
        PredictionService(FakeRunner(), Batching(**kw))


def test_proxy_head_batched_equals_one_by_one(proxy_head: Path) -> None:
    """32 concurrent requests on the real proxy head: fewer model calls than 32, the same numbers as alone."""
    texts = (SHORT + LONG)[:16] * 2
    texts = [f"{t} ({i})" for i, t in enumerate(texts)]
    svc = PredictionService.from_head(proxy_head, batching=Batching(max_batch=64, max_wait_ms=20))

    async def go():
        async with svc:
            alone = [await svc.predict(_req(t)) for t in texts]
            calls_alone = svc.runner.calls
            together = await asyncio.gather(*(svc.predict(_req(t)) for t in texts))
            return alone, calls_alone, together, svc.runner.calls - calls_alone

    alone, calls_alone, together, calls_together = run(go())
    assert calls_alone == 32
    assert calls_together < 32
    a = np.array([[r.predicted_tokens, r.q10, r.q90] for r in alone])
    b = np.array([[r.predicted_tokens, r.q10, r.q90] for r in together])
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-3)  # padding in a batch moves floats, not answers
    # and the head learned the planted truth: "one word" prompts short, "long essay" prompts long
    short = [r.predicted_tokens for t, r in zip(texts, alone, strict=True) if t.startswith("Answer")]
    long_ = [r.predicted_tokens for t, r in zip(texts, alone, strict=True) if t.startswith("Write")]
    assert max(short) < 100 < 400 < min(long_)
    assert together[0].head == "proxy-test" and together[0].predictor == "proxy"
    assert all(r.q10 <= r.q50 <= r.q90 for r in together)


def test_a_prompt_the_real_head_cannot_embed_fails_alone(proxy_head: Path) -> None:
    """The tokenizer refuses a lone surrogate for the whole batch it is in (the door check refuses such a
    request; this one is built past it): its batch mates still get their own predictions."""
    svc = PredictionService.from_head(proxy_head, warmup=False)
    ok = [_req(t) for t in SHORT[:3]]
    bad = PredictRequest.model_construct(prompt="tea \ud800", messages=None, model=None)
    out = svc.runner.run([ok[0], bad, ok[1], ok[2]])
    alone = [svc.runner.run([r])[0] for r in ok]
    assert isinstance(out[1], InternalError) and "TypeError" in str(out[1])
    np.testing.assert_allclose([o.point for o in (out[0], out[2], out[3])], [a.point for a in alone], rtol=1e-4)
