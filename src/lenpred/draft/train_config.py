"""The settings of ``lenpred draft train`` and ``lenpred draft cache`` (CLI flags are derived from them)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from lenpred.config import Config
from lenpred.errors import ConfigError

__all__ = ["DraftTrainConfig", "check_step_decay"]


def check_step_decay(value: float) -> None:
    """Refuse a step decay that is not a positive number (checked before the run is read)."""
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"--step-decay must be a positive number, got {value}",
                          "the loss weight of unroll step i is step_decay**i: pass e.g. --step-decay 0.8")


class DraftTrainConfig(Config):
    """Settings of ``lenpred draft train`` (flags are derived from these fields)."""

    draft_vocab_size: int = Field(8192, description="draft vocabulary: the N most frequent target ids of the responses")
    ttt_steps: int = Field(3, description="training-time-test unroll (the release uses 7)")
    step_decay: float = Field(0.8, description="loss weight of unroll step i is step_decay**i")
    lr: float = Field(3e-4, description="peak learning rate (AdamW)")
    warmup_steps: int = Field(100, description="linear warm-up steps")
    max_steps: int = Field(4000, description="optimiser steps")
    grad_clip: float = Field(0.5, description="gradient-norm clip")
    tokens_per_batch: int = Field(2048, description="tokens (prompt + response) per optimiser step")
    max_seq_len: int = Field(2048, description="longer samples are cut to this many tokens")
    topk: int = Field(64, description="target top-k log-probabilities cached per response token")
    seed: int = Field(0, description="seed of initialisation and data order")
    checkpoint_every: int = Field(100, description="steps between checkpoints")
    eval_every: int = Field(250, description="steps between validation passes (0: only at the end)")
    val_samples: int = Field(32, description="validation samples (from the split's validation prompts)")
    max_prompts: int | None = Field(None, description="use only the first N training prompts (smoke runs)")
    max_samples_per_prompt: int | None = Field(None, description="use at most N samples of each prompt")
    init_lm_head: Literal["target", "random"] = Field("target", description="start lm_head from the target's rows")
    mask_out_of_vocab: bool = Field(True, description="skip positions whose target argmax is outside the draft vocabulary")
    layers: str | None = Field(None, description="target layers as 'a,b,c' (default: 2, L//2, L-3)")
    dtype: Literal["float16", "bfloat16", "float32"] = Field("float16", description="dtype of the saved head")
    format: Literal["safetensors", "bin"] = Field("safetensors", description="weight file of the saved head")

    def layer_tuple(self) -> tuple[int, ...] | None:
        if self.layers is None:
            return None
        try:
            out = tuple(int(x) for x in self.layers.split(","))
        except ValueError:
            raise ConfigError(f"layers must be three integers 'a,b,c', got {self.layers!r}",
                              "pass --layers LOW,MID,HIGH, e.g. --layers 2,15,27") from None
        if len(out) != 3:
            raise ConfigError(f"layers must be three integers 'a,b,c', got {self.layers!r}",
                              "pass --layers LOW,MID,HIGH, e.g. --layers 2,15,27")
        return out

    def check(self) -> None:
        for name in ("draft_vocab_size", "ttt_steps", "max_steps", "tokens_per_batch", "max_seq_len", "topk",
                     "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}",
                                  f"pass --{name.replace('_', '-')} 1 or more")
        if not self.lr > 0:
            raise ConfigError(f"lr must be positive, got {self.lr}", "pass a positive --lr, e.g. --lr 1e-4")

    def identity(self) -> dict[str, Any]:
        """The fields that determine the trained weights (checkpoint cadence and output form do not)."""
        skip = {"checkpoint_every", "eval_every", "val_samples", "dtype", "format"}
        return {k: v for k, v in self.to_dict().items() if k not in skip}
