"""The prediction service with the router-side text heads: ngram / gbdt answer through the service (batched
or inline), and a proxy encoder runtime whose predictions stray from the fp32 encoder's is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from lenpred.errors import ConfigError
from lenpred.serve.heads import TextOptions, load_runner
from lenpred.serve.schema import ChatMessage, PredictRequest
from lenpred.serve.service import Batching, PredictionService

HEADS = Path(__file__).resolve().parents[2] / "data" / "heads"


@pytest.mark.parametrize("name", ["ngram", "gbdt"])
def test_text_head_served_batched_and_inline_alike(name):
    svc = PredictionService.from_head(HEADS / f"{name}-smollm2-sharegpt", batching=Batching(max_wait_ms=0.0))
    reqs = [PredictRequest(prompt="Write a long essay about the history of Rome."),
            PredictRequest(messages=[ChatMessage(role="system", content="be brief"),
                                     ChatMessage(role="user", content="What is 2 + 2?")])]

    async def both() -> tuple[list, list, int]:
        async with svc:
            batched = await svc.predict_many(reqs)
            svc.inline = True
            calls = svc.batches
            inline = [await svc.predict(r) for r in reqs]
            return batched, inline, svc.batches - calls

    batched, inline, inline_calls = asyncio.run(both())
    assert [r.predicted_tokens for r in batched] == pytest.approx([r.predicted_tokens for r in inline])
    assert inline_calls == 2 and all(r.head == f"{name}-smollm2-sharegpt" and r.predictor == name for r in inline)
    assert all(0 < r.q10 <= r.predicted_tokens <= r.q90 <= 1024 for r in inline)  # wrong order would be a bug


def test_proxy_runtime_refused_beyond_tolerance(monkeypatch):
    """A deliberately perturbed 'onnx' encoder (embeddings rotated a little) is refused at 10% and named;
    with a tolerance above its deviation it is taken, and the runner says how far it moved."""
    import lenpred.predictors.proxy_runtime as rt

    fp32 = rt.make_embedder("torch")
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((384, 384)).astype(np.float32) * 0.005  # ~10% of each embedding

    def perturbed(texts):
        e = fp32(texts)
        e = e + e @ noise
        return (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32)

    monkeypatch.setattr(rt, "make_embedder", lambda runtime: fp32 if runtime == "torch" else perturbed)
    head = HEADS / "proxy-smollm2-sharegpt"
    with pytest.raises(ConfigError, match=r"the onnx runtime of head .* moves the head's predictions by up to "
                                          r"\d+\.\d% on 24 check prompts, over the tolerance of 10\.0%"):
        load_runner(head, text=TextOptions("onnx", 0.10))
    runner = load_runner(head, text=TextOptions("onnx", 100.0))
    assert 0.10 < runner.deviation < 100.0 and runner.head.runtime == "onnx"
    ok = load_runner(head, text=TextOptions("torch", 0.0))  # the head's own encoder: nothing to check
    assert ok.deviation == 0.0


def test_runtime_on_a_non_proxy_head_refused():
    with pytest.raises(ConfigError, match="runtime 'torch-int8' applies to the proxy head's encoder; head .* is a "
                                          "gbdt head"):
        load_runner(HEADS / "gbdt-smollm2-sharegpt", text=TextOptions("torch-int8"))
    with pytest.raises(ConfigError, match="unknown proxy runtime 'tpu'"):
        load_runner(HEADS / "proxy-smollm2-sharegpt", text=TextOptions("tpu"))


@pytest.mark.slow
def test_onnx_runtime_matches_fp32(tmp_path, monkeypatch):
    """The real export: MiniLM + pooling to ONNX, run by ONNX Runtime, within 1e-4 of torch's embeddings; the
    int8 file quantized from it is smaller; the fp32 onnx runtime passes the default tolerance."""
    pytest.importorskip("onnxruntime")
    import lenpred.predictors.proxy_runtime as rt
    from lenpred.serve.check_prompts import CHECK_PROMPTS

    monkeypatch.setenv("LENPRED_HOME", str(tmp_path))
    rt.make_embedder.cache_clear()
    try:
        ref = rt.make_embedder("torch")(list(CHECK_PROMPTS[:6]))
        got = rt.make_embedder("onnx")(list(CHECK_PROMPTS[:6]))
        assert np.abs(got - ref).max() < 1e-4
        assert rt.onnx_file(True).stat().st_size < 0.5 * rt.onnx_file(False).stat().st_size
        runner = load_runner(HEADS / "proxy-smollm2-sharegpt", text=TextOptions("onnx"))
        assert runner.deviation < 1e-3
    finally:
        rt.make_embedder.cache_clear()  # the next test's embedders are not this tmp folder's
