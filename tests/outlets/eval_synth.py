"""Synthetic trajectories with a planted ground truth, for the head / baseline / bench tests.

Per prompt a latent s ~ N(0, 1) sets the mean length mu = clip(140 exp(0.5 s), 20, 400); each
sample's length L ~ N(mu, (0.3 mu + 10)^2), rounded, clipped to [4, CAP] (a sample reaching CAP is
truncated). Positions follow the documented scheme: t = 0, 32 ... 512, floor(f L) for f = 0.1 ...
0.75, and a stride of 48, all below L. At each position the blocks are fixed random linear images
(the same maps for every prompt set: one "model") plus noise of:

* ``draft``: (log1p(L - t), s) -- the draft state knows how much is left (what OUTLETS claims);
* ``fused``: (s, log1p(t)) -- prompt-level information only, as a prefill head has;
* ``target.10``: (log1p(L - t), s) with 4x the noise -- a weaker probe signal;
* ``draft_running``: the running mean of the draft states at the sample's positions so far.

So a head on ``draft`` can read the remaining length almost exactly, a head on ``fused`` can do no
better than the per-prompt oracle, and a broken head (labels shuffled) no better than the constant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenpred.outlets.store import Trajectory, save_trajectory

CAP = 512
D = 16
SPEC: dict[str, Any] = {
    "draft": {"sha256": "d" * 64, "path": "/somewhere/draft", "card": {"model.fingerprint": "sha256:tgt"}},
    "target": {"id": "synthetic", "fingerprint": "sha256:tgt"},
    "layers": {"fused": [3, 6, 9], "target": 10},
    "positions": {"fractions": [0.1, 0.25, 0.5, 0.75], "tokens": [32, 64, 128, 256, 512], "stride": 48},
}
CARD = {
    "model": {"id": "synthetic", "fingerprint": "sha256:tgt", "tokenizer": "T", "vocab_size": 100,
              "eos_token": "</s>", "chat_template_sha256": "0"},
    "prompts": {"source": "synthetic-traj", "chat_template": True, "system_prompt": None},
    "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.1, "repetition_penalty": 1.0,
                 "frequency_penalty": 0.0, "presence_penalty": 0.0, "max_new_tokens": CAP, "seed": 0},
    "engine": {"name": "synthetic", "version": "0"},
}


LIVE_SPEC: dict[str, Any] = {**SPEC, "positions": {**SPEC["positions"], "rows": "both", "live": {"first": 16, "every": None}}}


def positions(length: int, live: bool = False) -> list[int]:
    """The fraction scheme's positions; ``live``: also the live points 16, 32, 64, ... (rows "both")."""
    ts = {0, 32, 64, 128, 256, 512} | {int(np.floor(f * length)) for f in (0.1, 0.25, 0.5, 0.75)}
    ts |= set(range(0, length, 48))
    if live:
        ts |= {16 * 2**k for k in range(6)}
    return sorted(t for t in ts if t < length)


def lengths(n: int, k: int, seed: int, prefix: str) -> pd.DataFrame:
    """One row per sample: prompt_id, sample_idx, n_tokens, truncated, and the prompt latent s."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal(n)
    mu = np.clip(140.0 * np.exp(0.5 * s), 20.0, 400.0)
    sd = 0.3 * mu + 10.0
    y = np.clip(np.round(mu[:, None] + sd[:, None] * rng.standard_normal((n, k))), 4, CAP).astype(int)
    rows = [{"prompt_id": f"{prefix}{i:04d}", "sample_idx": j, "n_tokens": int(y[i, j]),
             "truncated": bool(y[i, j] >= CAP), "s": float(s[i])} for i in range(n) for j in range(k)]
    return pd.DataFrame(rows)


def trajectory(samples: pd.DataFrame, seed: int, spec: dict[str, Any] | None = None, noise: float = 0.1,
               live: bool = False) -> Trajectory:
    rng = np.random.default_rng(seed + 1000)
    maps = np.random.default_rng(12345)
    a_draft, a_fused, a_target = (maps.standard_normal((2, D)) for _ in range(3))
    idx, draft, fused, target, running = [], [], [], [], []
    for r in samples.itertuples(index=False):
        ts = np.array(positions(int(r.n_tokens), live), dtype=float)
        rem = r.n_tokens - ts
        z = np.column_stack([np.log1p(rem) - 4.5, np.full(ts.size, r.s)])
        dr = z @ a_draft + noise * rng.standard_normal((ts.size, D))
        draft.append(dr)
        running.append(np.cumsum(dr, axis=0) / np.arange(1, ts.size + 1)[:, None])
        fused.append(np.column_stack([np.full(ts.size, r.s), np.log1p(ts) - 4.5]) @ a_fused
                     + noise * rng.standard_normal((ts.size, D)))
        target.append(z @ a_target + 4 * noise * rng.standard_normal((ts.size, D)))
        idx.append(pd.DataFrame({"prompt_id": r.prompt_id, "sample_idx": r.sample_idx, "t": ts.astype(int),
                                 "length": int(r.n_tokens), "remaining": rem.astype(int), "truncated": r.truncated}))
    blocks = {"draft": np.vstack(draft), "fused": np.vstack(fused), "target.10": np.vstack(target),
              "draft_running": np.vstack(running)}
    return Trajectory(pd.concat(idx, ignore_index=True), {k: v.astype(np.float32) for k, v in blocks.items()},
                      dict(spec or (LIVE_SPEC if live else SPEC)))


def parts(n_train: int = 240, n_val: int = 60, n_test: int = 50, seed: int = 0, live: bool = False) -> dict[str, Any]:
    """Train (2 samples per prompt), validation (2) and test (8) trajectories and their lengths
    (``live``: with the live rows t = 16, 32, ... too, as ``--rows both`` writes them)."""
    out: dict[str, Any] = {}
    for i, (role, n, k) in enumerate((("train", n_train, 2), ("val", n_val, 2), ("test", n_test, 8))):
        s = lengths(n, k, seed + 10 * i, f"{role[:2]}")
        out[role] = {"lengths": s, "traj": trajectory(s, seed + 10 * i, live=live)}
    return out


def write_run(root: Path, data: dict[str, Any], spec: dict[str, Any] | None = None) -> dict[str, Path]:
    """A run directory (prompts, samples, split.json) holding ``data``'s samples, and the trajectory
    artifact of all of them."""
    from lenpred.data.rundir import RunDir
    from lenpred.data.split import Split, SplitConfig, write_split

    rd = RunDir.create(root / "run", CARD)
    allrows = pd.concat([data[r]["lengths"].assign(role=r) for r in ("train", "val", "test")], ignore_index=True)
    ids = allrows["prompt_id"].unique().tolist()
    rd.write_prompts(pd.DataFrame({"prompt_id": ids, "idx": range(len(ids)), "text": ids, "n_prompt_tokens": 10}))
    rd.append_samples([{"prompt_id": r.prompt_id, "sample_idx": int(r.sample_idx), "n_tokens": int(r.n_tokens),
                        "stop_reason": "length" if r.truncated else "eos"} for r in allrows.itertuples()])
    roles = dict(zip(allrows["prompt_id"], allrows["role"], strict=False))
    write_split(Split(rd.card_hash, SplitConfig(), roles), rd)
    trajs = [data[r]["traj"] for r in ("train", "val", "test")]
    full = Trajectory(pd.concat([t.index for t in trajs], ignore_index=True),
                      {k: np.vstack([t.blocks[k] for t in trajs]) for k in trajs[0].blocks}, dict(spec or trajs[0].spec))
    save_trajectory(root / "traj", full, rd.card, dtype="float32")
    return {"run": rd.path, "traj": root / "traj"}
