"""What ``lenpred draft inspect`` prints about a draft head: shape, vocabulary, layers, training card."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["head_lines"]


def head_lines(head: Any, ignored_fields: Sequence[str] = ()) -> list[str]:
    """The description of a loaded head (:class:`lenpred.draft.io.DraftHead`); ``ignored_fields``: the
    config.json fields lenpred does not read (exporters' bookkeeping)."""
    c = head.config
    n_params = sum(p.numel() for p in head.model.parameters())
    lines = [
        f"head        {head.path} ({head.weights_file}, config dtype {c.torch_dtype})",
        f"shape       hidden {c.hidden_size} (reads target states of {c.target_hidden_size}), "
        f"{c.num_attention_heads} heads / {c.num_key_value_heads} kv, head_dim {c.head_dim}, mlp {c.intermediate_size}",
        f"vocabulary  {c.draft_vocab_size} draft ids of {c.vocab_size} target ids",
        f"layers      {list(c.layers) if c.layers else 'the default (2, L//2, L-3) of the target'}",
        f"parameters  {n_params / 1e6:.2f} M (embeddings are the target's, not stored)",
    ]
    if ignored_fields:
        lines.append(f"ignored     config.json fields: {', '.join(ignored_fields)}")
    if head.dropped:
        lines.append(f"dropped     {', '.join(head.dropped)} (lenpred uses the target's own)")
    meta = head.meta or {}
    if meta.get("target"):
        t = meta["target"]
        lines.append(f"target      {t.get('id')} {t.get('fingerprint')} ({t.get('num_hidden_layers')} layers)")
    tr = meta.get("training")
    if tr:
        d = tr.get("data", {})
        lines.append(f"training    {tr.get('steps')} steps on {d.get('train_samples')} samples of "
                     f"{d.get('train_prompts')} training prompts of {tr.get('run')} (seed {tr.get('seed')}); "
                     f"final val top-1 {tr.get('final', {}).get('val_acc')}")
    return lines
