"""Hidden-state heads: the service renders, tokenizes and runs the target's prefill itself.

On a tiny random Llama with SmolLM2's real chat template. The ``count`` head's answer is known
(3 * rendered tokens + 20), so it checks that a request is rendered exactly like a training prompt;
the ``ridge`` head reads pooled hidden states, so it checks that the service's features equal the
training pipeline's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from lenpred.errors import CardMismatchError, DataError
from lenpred.serve.app import create_app
from lenpred.serve.errors import BadRequestError, ContextLengthError
from lenpred.serve.heads import PrefillOptions
from lenpred.serve.schema import PredictRequest
from lenpred.serve.service import Batching, PredictionService
from serve.serve_testing import count_target, extract, fit_head, make_tiny_target


def _predict_all(svc: PredictionService, reqs: list[PredictRequest]) -> list:
    async def go():
        async with svc:
            return await asyncio.gather(*(svc.predict(r) for r in reqs), return_exceptions=True)

    return asyncio.run(go())


TEXTS = ["tea river", "Write a poem about the sea and the stars, in five verses.", "engine " * 30]


def test_prompt_is_rendered_as_one_user_message_like_the_training_prompts(tiny_target: Path, count_head: Path) -> None:
    _, counts = extract(tiny_target, TEXTS)
    svc = PredictionService.from_head(count_head, batching=Batching(max_wait_ms=20))
    out = _predict_all(svc, [PredictRequest(prompt=t) for t in TEXTS])
    assert [r.prompt_tokens for r in out] == counts
    np.testing.assert_allclose([r.predicted_tokens for r in out], count_target(counts), atol=0.5)
    assert out[0].predictor == "ridge" and out[0].head == "count"
    assert svc.model_id == str(tiny_target) and svc.input_kind == "features"


def test_messages_go_through_the_chat_template(tiny_target: Path, count_head: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_target)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is tea?"},
            {"role": "assistant", "content": "A drink."}, {"role": "user", "content": [{"type": "text", "text": "Why?"}]}]
    text = tok.apply_chat_template([{**m, "content": m["content"] if isinstance(m["content"], str) else "Why?"}
                                    for m in msgs], tokenize=False, add_generation_prompt=True)
    want = len(tok(text, add_special_tokens=False)["input_ids"])
    one = [{"role": "user", "content": "What is tea?"}]
    svc = PredictionService.from_head(count_head)
    a, b, c = _predict_all(svc, [PredictRequest(messages=msgs), PredictRequest(messages=one),
                                 PredictRequest(prompt="What is tea?")])
    assert a.prompt_tokens == want
    assert b.prompt_tokens == c.prompt_tokens  # a prompt string is one user message
    assert a.predicted_tokens == pytest.approx(count_target(want), abs=0.5)


def test_the_run_cards_system_prompt_is_applied(tiny_target: Path, tmp_path: Path) -> None:
    head = fit_head(tiny_target, tmp_path / "sys", {"blocks": ["side:prompt_tokens"], "log_target": False,
                                                    "alphas": [1e-6]}, system_prompt="Answer in one line.")
    _, counts = extract(tiny_target, ["hello there"], system_prompt="Answer in one line.")
    _, plain = extract(tiny_target, ["hello there"])
    assert counts != plain
    svc = PredictionService.from_head(head)
    (r,) = _predict_all(svc, [PredictRequest(prompt="hello there")])
    assert r.prompt_tokens == counts[0]


def test_hidden_state_head_equals_the_training_pipeline_batched_or_not(tiny_target: Path, ridge_head: Path) -> None:
    from lenpred.predictors.io import load_head

    feats, _ = extract(tiny_target, TEXTS)
    want = load_head(ridge_head).predict(feats)
    svc = PredictionService.from_head(ridge_head, batching=Batching(max_batch=8, max_wait_ms=20))
    together = _predict_all(svc, [PredictRequest(prompt=t) for t in TEXTS])
    calls = svc.runner.calls
    alone = [_predict_all(svc, [PredictRequest(prompt=t)])[0] for t in TEXTS]
    assert calls == 1  # one model call for the three
    np.testing.assert_allclose([r.predicted_tokens for r in together], want, rtol=1e-3)
    np.testing.assert_allclose([r.predicted_tokens for r in alone], want, rtol=1e-3)


def test_prompt_over_the_context_is_refused_alone(tiny_target: Path, count_head: Path) -> None:
    svc = PredictionService.from_head(count_head, batching=Batching(max_wait_ms=20))
    long_, ok = _predict_all(svc, [PredictRequest(prompt="tea " * 400), PredictRequest(prompt="tea")])
    assert isinstance(long_, ContextLengthError) and long_.status == 400 and long_.code == "context_length_exceeded"
    assert "over the model's context of 160" in str(long_)
    assert ok.prompt_tokens > 0
    svc2 = PredictionService.from_head(count_head, prefill=PrefillOptions(max_prompt_tokens=40))
    (short_limit,) = _predict_all(svc2, [PredictRequest(prompt="tea " * 60)])
    assert isinstance(short_limit, ContextLengthError) and "max_prompt_tokens of 40" in str(short_limit)


def test_http_errors_of_a_hidden_state_head(tiny_target: Path, count_head: Path) -> None:
    svc = PredictionService.from_head(count_head)
    with TestClient(create_app(svc)) as c:
        r = c.post("/v1/predict", json={"prompt": "tea " * 400})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert r.json()["error"]["param"] == "prompt"
        r = c.post("/v1/predict", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200 and r.json()["prompt_tokens"] > 0
        h = c.get("/healthz").json()
        assert h["input_kind"] == "features" and h["model"] == str(tiny_target)


def test_raw_prompt_heads_refuse_messages(tiny_target: Path, tmp_path: Path) -> None:
    head = fit_head(tiny_target, tmp_path / "raw", {"blocks": ["side:prompt_tokens"]})
    meta = json.loads((head / "meta.json").read_text())
    meta["card"]["prompts.chat_template"] = False  # as if the run had used no chat template
    (head / "meta.json").write_text(json.dumps(meta))
    svc = PredictionService.from_head(head)
    bad, ok = _predict_all(svc, [PredictRequest(messages=[{"role": "user", "content": "hi"}]),
                                 PredictRequest(prompt="hi")])
    assert isinstance(bad, BadRequestError) and "send 'prompt', not 'messages'" in str(bad)
    assert ok.prompt_tokens >= 1


def test_a_head_of_another_model_is_refused_at_start(tiny_target: Path, count_head: Path, tmp_path: Path) -> None:
    other = make_tiny_target(tmp_path / "other", layers=3)
    with pytest.raises(CardMismatchError, match="fingerprint"):
        PredictionService.from_head(count_head, prefill=PrefillOptions(model=str(other)))


def test_a_head_without_a_recorded_model_is_refused(tmp_path: Path) -> None:
    from lenpred.predictors.registry import make_predictor
    from lenpred.predictors.synthetic import planted

    d = planted(40, 2, seed=0)
    make_predictor("ridge").fit(d["X"], d["y"]).save(tmp_path / "h", card={"sampling": {"max_new_tokens": 1024}})
    with pytest.raises(DataError, match="records no target model"):
        PredictionService.from_head(tmp_path / "h")
