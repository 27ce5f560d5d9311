"""Pooling a prompt's per-position hidden states into one vector, and next-token entropies.

All functions take a padded batch and its attention mask, and never let a padded position enter a
result: padded positions are *selected away* (``torch.where`` / boolean indexing), not multiplied by
zero, because a left-padded row's padded positions can hold NaN (a query that may attend to no key)
and ``NaN * 0`` is NaN.

* ``last``: the state at the last real token -- what the model has when it emits the first token;
* ``mean``: the average over real tokens;
* ``entropy``: weights ``softmax(H_t / tau)`` over real positions t, where ``H_t`` is the model's
  next-token entropy (nats) after position t. Positions where the model is unsure what comes next
  are where the prompt leaves room, and that is what the answer's length depends on (the idea of
  entropy-guided token pooling). ``tau`` (``entropy_temperature``, default 1 nat) is a documented
  choice: a position whose entropy is 1 nat higher gets e times the weight; tau -> infinity gives
  the mean, tau -> 0 the single most uncertain position.

Entropies come from ``lm_head(final normed state)`` computed a chunk of positions at a time
(:func:`token_entropies`), so a 128k vocabulary never materialises (B, T, V) logits for a batch:
only (chunk, V) at once, and only for real positions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "POOLS", "pool_last", "pool_mean", "pool_entropy", "entropy_weights", "token_entropies",
    "entropy_stats", "ENTROPY_STATS",
]

POOLS = ("last", "mean", "entropy")
ENTROPY_STATS = ("entropy_mean", "entropy_std", "entropy_max", "entropy_last")


def _last_index(mask: Any) -> Any:
    """(B,) index of each row's last real position, for left or right padding alike."""
    import torch

    t = mask.shape[1]
    pos = torch.arange(t, device=mask.device).expand_as(mask)  # (B, T)
    return torch.where(mask.bool(), pos, torch.full_like(pos, -1)).max(dim=1).values  # (B,)


def pool_last(h: Any, mask: Any) -> Any:
    """(B, T, d), (B, T) -> (B, d): the state at each row's last real token."""
    import torch

    idx = _last_index(mask)  # (B,)
    return h[torch.arange(h.shape[0], device=h.device), idx]  # (B, d)


def pool_mean(h: Any, mask: Any) -> Any:
    """(B, T, d), (B, T) -> (B, d): mean over real tokens only."""
    import torch

    m = mask.bool().unsqueeze(-1)  # (B, T, 1)
    s = torch.where(m, h, torch.zeros((), dtype=h.dtype, device=h.device)).sum(dim=1)  # (B, d)
    return s / m.sum(dim=1).clamp(min=1).to(h.dtype)  # (B, d)


def entropy_weights(ent: Any, mask: Any, temperature: float) -> Any:
    """(B, T) entropies, (B, T) mask -> (B, T) weights: softmax(ent / tau) over real positions, 0 elsewhere."""
    import torch

    logits = torch.where(mask.bool(), ent / temperature, torch.full_like(ent, float("-inf")))  # (B, T)
    return torch.softmax(logits, dim=1)  # (B, T); padded positions get exp(-inf) = 0


def pool_entropy(h: Any, mask: Any, ent: Any, temperature: float) -> Any:
    """(B, T, d), (B, T), (B, T) -> (B, d): states weighted by :func:`entropy_weights`."""
    import torch

    w = entropy_weights(ent, mask, temperature).to(h.dtype).unsqueeze(-1)  # (B, T, 1)
    hz = torch.where(mask.bool().unsqueeze(-1), h, torch.zeros((), dtype=h.dtype, device=h.device))  # (B, T, d)
    return (w * hz).sum(dim=1)  # (B, d)


def token_entropies(h_final: Any, mask: Any, lm_head: Callable[[Any], Any], chunk: int = 256,
                    softcap: float | None = None) -> Any:
    """Next-token entropy (nats) at every real position; 0 at padded ones.

    ``h_final`` (B, T, d) is the final *normed* state (what ``lm_head`` reads). Real positions are
    gathered into (n, d) and pushed through ``lm_head`` ``chunk`` rows at a time, so memory peaks
    at (chunk, V) float32 logits whatever the batch size. ``softcap`` applies Gemma-style final
    logit soft-capping (``cap * tanh(z / cap)``) where the model config has one.
    """
    import torch

    sel = mask.bool()  # (B, T)
    flat = h_final[sel]  # (n, d): real positions only
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=h_final.device)  # (n,)
    for s in range(0, flat.shape[0], max(1, int(chunk))):
        z = lm_head(flat[s : s + chunk]).float()  # (c, V)
        if softcap:
            z = softcap * torch.tanh(z / softcap)
        logp = torch.log_softmax(z, dim=-1)  # (c, V)
        out[s : s + chunk] = -(logp.exp() * logp).sum(dim=-1)  # (c,)
    ent = torch.zeros(sel.shape, dtype=torch.float32, device=h_final.device)  # (B, T)
    ent[sel] = out
    return ent


def entropy_stats(ent: Any, mask: Any) -> Any:
    """(B, T), (B, T) -> (B, 4): mean, std (population), max and last-position entropy over real positions."""
    import torch

    m = mask.bool()  # (B, T)
    n = m.sum(dim=1).clamp(min=1).float()  # (B,)
    e = torch.where(m, ent, torch.zeros_like(ent))  # (B, T)
    mean = e.sum(dim=1) / n  # (B,)
    var = torch.where(m, (ent - mean[:, None]) ** 2, torch.zeros_like(ent)).sum(dim=1) / n  # (B,)
    mx = torch.where(m, ent, torch.full_like(ent, float("-inf"))).max(dim=1).values  # (B,)
    last = ent[torch.arange(ent.shape[0], device=ent.device), _last_index(mask)]  # (B,)
    return torch.stack([mean, var.sqrt(), mx, last], dim=1)  # (B, 4)
