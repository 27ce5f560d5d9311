"""The real SmolLM2-135M behind a hidden-state head: served predictions equal the training pipeline's.

A ridge head is trained here on the committed features of the reference run; the service, given
only each prompt's text, must render it to exactly the token ids the run recorded (the ids the
target saw when the samples were drawn) and predict what the head predicts on the committed features.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "data" / "runs" / "smollm2-sharegpt"
FEATS = ROOT / "data" / "features" / "smollm2-sharegpt"


@pytest.mark.slow
def test_served_ridge_head_matches_the_committed_features(tmp_path: Path) -> None:
    if not (RUN / "card.json").is_file() or not (FEATS / "meta.json").is_file():
        pytest.skip("the reference run or its features are not here")
    from lenpred.data.rundir import RunDir
    from lenpred.features.store import load_features
    from lenpred.predictors.io import load_head
    from lenpred.predictors.pipeline import train_on_run
    from lenpred.serve import Batching, PredictionService, PredictRequest

    train_on_run("ridge", {}, RUN, FEATS, tmp_path / "ridge")
    rd = RunDir.open(RUN)
    feats = load_features(FEATS)
    p = rd.prompts().set_index("prompt_id").loc[feats.prompt_ids[:400]]
    p = p.sort_values("n_prompt_tokens").iloc[np.linspace(0, len(p) - 1, 6).astype(int)]  # short to long
    slow = Batching(max_wait_ms=50, timeout_s=3600)  # a busy CPU is slow
    svc = PredictionService.from_head(tmp_path / "ridge", batching=slow)

    async def go():
        async with svc:
            return await asyncio.gather(*(svc.predict(PredictRequest(prompt=t)) for t in p["text"]))

    out = asyncio.run(go())
    ids = [svc.runner._prepare(PredictRequest(prompt=t)) for t in p["text"]]
    assert ids == [list(map(int, x)) for x in p["prompt_token_ids"]]
    want = load_head(tmp_path / "ridge").predict(feats.subset(p.index.tolist()))
    np.testing.assert_allclose([r.predicted_tokens for r in out], want, rtol=1e-3)
    assert svc.runner.calls == 1 and out[0].card_hash == rd.card_hash
