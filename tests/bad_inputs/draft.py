"""Bad inputs of ``lenpred draft`` and ``lenpred generate`` (rows for tests/test_bad_input.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bad_input_harness import BadInput


def _head(path: Path, vocab: int = 96, hidden: int = 64, layers: int = 8, n_draft: int = 40) -> Path:
    """A small random head for a Llama target of that shape, saved in the released layout."""
    import numpy as np
    import torch
    from transformers import LlamaConfig

    from lenpred.draft.config import DraftConfig
    from lenpred.draft.io import save_draft, target_summary
    from lenpred.draft.model import Eagle3Draft
    from lenpred.draft.vocab import build_draft_vocab

    tcfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                       num_attention_heads=4, num_key_value_heads=2)
    head = Eagle3Draft(DraftConfig.for_target(tcfg, n_draft))
    head.init_weights(torch.Generator().manual_seed(0))
    d2t, t2d, _ = build_draft_vocab(np.arange(vocab)[::-1].copy(), n_draft)
    head.set_vocab(d2t, t2d)
    save_draft(head, path, meta={"target": target_summary(tcfg, None, "tiny")})
    return path


def _tiny_model(path: Path, vocab: int = 96, hidden: int = 64, layers: int = 8) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def _rewrite(head: Path, change: Any) -> None:
    from safetensors.torch import load_file, save_file

    f = head / "model.safetensors"
    sd = dict(load_file(str(f)))
    change(sd)
    save_file(sd, str(f))
    (head / "meta.json").unlink()  # a hand-edited head is no lenpred artifact any more (sha256 would differ)


def _other_target(**shape: int) -> Any:
    def setup(tmp: Path) -> dict[str, Path]:
        return {"head": _head(tmp / "head"), "model": _tiny_model(tmp / "model", **shape)}

    return setup


def _head_only(tmp: Path) -> dict[str, Path]:
    return {"head": _head(tmp / "head")}


def _missing_key(tmp: Path) -> dict[str, Path]:
    h = _head(tmp / "head")
    _rewrite(h, lambda sd: sd.pop("midlayer.post_attention_layernorm.weight"))
    return {"head": h}


def _extra_key(tmp: Path) -> dict[str, Path]:
    h = _head(tmp / "head")
    _rewrite(h, lambda sd: sd.__setitem__("midlayer.self_attn.rotary_emb.inv_freq", sd["norm.weight"][:8].clone()))
    return {"head": h}


def _bad_d2t(tmp: Path) -> dict[str, Path]:
    h = _head(tmp / "head")
    _rewrite(h, lambda sd: sd["d2t"].add_(60))  # draft id 39 -> target id 39 + 60 + ... >= 96
    return {"head": h}


def _run_without_token_ids(tmp: Path) -> dict[str, Path]:
    import pandas as pd

    from lenpred.data.rundir import RunDir

    card = {"model": {"id": "tiny", "fingerprint": "sha256:" + "ab" * 32, "vocab_size": 96},
            "prompts": {"source": "jsonl", "chat_template": False}, "sampling": {"max_new_tokens": 8},
            "engine": {"name": "openai"}}
    run = RunDir.create(tmp / "run", card)
    run.write_prompts(pd.DataFrame({"prompt_id": ["a", "b"], "idx": [0, 1], "text": ["x y", "z"],
                                    "n_prompt_tokens": [2, 1], "prompt_token_ids": [[5, 6], [7]]}))
    run.append_samples([{"prompt_id": p, "sample_idx": 0, "n_tokens": 3, "stop_reason": "eos", "text": "a b c",
                         "token_ids": [], "seed": 0} for p in ("a", "b")])
    return {"run": run.path}


CASES: list[BadInput] = [
    BadInput("draft-other-target-hidden", ["draft", "inspect", "{head}", "--model", "{model}"],
             _other_target(hidden=32), expect="hidden size mismatch"),
    BadInput("draft-other-target-vocab", ["draft", "inspect", "{head}", "--model", "{model}"],
             _other_target(vocab=120), expect="vocabulary mismatch"),
    BadInput("draft-other-target-layers", ["draft", "inspect", "{head}", "--model", "{model}"],
             _other_target(layers=5), expect="layer mismatch"),
    BadInput("generate-other-target", ["generate", "--draft", "{head}", "--model", "{model}", "--prompt", "hi"],
             _other_target(hidden=32), expect="hidden size mismatch"),
    BadInput("draft-missing-key", ["draft", "inspect", "{head}"], _missing_key,
             expect="missing key(s) midlayer.post_attention_layernorm.weight"),
    BadInput("draft-extra-key", ["draft", "inspect", "{head}"], _extra_key,
             expect="unexpected key(s) midlayer.self_attn.rotary_emb.inv_freq"),
    BadInput("draft-d2t-outside-vocab", ["draft", "inspect", "{head}"], _bad_d2t,
             expect="outside the target vocabulary"),
    BadInput("generate-k-zero", ["generate", "--draft", "{head}", "--k", "0", "--prompt", "hi"], _head_only,
             expect="--k must be >= 1"),
    BadInput("draft-train-no-token-ids", ["draft", "train", "--run", "{run}", "--out", "{tmp}/head"],
             _run_without_token_ids, expect="without token ids"),
    BadInput("draft-train-not-a-run", ["draft", "train", "--run", "{tmp}", "--out", "{tmp}/head"], None,
             expect="not a lenpred run directory"),
]


# ---------------------------------------------------------------- issue 20: limits, devices, damaged weights, prompts
def _nan_head(tmp: Path) -> dict[str, Path]:
    h = _head(tmp / "head")
    _rewrite(h, lambda sd: sd["fc.weight"].__setitem__((0, 0), float("nan")))
    return {"head": h}


def _prompt_file(text: str | None) -> Any:
    def setup(tmp: Path) -> dict[str, Path]:
        p = tmp / "prompt.txt"
        if text is None:
            p.mkdir()
        else:
            p.write_text(text)
        return {"pf": p}

    return setup


CASES += [
    BadInput("generate-k-runs-away", ["generate", "--draft", "{head}", "--k", "100000", "--prompt", "hi"], _head_only,
             expect="--k 100,000 is above the limit of 64"),
    BadInput("generate-tree-runs-away", ["generate", "--draft", "{head}", "--greedy", "--tree", "50,1000,100000",
                                         "--prompt", "hi"], _head_only, expect="tree top-k 1,000 is above the limit of 256"),
    BadInput("generate-empty-prompt", ["generate", "--prompt", ""], None, expect="--prompt is empty"),
    BadInput("generate-empty-prompt-file", ["generate", "--prompt-file", "{pf}"], _prompt_file(" \n"),
             expect="prompt.txt is empty"),
    BadInput("generate-prompt-file-is-a-directory", ["generate", "--prompt-file", "{pf}"], _prompt_file(None),
             expect="prompt.txt is a directory"),
    BadInput("generate-negative-threads", ["generate", "--threads", "-1", "--prompt", "hi"], None,
             expect="--threads must be >= 0"),
    BadInput("draft-head-with-nan-weights", ["draft", "inspect", "{head}"], _nan_head,
             expect="tensor fc.weight has 1 NaN or infinite value(s)"),
    BadInput("generate-draft-with-nan-weights", ["generate", "--draft", "{head}", "--greedy", "--prompt", "hi"], _nan_head,
             expect="NaN or infinite"),
    BadInput("draft-train-unknown-device", ["draft", "train", "--run", "{run}", "--out", "{tmp}/head", "--device", "npu0"],
             _run_without_token_ids, expect="--device 'npu0' is not a torch device"),
    BadInput("draft-train-negative-step-decay", ["draft", "train", "--run", "{run}", "--out", "{tmp}/head",
                                                 "--step-decay", "-0.5"], _run_without_token_ids,
             expect="--step-decay must be a positive number"),
    BadInput("draft-train-negative-threads", ["draft", "train", "--run", "{run}", "--out", "{tmp}/head", "--threads", "-3"],
             _run_without_token_ids, expect="--threads must be >= 0"),
]

CASES += [  # issue 29 part 11: the last bad-input tail
    BadInput("draft-cache-roles-names-none", ["draft", "cache", "--run", "{run}", "--roles", ","], _run_without_token_ids,
             expect="--roles ',' names no split role -- fix: pass some of train, val, test"),
]


def _run_of_a_config_only_model(tmp: Path, all_test: bool = False) -> dict[str, Path]:
    """A run with token ids whose model folder has a config but no real weights nor tokenizer: loading it
    fails, so a row passes only when its check comes before the model loads."""
    import pandas as pd
    from transformers import LlamaConfig

    from lenpred.data.rundir import RunDir
    from lenpred.data.split import SplitConfig, build_split, write_split

    LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=8, num_attention_heads=4,
                num_key_value_heads=2).save_pretrained(tmp / "model")
    (tmp / "model" / "model.safetensors").write_bytes(b"not weights")  # fingerprinted, never loadable
    card = {"model": {"id": str(tmp / "model")}, "prompts": {"source": "jsonl", "chat_template": False},
            "sampling": {"max_new_tokens": 8}, "engine": {"name": "openai"}}
    run = RunDir.create(tmp / "run", card)
    ids = [f"p{i}" for i in range(12)]
    run.write_prompts(pd.DataFrame({"prompt_id": ids, "idx": range(12), "text": ["x y"] * 12,
                                    "n_prompt_tokens": [2] * 12, "prompt_token_ids": [[5, 6]] * 12}))
    run.append_samples([{"prompt_id": p, "sample_idx": k, "n_tokens": 3, "stop_reason": "eos", "text": "a b c",
                         "token_ids": [7, 8, 9], "seed": k} for p in ids for k in range(2)])
    cfg = SplitConfig(test_min_samples=2, test_share=1.0) if all_test else SplitConfig(test_min_samples=2, test_share=0.2)
    write_split(build_split(run, cfg), run)
    (tmp / "cache-file").write_text("not a cache\n")
    return {"run": run.path, "cfile": tmp / "cache-file"}


_DT = ["draft", "train", "--run", "{run}", "--out", "{tmp}/head", "--no-progress", "--draft-vocab-size", "40"]
_DC = ["draft", "cache", "--run", "{run}", "--no-progress"]
CASES += [  # issue 29 part 11: checked before the target loads, not after
    BadInput("draft-train-layers-before-load", [*_DT, "--layers", "0,1,99"], _run_of_a_config_only_model,
             expect="layers (0, 1, 99) do not fit a target with 8 decoder layers"),
    BadInput("draft-cache-layers-before-load", [*_DC, "--layers", "0,1,99"], _run_of_a_config_only_model,
             expect="layers (0, 1, 99) do not fit a target with 8 decoder layers"),
    BadInput("draft-train-all-test-before-load", _DT, lambda t: _run_of_a_config_only_model(t, all_test=True),
             expect="the split has no training prompts"),
    BadInput("draft-train-cache-is-a-file-before-load", [*_DT, "--cache", "{cfile}"], _run_of_a_config_only_model,
             expect="is a file -- fix: pass a directory for --cache"),
    BadInput("draft-cache-cache-is-a-file-before-load", [*_DC, "--cache", "{cfile}"], _run_of_a_config_only_model,
             expect="is a file -- fix: pass a directory for --cache"),
    BadInput("draft-train-huge-vocab-before-load", [*_DT, "--draft-vocab-size", "100000", "--cache", "{tmp}/cache"],
             _run_of_a_config_only_model, expect="draft vocabulary size 100000 must be in 1..96"),
]

CASES += [  # issue 38 part 4: the sliced, bfloat16 hard-label pass
    BadInput("draft-cache-bad-shard", [*_DC, "--labels", "hard", "--shard", "2/2"], _run_of_a_config_only_model,
             expect="--shard 2/2: slice index must be in 0..1"),
    BadInput("draft-cache-bf16-soft-labels", [*_DC, "--compute-dtype", "bfloat16"], _run_of_a_config_only_model,
             expect="--compute-dtype bfloat16 is for the hard-label states pass"),
]
