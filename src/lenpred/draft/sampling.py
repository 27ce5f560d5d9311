"""The card's next-token distribution, for many positions at once (verification needs k + 1).

Same processors and order as the transformers collection engine (:mod:`lenpred.collect.hf`):
repetition penalty over prompt + output, frequency / presence penalties over the output, then
temperature, top-k, top-p, min-p. Speculative sampling is exact for whatever distribution this
returns, as long as target and draft go through the same function.
"""

from __future__ import annotations

from typing import Any

import torch

from lenpred.collect.base import SamplingConfig

__all__ = ["CardSampler", "sampling_from_card"]


def sampling_from_card(section: dict[str, Any] | None, **overrides: Any) -> SamplingConfig:
    """A :class:`SamplingConfig` from a run card's ``sampling`` section (fields it does not know are
    bookkeeping and dropped), with ``overrides`` applied; invalid values are one ConfigError line."""
    fields = set(SamplingConfig.model_fields)
    data = {k: v for k, v in (section or {}).items() if k in fields}
    data.update({k: v for k, v in overrides.items() if v is not None})
    return SamplingConfig.from_dict(data, "sampling")


class CardSampler:
    def __init__(self, sampling: SamplingConfig) -> None:
        from lenpred.collect.hf import card_warpers

        self.s = sampling
        self.warp = card_warpers(sampling)

    def probs(self, logits: torch.Tensor, counts: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        """logits (n, V) float32; counts (n, V) output-token counts; seen (n, V) bool (prompt + output).
        Returns (n, V) probabilities."""
        s = self.s
        x = logits.float()
        if s.repetition_penalty != 1.0:
            pen = torch.where(x > 0, x / s.repetition_penalty, x * s.repetition_penalty)
            x = torch.where(seen, pen, x)
        if s.frequency_penalty or s.presence_penalty:
            x = x - s.frequency_penalty * counts - s.presence_penalty * (counts > 0).float()
        x = self.warp(None, x)
        return torch.softmax(x, dim=-1)
