"""Tiny random targets and heads for the draft tests (seconds, no real model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def tiny_llama(vocab: int = 96, hidden: int = 64, layers: int = 8, seed: int = 0, init: float = 0.2,
               passthrough_from: int | None = None) -> Any:
    """A random LlamaForCausalLM; a large init makes its next-token distributions peaked (few near-ties).

    ``passthrough_from=j``: decoder layers j.. add nothing to the residual stream (0: a bigram model,
    whose next-token law a head can learn from a few hundred tokens; a random deep target is not
    learnable from so little data, whatever the training code does)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        initializer_range=init, tie_word_embeddings=False, bos_token_id=1, eos_token_id=vocab - 1,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    if passthrough_from is not None:
        with torch.no_grad():
            for layer in model.model.layers[passthrough_from:]:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    return model


def tiny_head(model: Any, n_draft: int, seed: int = 1, counts: np.ndarray | None = None) -> Any:
    from lenpred.draft.config import DraftConfig
    from lenpred.draft.model import Eagle3Draft
    from lenpred.draft.vocab import build_draft_vocab

    cfg = DraftConfig.for_target(model.config, n_draft)
    head = Eagle3Draft(cfg)
    head.init_weights(torch.Generator().manual_seed(seed))
    V = model.config.vocab_size
    if counts is None:
        counts = np.random.default_rng(seed).integers(1, 100, V)
        counts[V - 1] = 10_000  # keep EOS in the draft vocabulary
    d2t, t2d, _ = build_draft_vocab(counts, n_draft)
    head.set_vocab(d2t, t2d)
    return head.eval()


TINY_CARD_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.1, "repetition_penalty": 1.0,
                      "frequency_penalty": 0.3, "presence_penalty": 0.0, "max_new_tokens": 40, "seed": 0}


def tiny_run(path: Any, model: Any, n_prompts: int = 16, n_samples: int = 3, max_new: int = 40, seed: int = 0,
             token_ids: bool = True) -> Any:
    """A run directory whose responses the tiny target sampled itself (so they are self-distillation data)."""
    import pandas as pd

    from lenpred.collect.base import SamplingConfig
    from lenpred.data.rundir import RunDir
    from lenpred.draft.speculative import SpeculativeDecoder
    from lenpred.draft.target import Target

    V = model.config.vocab_size
    card = {
        "model": {"id": "tiny", "fingerprint": "sha256:" + "ab" * 32, "tokenizer": "none", "vocab_size": V,
                  "eos_token": str(V - 1), "chat_template_sha256": None, "upstream": None},
        "prompts": {"source": "jsonl", "chat_template": False, "system_prompt": None, "seed": 0},
        "sampling": {**TINY_CARD_SAMPLING, "max_new_tokens": max_new},
        "engine": {"name": "test"},
    }
    run = RunDir.create(path, card)
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(1, V - 1, int(rng.integers(3, 9))).tolist() for _ in range(n_prompts)]
    run.write_prompts(pd.DataFrame({
        "prompt_id": [f"p{i}" for i in range(n_prompts)], "idx": list(range(n_prompts)),
        "text": [" ".join(map(str, p)) for p in prompts], "n_prompt_tokens": [len(p) for p in prompts],
        "prompt_token_ids": prompts,
    }))
    dec = SpeculativeDecoder(Target(model), None, k=0, sampling=SamplingConfig(**{**TINY_CARD_SAMPLING, "max_new_tokens": max_new}),
                             max_new_tokens=max_new, eos_ids=[V - 1])
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i, p in enumerate(prompts):
        for j in range(n_samples):
            g = dec.generate(p, generator=gen)
            rows.append({"prompt_id": f"p{i}", "sample_idx": j, "n_tokens": len(g.tokens), "stop_reason": g.stop_reason,
                         "text": "", "token_ids": g.tokens if token_ids else [], "seed": j})
    run.append_samples(rows)
    return run


def tiny_split(run: Any, n_val: int = 4, n_test: int = 0) -> Any:
    """A real split of a tiny run, by prompt order: the last ``n_test`` prompts test, the ``n_val``
    before them validation, the rest training."""
    from lenpred.data.split import Split, SplitConfig

    ids = [str(p) for p in run.prompts()["prompt_id"]]
    rest = ids[: len(ids) - n_test]
    roles = {p: "test" for p in ids[len(rest):]} | {p: "val" for p in rest[-n_val:]} | {p: "train" for p in rest[:-n_val]}
    return Split(run.card_hash, SplitConfig(), roles)
