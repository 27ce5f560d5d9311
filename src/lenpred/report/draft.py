"""What ``lenpred draft`` prints: ``inspect``'s description of a head (shape, vocabulary, layers, training
card) and, with ``--model``, its fit to that target; and the closing lines of ``train`` and ``cache``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["cache_line", "head_lines", "target_line", "train_lines"]


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


def target_line(model: str, layers: Sequence[int], n_layers: int) -> str:
    """``inspect --model``: the head fits the target, and reads these of its ``n_layers`` layers."""
    return f"target ok   {model}: reads layers {list(layers)} of {n_layers}"


def train_lines(res: Any) -> list[str]:
    """``lenpred draft train``'s closing lines from its :class:`lenpred.draft.train.TrainResult`."""
    fmt = ", ".join
    rate = f" ({res.steps_per_s:.2f} steps/s this session)" if res.steps_per_s else ""
    lines = [f"wrote {res.head_path} after {res.steps} steps{rate}"]
    if res.val_loss:
        lines.append(f"validation loss by unroll step: {fmt(f'{x:.3f}' for x in res.val_loss)}; "
                     f"top-1 agreement: {fmt(f'{x:.2f}' for x in res.val_acc)}")
    return [*lines, f"state cache: {res.cache_dir}"]


def cache_line(tf: dict[str, float], n: int, roles: Sequence[str], cdir: Any) -> str:
    """``lenpred draft cache``'s closing line: the tokens teacher-forced now (and how fast), and the cache's."""
    rate = f" ({tf['tokens'] / tf['seconds']:.0f} tokens/s)" if tf["tokens"] else " (all cached already)"
    return f"{int(tf['tokens'])} response tokens teacher-forced now{rate}; {n} response tokens of {','.join(roles)} in {cdir}"
