"""Synthetic features and run directories with a planted ground truth, for checking heads end to end:
the predictor tests and their bad-input rows, and the training-time benchmark's synthetic mode
(``python -m benchmarks.bench_predictors`` without ``--features``). The length analogue for the bound is
:mod:`lenpred.stats.synthetic`.

A latent vector u_i (4 dims) per prompt sets its mean length mu_i = 220 * exp(0.55 * s_i), where
s_i = u_i . w is standard normal; every hidden-state block is a different noisy linear image of u_i
(so each head's default blocks carry the signal), the side feature ``prompt_tokens`` is correlated
0.6 with s_i (a prompt-length head learns part of it), and each sample is drawn from
N(mu_i, (0.25 mu_i + 10)^2), rounded, clipped to [1, cap] (cap = 1024: a few samples truncate).
The per-prompt oracle (mu_i's own median) is known, so a test can say how much of the gap between
the constant and the oracle a head closes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.features.store import Features, save_features
from lenpred.predictors.targets import Targets

CAP = 1024
ALPHA, B = 0.25, 10.0
LAYERS = (10, 15, 30)
POOLS = ("last", "mean", "entropy")
SIDE_NAMES = ("prompt_tokens", "log_prompt_tokens", "entropy_mean", "entropy_std", "entropy_max", "entropy_last")
SPEC = {"model_fingerprint": "sha256:synthetic", "layers": list(LAYERS), "pools": list(POOLS),
        "side_names": list(SIDE_NAMES), "dtype": "float16", "entropy_temperature": 1.0}

CARD = {
    "model": {"id": "synthetic", "fingerprint": "sha256:synthetic", "tokenizer": "T", "vocab_size": 100,
              "eos_token": "</s>", "chat_template_sha256": "0"},
    "prompts": {"source": "synthetic-a", "chat_template": True, "system_prompt": None},
    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.1, "repetition_penalty": 1.0,
                 "frequency_penalty": 0.3, "presence_penalty": 0.0, "max_new_tokens": CAP, "seed": 0},
    "engine": {"name": "synthetic", "version": "0"},
}


def latent(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n, 4))
    w = np.array([0.8, -0.5, 0.3, 0.1])
    s = u @ (w / np.linalg.norm(w))  # (n,) standard normal
    return u, s


def features(ids: list[str], u: np.ndarray, s: np.ndarray, seed: int, d: int = 16, spec: dict | None = None,
             noise: float = 0.3) -> Features:
    """Blocks "<layer>.<pool>" (n, d), each a fixed random linear image of u plus noise."""
    rng = np.random.default_rng(seed + 1)
    maps = np.random.default_rng(12345)  # the same maps for every prompt set (same "model")
    blocks = {}
    for layer in LAYERS:
        for pool in POOLS:
            a = maps.standard_normal((u.shape[1], d))
            blocks[f"{layer}.{pool}"] = (u @ a + noise * rng.standard_normal((len(ids), d))).astype(np.float32)
    sp = 0.6 * s + 0.8 * rng.standard_normal(len(ids))
    pt = np.round(np.exp(3.5 + 0.6 * sp))
    ent = rng.standard_normal((len(ids), 4)) + 0.3 * s[:, None]
    side = np.column_stack([pt, np.log(pt), ent]).astype(np.float32)
    return Features(np.array(ids), blocks, side, SIDE_NAMES, dict(spec or SPEC))


def mu_of(s: np.ndarray) -> np.ndarray:
    return np.clip(220.0 * np.exp(0.55 * s), 15.0, 900.0)


def draw(mu: np.ndarray, k: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, K_max) NaN-padded samples and their truncation mask."""
    rng = np.random.default_rng(seed + 2)
    km = int(np.max(k))
    sd = ALPHA * mu + B
    y = np.clip(np.round(mu[:, None] + sd[:, None] * rng.standard_normal((len(mu), km))), 1, CAP)
    have = np.arange(km)[None, :] < np.asarray(k)[:, None]
    return np.where(have, y, np.nan), have & (y >= CAP)


def planted(n: int, k: int | np.ndarray = 2, seed: int = 0, d: int = 16) -> dict[str, Any]:
    """Features, Targets and the truth (mu, sd) for ``n`` prompts with ``k`` samples each."""
    ids = [f"p{seed}_{i}" for i in range(n)]
    u, s = latent(n, seed)
    mu = mu_of(s)
    kk = np.full(n, k) if np.isscalar(k) else np.asarray(k)
    y, tr = draw(mu, kk, seed)
    return {"X": features(ids, u, s, seed, d), "y": Targets(y, tr, CAP), "mu": mu, "sd": ALPHA * mu + B, "ids": ids,
            "text": [_text(v, i) for i, v in enumerate(s)]}


def _text(s: float, i: int) -> str:
    # a prompt whose wording says how long the answer should be (for the proxy's real-model test)
    if s > 0.5:
        return f"Write a detailed, long essay with many sections about topic {i}."
    if s < -0.5:
        return f"Answer with one word: is {i} even?"
    return f"Explain briefly what topic {i} is."


def write_run(root: Path, name: str = "run", n_small: int = 240, n_big: int = 40, k_big: int = 8, seed: int = 0,
              card: dict | None = None, spec: dict | None = None, with_features: bool = True) -> dict[str, Path]:
    """A run directory (prompts, samples, split.json) and its features artifact, from the planted model."""
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import SplitConfig, build_split, write_split

    n = n_small + n_big
    ids = [f"{name}-{i:04d}" for i in range(n)]
    k = np.array([k_big] * n_big + [2] * n_small)
    u, s = latent(n, seed)
    y, tr = draw(mu_of(s), k, seed)
    rd = RunDir.create(root / name, card or CARD)
    rd.write_prompts(pd.DataFrame({"prompt_id": ids, "idx": range(n), "text": [_text(v, i) for i, v in enumerate(s)],
                                   "n_prompt_tokens": [10] * n}))
    rows = [{"prompt_id": ids[i], "sample_idx": j, "n_tokens": int(y[i, j]), "stop_reason": "length" if tr[i, j] else "eos"}
            for i in range(n) for j in range(int(k[i]))]
    rd.append_samples(rows)
    write_split(build_split(rd, SplitConfig(val_share=0.15)), rd)
    out = {"run": rd.path}
    if with_features:
        out["features"] = root / f"{name}-features"
        save_features(out["features"], features(ids, u, s, seed, spec=spec), rd.card)
    return out
