"""Bad inputs of `lenpred features` (rows for tests/test_bad_input.py), and the small fakes the
features tests share: a tiny random Llama saved to a folder, and a run directory made with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bad_input_harness import BadInput

TINY_LAYERS = 4


def make_tiny_model(folder: Path, seed: int = 0, layers: int = TINY_LAYERS) -> Path:
    """A randomly initialised 4-layer Llama (hidden 32, vocab 101) saved as a safetensors folder.
    ``initializer_range`` is large so next-token entropies differ clearly between positions."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=101, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      initializer_range=0.3, tie_word_embeddings=False)
    torch.manual_seed(seed)
    LlamaForCausalLM(cfg).eval().save_pretrained(folder, safe_serialization=True)
    return folder


def tiny_card(model_dir: Path) -> dict[str, Any]:
    from lenpred.models.loading import resolve

    return {
        "model": {"id": str(model_dir), "fingerprint": resolve(str(model_dir)).fingerprint, "vocab_size": 101},
        "prompts": {"source": "fake", "seed": 0, "chat_template": False, "system_prompt": None},
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 32, "seed": 0},
        "engine": {"name": "fake"},
    }


def prompt_table(n: int, seed: int = 0, start: int = 0, min_len: int = 2, max_len: int = 24) -> pd.DataFrame:
    """``n`` prompts of random lengths and token ids (seeded), ids p000.., positions start.."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(start, start + n):
        ln = int(rng.integers(min_len, max_len + 1))
        ids = rng.integers(1, 101, size=ln).tolist()
        rows.append({"prompt_id": f"p{k:03d}", "idx": k, "text": f"prompt {k}", "n_prompt_tokens": ln,
                     "prompt_token_ids": ids})
    return pd.DataFrame(rows)


def make_run(folder: Path, model_dir: Path, n: int = 10, seed: int = 0, prompts: bool = True) -> Path:
    from lenpred.data.rundir import RunDir

    rd = RunDir.create(folder, tiny_card(model_dir))
    if prompts:
        table = prompt_table(n, seed)
        rd.write_prompts(table)
        rd.append_samples([{"prompt_id": p, "sample_idx": 0, "n_tokens": 5, "stop_reason": "eos"}
                           for p in table["prompt_id"]])
    return folder


# ---------------------------------------------------------------- setups
def _no_prompts(tmp: Path) -> dict[str, Path]:
    model = make_tiny_model(tmp / "model")
    return {"run": make_run(tmp / "run", model, prompts=False)}


def _run(tmp: Path) -> dict[str, Path]:
    model = make_tiny_model(tmp / "model")
    return {"run": make_run(tmp / "run", model)}


def _run_other_model(tmp: Path) -> dict[str, Path]:
    model = make_tiny_model(tmp / "model")
    other = make_tiny_model(tmp / "other", seed=1)
    return {"run": make_run(tmp / "run", model), "other": other}


def _run_and_foreign_out(tmp: Path) -> dict[str, Path]:
    d = _run(tmp)
    out = tmp / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my own file\n")
    return {**d, "out": out}


def _fake_shard(path: Path, ids: list[str], index: int, count: int, total: int, temperature: float = 1.0) -> Path:
    from lenpred.features.shards import prompts_sha256
    from lenpred.features.store import Features, save_features

    rng = np.random.default_rng(index)
    spec = {"layers": [2], "pools": ["last"], "entropy_temperature": temperature, "dtype": "float16",
            "side_names": ["prompt_tokens"]}
    feats = Features(np.array(ids), {"2.last": rng.normal(size=(len(ids), 4)).astype(np.float32)},
                     np.ones((len(ids), 1), np.float32), ("prompt_tokens",), spec)
    all_ids = [f"p{k:03d}" for k in range(total)]
    save_features(path, feats, {"card_hash": "0123456789abcdef"},
                  meta={"prompts": {"total": total, "sha256": prompts_sha256(all_ids)},
                        "shard": {"index": index, "count": count}})
    return path


def _shards_other_spec(tmp: Path) -> dict[str, Path]:
    return {"a": _fake_shard(tmp / "s0", ["p000", "p002"], 0, 2, 4),
            "b": _fake_shard(tmp / "s1", ["p001", "p003"], 1, 2, 4, temperature=2.0)}


def _shards_with_gap(tmp: Path) -> dict[str, Path]:
    return {"a": _fake_shard(tmp / "s0", ["p000", "p003"], 0, 3, 6),
            "b": _fake_shard(tmp / "s2", ["p002", "p005"], 2, 3, 6)}


def _shards_overlapping(tmp: Path) -> dict[str, Path]:
    return {"a": _fake_shard(tmp / "s0", ["p000", "p002"], 0, 2, 4),
            "b": _fake_shard(tmp / "s1", ["p002", "p001", "p003"], 1, 2, 4)}


CASES: list[BadInput] = [
    BadInput("features-run-without-prompts", ["features", "--run", "{run}", "--out", "{tmp}/feats"], _no_prompts,
             expect="has no prompts.parquet"),
    BadInput("features-shard-out-of-range", ["features", "--run", "{tmp}", "--out", "{tmp}/feats", "--shard", "3/2"],
             None, expect="--shard 3/2: slice index must be in 0..1"),
    BadInput("features-shard-malformed", ["features", "--run", "{tmp}", "--out", "{tmp}/feats", "--shard", "half"],
             None, expect="not of the form I/N"),
    BadInput("features-layers-beyond-depth", ["features", "--run", "{run}", "--out", "{tmp}/feats", "--layers", "2,9"],
             _run, expect="--layers 9 is beyond the depth"),
    BadInput("features-unknown-pool", ["features", "--run", "{run}", "--out", "{tmp}/feats", "--pools", "last,max"],
             _run, expect="unknown pooling 'max'"),
    BadInput("features-model-mismatch", ["features", "--run", "{run}", "--out", "{tmp}/feats", "--model", "{other}"],
             _run_other_model, expect="the run was collected with"),
    BadInput("features-out-not-artifact", ["features", "--run", "{run}", "--out", "{out}"], _run_and_foreign_out,
             expect="non-empty directory that is not a lenpred artifact"),
    BadInput("features-merge-other-spec", ["features", "--merge", "{a}", "{b}", "--out", "{tmp}/merged"],
             _shards_other_spec, expect="another feature spec"),
    BadInput("features-merge-gap", ["features", "--merge", "{a}", "{b}", "--out", "{tmp}/merged"],
             _shards_with_gap, expect="missing shard(s) 1/3"),
    BadInput("features-merge-overlap", ["features", "--merge", "{a}", "{b}", "--out", "{tmp}/merged"],
             _shards_overlapping, expect="shards overlap"),
    BadInput("features-no-run", ["features", "--out", "{tmp}/feats"], None, expect="needs --run"),
]

CASES += [  # issue 39 part 3: argparse took -1/2 for an option ("expected one argument")
    BadInput("features-shard-negative", ["features", "--run", "{tmp}", "--out", "{tmp}/feats", "--shard", "-1/2"],
             None, expect="--shard -1/2: slice index must be in 0..1 (and N >= 1) -- fix: pass --shard I/N with 0 <= I < N"),
]

CASES += [  # issue 39 part 3: 10 prompts in 11 shards (was: a traceback in np.stack, OUT.work left)
    BadInput("features-empty-shard", ["features", "--run", "{run}", "--out", "{tmp}/feats", "--shard", "10/11"], _run,
             expect="shard 10/11 holds no prompt: the run has 10 prompt(s) for 11 shards -- fix: pass fewer shards"),
]
