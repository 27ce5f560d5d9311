"""Planted-truth data shared by the predictor tests: made once per session, every head fitted once."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lenpred.predictors.synthetic import planted


@pytest.fixture(scope="session")
def data() -> dict[str, Any]:
    """400 training prompts (2 samples), 80 validation (2), 150 test (8): the reference run's shape, small."""
    return {"train": planted(400, 2, seed=0), "val": planted(80, 2, seed=1), "test": planted(150, 8, seed=2)}


@pytest.fixture(scope="session")
def fitted(data) -> dict[str, Any]:
    """name -> head fitted with its defaults (proxy on the precomputed 'embedding' block 15.mean, the text heads
    on the prompts' texts)."""
    from lenpred.predictors.registry import PREDICTORS, make_predictor

    out = {}
    tr, va = data["train"], data["val"]
    for name in PREDICTORS.names():
        if PREDICTORS.get(name).input_kind == "trajectory":
            continue  # the outlets head reads trajectory rows (tests/outlets)
        h = make_predictor(name)
        h.fit(inputs(name, tr), tr["y"], X_val=inputs(name, va), y_val=va["y"])
        out[name] = h
    return out


def _emb(part: dict[str, Any]) -> np.ndarray:
    """A stand-in for MiniLM embeddings (n, 384): a fixed linear image of a hidden-state block."""
    m = np.random.default_rng(7).standard_normal((part["X"].block("15.mean").shape[1], 384)) / 8
    return (part["X"].block("15.mean") @ m).astype(np.float32)


TEXT_HEADS = ("ngram", "gbdt")  # router-side heads: they read the prompt text (lenpred.predictors.synthetic._text: 3 wordings of s)


def inputs(name: str, part: dict[str, Any]) -> Any:
    if name in TEXT_HEADS:
        return part["text"]
    return _emb(part) if name == "proxy" else part["X"]
