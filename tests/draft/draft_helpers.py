"""Tiny random targets and heads for the draft tests (seconds, no real model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def tiny_llama(vocab: int = 96, hidden: int = 64, layers: int = 8, seed: int = 0, init: float = 0.2) -> Any:
    """A random LlamaForCausalLM; a large init makes its next-token distributions peaked (few near-ties)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        initializer_range=init, tie_word_embeddings=False, bos_token_id=1, eos_token_id=vocab - 1,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


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
