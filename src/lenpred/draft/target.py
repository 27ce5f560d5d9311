"""The target model as the draft sees it: logits plus the three captured hidden states.

``Target.forward(ids, cache)`` runs the transformers model with ``output_hidden_states`` and returns
float32 logits and the concatenation of ``hidden_states[j]`` for the head's layers ``j`` (the
residual stream *entering* decoder layer ``j``; see :mod:`lenpred.draft.config`). With a
``DynamicCache`` it continues a sequence; :meth:`Target.crop` drops rejected positions.
:meth:`Target.states_only` is the same target seen through OUTLETS' states-only pass (the three states,
no LM head, no layers above the highest captured one), which hard-label state caches use.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from lenpred.draft.config import default_layers
from lenpred.errors import ModelError

__all__ = ["Target"]


class Target:
    def __init__(self, model: Any, layers: tuple[int, ...] | None = None) -> None:
        self.model = model
        cfg = model.config
        self.config = cfg
        self.n_layers = int(cfg.num_hidden_layers)
        self.hidden_size = int(cfg.hidden_size)
        self.vocab_size = int(model.get_input_embeddings().weight.shape[0])
        self.layers = tuple(layers) if layers is not None else default_layers(self.n_layers)
        if len(self.layers) != 3 or not all(0 <= j < self.n_layers for j in self.layers):
            raise ModelError(f"layers {self.layers} do not fit a target with {self.n_layers} decoder layers",
                             f"use three layers in 0..{self.n_layers - 1}")
        params = inspect.signature(model.forward).parameters
        # transformers >= 5.2x names the argument `cache`; older versions `past_key_values`
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    @property
    def embedding(self) -> torch.nn.Module:
        return self.model.get_input_embeddings()

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    def states_only(self, dtype: str = "float32") -> Any:
        """This target's states-only pass (:class:`lenpred.draft.teacher.StatesOnlyTarget`): ids ->
        the concatenated states of its three layers, no LM head; a prompt's samples batched on its cache."""
        from lenpred.draft.teacher import StatesOnlyTarget

        return StatesOnlyTarget(self.model, self.layers, dtype)

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        try:
            return DynamicCache(config=self.config)
        except TypeError:  # older transformers
            return DynamicCache()

    @staticmethod
    def crop(cache: Any, n: int) -> None:
        """Keep the first ``n`` positions. A negative argument removes tokens in every version."""
        cur = int(cache.get_seq_length())
        if cur > n:
            cache.crop(n - cur)

    @staticmethod
    def keep(cache: Any, index: list[int]) -> None:
        """Keep only the cache positions ``index`` (in order): a tree's accepted path after its
        verification, whose entries are not contiguous."""
        layers = getattr(cache, "layers", None)
        if layers is None:
            raise ModelError("this transformers version's cache has no per-layer tensors: tree drafting "
                             "needs transformers >= 4.56", "use a chain (no --tree)")
        for layer in layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue
            idx = torch.tensor(index, device=layer.keys.device)
            layer.keys = layer.keys.index_select(-2, idx)
            layer.values = layer.values.index_select(-2, idx)

    def forward(self, ids: torch.Tensor, cache: Any = None, *, positions: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, T) -> logits (B, T, V) float32, aux (B, T, 3 d) (the model's dtype).

        ``positions`` (B, T) and ``mask`` (B, T, cached + T) bool, True = may attend: a tree's
        verification, whose tokens sit at their depth's position and see only their ancestors."""
        kw: dict[str, Any] = {self._cache_kw: cache} if cache is not None else {}
        if positions is not None:
            kw["position_ids"] = positions
        if mask is not None:
            dtype = self.model.get_input_embeddings().weight.dtype
            add = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
            kw["attention_mask"] = add.masked_fill(~mask, torch.finfo(dtype).min)[:, None]  # (B, 1, T, S)
        out = self.model(input_ids=ids, use_cache=cache is not None, output_hidden_states=True, **kw)
        hs = out.hidden_states
        aux = torch.cat([hs[j] for j in self.layers], dim=-1)  # (B, T, 3d)
        return out.logits.float(), aux
