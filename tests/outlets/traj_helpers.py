"""Tiny runs, targets and draft heads for the trajectory-feature tests (seconds, no real model).

Responses are hand-made token sequences (teacher forcing takes any sequence), so lengths and stop
reasons are exactly what a test needs: an empty response, short ones, truncated ones at the cap.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "draft"))
from draft_helpers import tiny_head, tiny_llama

__all__ = ["CAP", "FAKE_FP", "LENGTHS", "make_run", "save_head", "save_model", "tiny_head", "tiny_llama"]

FAKE_FP = "sha256:" + "ab" * 32
CAP = 150
# per prompt, the lengths of its samples (CAP = truncated)
LENGTHS = [[0, 37, CAP], [5, 70, 12], [150, 1, 33], [64, 128, 9], [20, 100, 40], [3, 80, 150]]


def save_model(path: Path, model: Any) -> tuple[Path, str]:
    """Save a tiny target as a local HF folder; returns (folder, its lenpred fingerprint)."""
    from lenpred.models.loading import resolve

    model.save_pretrained(path)
    return path, resolve(str(path)).fingerprint


def make_run(path: Path, model: Any, *, fingerprint: str = FAKE_FP, model_id: str = "tiny",
             lengths: list[list[int]] | None = None, token_ids: bool = True, seed: int = 0,
             test_min_samples: int = 3, prompts: list[list[int]] | None = None,
             responses: list[list[list[int]]] | None = None, roles: dict[str, str] | None = None) -> Any:
    """A run with hand-made responses and a written split (prompts with 3 samples are test candidates).
    ``prompts`` / ``responses`` (per prompt, its samples' token ids) replace the random ones."""
    import pandas as pd

    from lenpred.data.rundir import RunDir
    from lenpred.data.split import Split, SplitConfig, build_split, write_split

    if responses is not None:
        lengths = [[len(r) for r in rs] for rs in responses]
    lengths = LENGTHS if lengths is None else lengths
    V = model.config.vocab_size
    card = {
        "model": {"id": model_id, "fingerprint": fingerprint, "tokenizer": "none", "vocab_size": V,
                  "eos_token": str(V - 1), "chat_template_sha256": None, "upstream": None},
        "prompts": {"source": "jsonl", "chat_template": False, "system_prompt": None, "seed": 0},
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0,
                     "frequency_penalty": 0.0, "presence_penalty": 0.0, "max_new_tokens": CAP, "seed": 0},
        "engine": {"name": "test"},
    }
    run = RunDir.create(path, card)
    rng = np.random.default_rng(seed)
    if prompts is None:
        prompts = [rng.integers(1, V - 1, int(rng.integers(2, 9))).tolist() for _ in lengths]
    run.write_prompts(pd.DataFrame({
        "prompt_id": [f"p{i}" for i in range(len(lengths))], "idx": list(range(len(lengths))),
        "text": [" ".join(map(str, p)) for p in prompts], "n_prompt_tokens": [len(p) for p in prompts],
        "prompt_token_ids": prompts,
    }))
    rows = []
    for i, ls in enumerate(lengths):
        for j, L in enumerate(ls):
            ids = rng.integers(1, V - 1, L).tolist() if responses is None else list(responses[i][j])
            rows.append({"prompt_id": f"p{i}", "sample_idx": j, "n_tokens": L, "stop_reason": "length" if L >= CAP else "eos",
                         "text": "", "token_ids": ids if token_ids else [], "seed": j})
    run.append_samples(rows)
    if roles is not None:
        write_split(Split(run.card_hash, SplitConfig(), roles), run)
    elif token_ids:
        write_split(build_split(run, SplitConfig(test_min_samples=test_min_samples, test_share=0.5, val_share=0.3)), run)
    return run


def save_head(path: Path, model: Any, *, fingerprint: str = FAKE_FP, n_draft: int = 48, seed: int = 1) -> Path:
    """A random draft head for ``model`` in the released layout, its meta naming the target."""
    from lenpred.draft.io import save_draft, target_summary

    head = tiny_head(model, n_draft, seed=seed)
    save_draft(head, path, dtype="float32", meta={"target": target_summary(model.config, fingerprint, "tiny")})
    return path
