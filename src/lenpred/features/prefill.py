"""Prefill features: one forward pass over a prompt's tokens, hidden states pooled per layer.

:class:`FeatureConfig` says what to compute (the *spec* part: layers, pools, entropy temperature,
storage dtype, compute dtype, max tokens) and how (the runtime part: batch sizes, padding side,
device), and :class:`Extractor` does it for a batch of token-id lists.

Layers are indexed like transformers' ``output_hidden_states``: 0 = the embeddings, ``i`` = the
output of decoder layer ``i``, and ``L`` (the last) = the final *normed* state, the one ``lm_head``
reads. The default is three layers: about a third of the way up (the layer a TRAIL-style probe
reads), the middle one and the last; for SmolLM2-135M's 30 layers, 10, 15 and 30.

A prompt longer than ``max_tokens`` keeps its *last* ``max_tokens`` tokens (where the answer
starts); its ``prompt_tokens`` side feature still counts them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from lenpred import __version__
from lenpred.config import Config
from lenpred.errors import ConfigError, ModelError
from lenpred.features.pooling import (
    ENTROPY_STATS,
    POOLS,
    entropy_stats,
    pool_entropy,
    pool_last,
    pool_mean,
    token_entropies,
)

__all__ = [
    "FeatureConfig", "Extractor", "default_layers", "plan_batches", "SIDE_NAMES", "block_names",
    "make_spec", "resolve_layers", "check_layers", "text_config",
]

SIDE_NAMES = ("prompt_tokens", "log_prompt_tokens", *ENTROPY_STATS)
Pool = Literal["last", "mean", "entropy"]


class FeatureConfig(Config):
    """What features to compute and how. The first six fields enter the feature spec."""

    layers: tuple[int, ...] | None = Field(
        None, description="hidden-state layers (0 = embeddings, L = final normed state); default: ~L/3, L/2, L")
    pools: tuple[Pool, ...] = Field(POOLS, description="poolings of each layer: last, mean, entropy")
    entropy_temperature: float = Field(1.0, gt=0, description="tau of the entropy-guided weights softmax(H/tau), nats")
    dtype: Literal["float16", "float32"] = Field("float16", description="storage dtype of the blocks on disk")
    compute_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="weight / compute dtype of the forward pass (bfloat16 on a GPU is fine)")
    max_tokens: int | None = Field(None, ge=1, description="keep at most the last N prompt tokens (default: the model's context)")
    batch_size: int = Field(8, ge=1, description="prompts per forward pass (sorted by length to cut padding)")
    batch_tokens: int = Field(8192, ge=1, description="cap on padded tokens (rows x longest) per forward pass")
    padding_side: Literal["right", "left"] = Field("right", description="padding side (results agree to float tolerance)")
    entropy_chunk: int = Field(256, ge=1, description="positions per lm_head chunk when computing entropies")
    chunk_prompts: int = Field(128, ge=1, description="prompts per resumable work chunk")
    device: str = Field("cpu", description="torch device (cpu, cuda, cuda:1)")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default torch's; 1 is faster on an oversubscribed CPU)")

    @classmethod
    def from_spec(cls, spec: dict[str, Any], **runtime: Any) -> FeatureConfig:
        """The config that computes features of ``spec`` (a :func:`make_spec` result, e.g. the one a head
        was trained on) again; ``runtime`` sets the fields that do not enter the spec (threads, device...)."""
        return cls(layers=tuple(spec["layers"]), pools=tuple(spec["pools"]),
                   entropy_temperature=float(spec["entropy_temperature"]), dtype=spec["dtype"],
                   compute_dtype=spec["compute_dtype"], max_tokens=int(spec["max_tokens"]), **runtime)

    @field_validator("layers", "pools")
    @classmethod
    def _distinct(cls, v: Any) -> Any:
        if v is not None and (len(v) == 0 or len(set(v)) != len(v)):
            raise ConfigError("must be a non-empty list without repeats", "name each value once, e.g. --layers 10,20")
        return v

    @field_validator("layers")
    @classmethod
    def _non_negative(cls, v: Any) -> Any:
        if v is not None and min(v) < 0:
            raise ConfigError("layers are 0 (embeddings) .. L (the last layer); negative indices are not allowed",
                              "count layers from 0, e.g. --layers 10,20")
        return v


def default_layers(n_layers: int) -> tuple[int, ...]:
    """About a third of the way up, the middle one and the last (30 -> 10, 15, 30)."""
    third = max(1, round(n_layers / 3))
    mid = max(1, n_layers // 2)
    return tuple(sorted({third, mid, n_layers}))


def block_names(layers: Sequence[int], pools: Sequence[str]) -> list[str]:
    return [f"{layer}.{pool}" for layer in layers for pool in pools]


def text_config(config: Any) -> Any:
    """The language-model part of a (possibly multimodal) transformers config."""
    get = getattr(config, "get_text_config", None)
    return get() if callable(get) else config


def check_layers(layers: Sequence[int], n_layers: int, model: str) -> None:
    bad = [x for x in layers if not 0 <= x <= n_layers]
    if bad:
        raise ConfigError(
            f"--layers {bad[0]} is beyond the depth of {model} ({n_layers} layers: use 0 = embeddings .. {n_layers})",
            f"pick layers in 0..{n_layers}, or omit --layers for the default {','.join(map(str, default_layers(n_layers)))}",
        )


def effective_max_tokens(cfg: FeatureConfig, config: Any) -> int:
    context = int(getattr(text_config(config), "max_position_embeddings", 0) or 0)
    return int(cfg.max_tokens or context or 4096)


def resolve_layers(cfg: FeatureConfig, config: Any) -> tuple[int, ...]:
    return cfg.layers if cfg.layers is not None else default_layers(int(text_config(config).num_hidden_layers))


def make_spec(cfg: FeatureConfig, config: Any, model_id: str, fingerprint: str) -> dict[str, Any]:
    """The feature spec: everything that determines the numbers (and the writer's version).
    Needs only the model's config, so it is known before any weights are loaded."""
    tc = text_config(config)
    layers = resolve_layers(cfg, config)
    return {
        "model": {"id": model_id, "fingerprint": fingerprint},
        "n_layers": int(tc.num_hidden_layers), "hidden_size": int(tc.hidden_size),
        "layers": list(layers), "layer_index": "hidden_states (0 = embeddings, L = final normed state)",
        "pools": list(cfg.pools), "blocks": block_names(layers, cfg.pools),
        "entropy_temperature": cfg.entropy_temperature, "entropy_unit": "nats",
        "dtype": cfg.dtype, "compute_dtype": cfg.compute_dtype,
        "max_tokens": effective_max_tokens(cfg, config), "truncation": "keep the last max_tokens tokens",
        "side_names": list(SIDE_NAMES),
        "lenpred_version": __version__,
    }


def plan_batches(lengths: Sequence[int], batch_size: int, batch_tokens: int) -> list[list[int]]:
    """Group positions 0..n-1 (already in the order to process, e.g. by length) into consecutive
    batches of at most ``batch_size`` rows and ``batch_tokens`` padded tokens (rows x longest)."""
    out: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        m = max(longest, int(n))
        if cur and (len(cur) + 1 > batch_size or (len(cur) + 1) * m > batch_tokens):
            out.append(cur)
            cur, m = [], int(n)
        cur.append(i)
        longest = m
    if cur:
        out.append(cur)
    return out


class Extractor:
    """Computes the blocks and side features of a batch of prompts with one forward pass.

    ``forward_calls`` counts forward passes (the resume tests check that nothing is recomputed).
    """

    def __init__(self, model: Any, cfg: FeatureConfig, layers: Sequence[int]) -> None:
        self.model = model
        self.cfg = cfg
        self.layers = tuple(layers)
        tc = text_config(model.config)
        self.n_layers = int(tc.num_hidden_layers)
        check_layers(self.layers, self.n_layers, type(model).__name__)
        self.max_tokens = effective_max_tokens(cfg, model.config)
        self.base = model.base_model  # the decoder without lm_head: no (B, T, V) logits
        self.lm_head = model.get_output_embeddings()
        self.softcap = getattr(tc, "final_logit_softcapping", None)
        self.forward_calls = 0

    @classmethod
    def load(cls, folder: Any, cfg: FeatureConfig, layers: Sequence[int]) -> Extractor:
        import torch
        from transformers import AutoModelForCausalLM

        if cfg.threads:
            # with more runnable threads than cores, torch's threads wait on each other at every op
            # barrier (measured here: 1 thread ran 3x faster than 2 beside a busy collection)
            torch.set_num_threads(cfg.threads)
        try:
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, cfg.compute_dtype))
        except Exception as e:  # transformers raises many types
            raise ModelError(f"transformers could not load {folder} ({type(e).__name__}: {e})".splitlines()[0],
                             "pass a model folder transformers can load (config.json and weights)") from e
        try:
            model.to(cfg.device)
        except (RuntimeError, AssertionError) as e:  # e.g. cuda asked for on a machine without one
            raise ModelError(f"cannot move the model to device {cfg.device!r} ({e})".splitlines()[0],
                             "pass --device cpu, or a device this machine has") from None
        return cls(model.eval(), cfg, layers)

    def spec(self, model_id: str, fingerprint: str) -> dict[str, Any]:
        return make_spec(self.cfg, self.model.config, model_id, fingerprint)

    def features(self, seqs: Sequence[Sequence[int]]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Token-id lists -> ({block: (B, d) float32}, side (B, S) float32), one forward pass."""
        import torch

        if not seqs or any(len(s) == 0 for s in seqs):
            raise ModelError("a prompt has no tokens", "every prompt needs at least one token id")
        kept = [list(s)[-self.max_tokens :] for s in seqs]
        b, t = len(kept), max(len(s) for s in kept)
        dev = self.cfg.device
        ids = torch.zeros((b, t), dtype=torch.long)  # (B, T); pad id 0 never reaches a result
        mask = torch.zeros((b, t), dtype=torch.long)  # (B, T)
        for i, s in enumerate(kept):
            sl = slice(t - len(s), t) if self.cfg.padding_side == "left" else slice(0, len(s))
            ids[i, sl] = torch.tensor(s, dtype=torch.long)
            mask[i, sl] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        # positions count real tokens only, so a left-padded row sees the same positions as alone
        pos = (mask.cumsum(dim=1) - 1).clamp(min=0)  # (B, T)
        with torch.inference_mode():
            out = self.base(input_ids=ids, attention_mask=mask, position_ids=pos,
                            output_hidden_states=True, use_cache=False)
            self.forward_calls += 1
            hs = out.hidden_states  # L + 1 tensors of (B, T, d)
            ent = token_entropies(out.last_hidden_state, mask, self.lm_head, self.cfg.entropy_chunk, self.softcap)  # (B, T)
            blocks: dict[str, np.ndarray] = {}
            for layer in self.layers:
                h = hs[layer].float()  # (B, T, d)
                for pool in self.cfg.pools:
                    if pool == "last":
                        v = pool_last(h, mask)
                    elif pool == "mean":
                        v = pool_mean(h, mask)
                    else:
                        v = pool_entropy(h, mask, ent, self.cfg.entropy_temperature)
                    blocks[f"{layer}.{pool}"] = v.cpu().numpy().astype(np.float32)  # (B, d)
            stats = entropy_stats(ent, mask).cpu().numpy()  # (B, 4)
        n_full = np.array([len(s) for s in seqs], dtype=np.float32)  # (B,)
        side = np.column_stack([n_full, np.log(n_full), stats]).astype(np.float32)  # (B, S)
        return blocks, side

