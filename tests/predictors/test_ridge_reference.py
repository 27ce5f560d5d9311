"""The ridge head fitted through scikit-learn's RidgeCV agrees with the committed ridge head.

data/heads/ridge-smollm2-sharegpt was fitted by the hand-written leave-one-out SVD that RidgeCV
replaced; refitted on the same committed run and features, the penalty, the coefficients, the
leave-one-out MAE of every candidate and the test predictions are the same.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "data" / "runs" / "smollm2-sharegpt"
FEATS = ROOT / "data" / "features" / "smollm2-sharegpt"
HEAD = ROOT / "data" / "heads" / "ridge-smollm2-sharegpt"


def test_ridgecv_refit_agrees_with_the_committed_ridge_head(tmp_path: Path) -> None:
    if not all((p / n).is_file() for p, n in ((RUN, "card.json"), (FEATS, "meta.json"), (HEAD, "meta.json"))):
        pytest.skip("the reference run, its features or the committed ridge head are not here")
    import json

    from lenpred.predictors.pipeline import predict_run, train_on_run

    head, _ = train_on_run("ridge", None, RUN, FEATS, tmp_path / "ridge")
    state = json.loads((HEAD / "state.json").read_text())
    committed = load_file(HEAD / "weights.safetensors")
    assert head.alpha_ == state["alpha"]
    np.testing.assert_allclose(head.coef_, committed["coef"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(head.cv_mae_, committed["cv_mae"], rtol=1e-5)  # tokens
    np.testing.assert_array_equal(head.scaler_.mean, committed["x_mean"])
    old, _ = predict_run(HEAD, RUN, FEATS, roles=("test",))
    new, _ = predict_run(tmp_path / "ridge", RUN, FEATS, roles=("test",))
    a, b = old.frame.set_index("prompt_id"), new.frame.set_index("prompt_id")
    assert len(a) > 100 and list(a.index) == list(b.index)
    for col in ("pred_tokens", "spread", "q10", "q50", "q90"):
        np.testing.assert_allclose(b[col], a[col], rtol=1e-9, err_msg=col)
