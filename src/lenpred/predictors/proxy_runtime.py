"""Other runtimes for the proxy head's MiniLM encoder: int8 torch, ONNX Runtime fp32, ONNX Runtime int8.

The proxy head (:mod:`lenpred.predictors.proxy`) was trained on all-MiniLM-L6-v2 embeddings computed
in fp32 by torch (``runtime="torch"``). A router may run the same encoder faster:

* ``torch-int8``: torch's dynamic quantization of every ``nn.Linear`` to int8
  (:func:`torch.ao.quantization.quantize_dynamic`, weights int8, activations quantized per call);
* ``onnx``: the encoder with its mean pooling and L2 normalisation exported to ONNX
  (:func:`torch.onnx.export`) and run by ONNX Runtime on one thread;
* ``onnx-int8``: that ONNX file with its weights quantized to int8 by
  :func:`onnxruntime.quantization.quantize_dynamic`.

The ONNX files are made on first use (a few seconds) under ``lenpred.io.paths.home()/onnx/``, named by
the encoder's weights hash and the exporter versions, and reused. Every variant changes the numbers
the head reads, so :func:`check_variant` compares its predictions with the fp32 head's on a check set
and refuses a variant that moves any prediction by more than a stated tolerance.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lenpred.errors import ConfigError

__all__ = ["RUNTIMES", "make_embedder", "check_variant", "onnx_file", "use_runtime", "variant_deviation"]

RUNTIMES = ("torch", "torch-int8", "onnx", "onnx-int8")
Embedder = Callable[[Sequence[str]], np.ndarray]


def check_runtime(runtime: str) -> str:
    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown proxy runtime {runtime!r}", f"use one of: {', '.join(RUNTIMES)}")
    return runtime


def _need_ort() -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        raise ConfigError("the onnx runtimes need onnxruntime",
                          "pip install 'lenpred[onnx]' (or use runtime 'torch' / 'torch-int8')") from None
    return ort


class _Pooled:
    """MiniLM + mean pooling over the attention mask + L2 normalisation, as one module to export."""

    def __new__(cls, model: Any) -> Any:
        import torch

        class Pooled(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                h = self.model(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state
                m = attention_mask.unsqueeze(-1).to(h.dtype)
                e = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
                return torch.nn.functional.normalize(e, dim=-1)

        return Pooled().eval()


def onnx_file(int8: bool) -> Path:
    """The exported (and, with ``int8``, quantized) encoder, made on first use."""
    import torch

    from lenpred.io.paths import home
    from lenpred.predictors.proxy import _load, embedder_spec

    ort = _need_ort()
    tag = f"{embedder_spec()['weights_sha256'][:16]}-torch{torch.__version__.split('+')[0]}-ort{ort.__version__}"
    folder = home() / "onnx"
    folder.mkdir(parents=True, exist_ok=True)
    fp32 = folder / f"minilm-{tag}.onnx"
    if not fp32.is_file():
        tok, model = _load()
        b = tok(["a short example prompt", "another one"], padding=True, return_tensors="pt")
        tmp = fp32.with_suffix(".tmp.onnx")
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(_Pooled(model), (b["input_ids"], b["attention_mask"], b["token_type_ids"]), str(tmp),
                              input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["embedding"],
                              dynamic_axes={k: {0: "batch", 1: "tokens"} for k in
                                            ("input_ids", "attention_mask", "token_type_ids")} | {"embedding": {0: "batch"}},
                              opset_version=17, dynamo=False)
        tmp.replace(fp32)
    if not int8:
        return fp32
    q = folder / f"minilm-{tag}-int8.onnx"
    if not q.is_file():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        tmp = q.with_suffix(".tmp.onnx")
        quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8)
        tmp.replace(q)
    return q


@functools.lru_cache(maxsize=4)
def make_embedder(runtime: str) -> Embedder:
    """``texts -> (n, 384)`` float32 embeddings under ``runtime`` (one thread; cached per runtime)."""
    from lenpred.predictors.proxy import embed

    check_runtime(runtime)
    if runtime == "torch":
        return embed
    if runtime == "torch-int8":
        return _torch_int8()
    return _onnx(runtime == "onnx-int8")


def _torch_int8() -> Embedder:
    import copy

    import torch

    from lenpred.predictors.proxy import EMBED_DIM, MAX_TOKENS, _load

    tok, model = _load()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notice
        qmodel = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
    pooled = _Pooled(qmodel)

    def run(texts: Sequence[str]) -> np.ndarray:
        from lenpred.predictors.nn import one_thread

        out = np.zeros((len(texts), EMBED_DIM), dtype=np.float32)
        with torch.no_grad(), one_thread():
            for i, t in enumerate(texts):  # one at a time: no padding, the fastest on one thread
                b = tok([t], truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
                out[i] = pooled(b["input_ids"], b["attention_mask"], b["token_type_ids"])[0].numpy()
        return out

    return run


def _onnx(int8: bool) -> Embedder:
    from lenpred.predictors.proxy import EMBED_DIM, MAX_TOKENS, _load

    ort = _need_ort()
    path = onnx_file(int8)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    tok = _load()[0]

    def run(texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), EMBED_DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            b = tok([t], truncation=True, max_length=MAX_TOKENS, return_tensors="np")
            feed = {k: np.asarray(b[k], dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
            out[i] = sess.run(None, feed)[0][0]
        return out

    return run


def use_runtime(head: Any, runtime: str) -> Any:
    """Make the proxy ``head`` embed with ``runtime`` from now on (``torch``: the fp32 encoder it was trained on)."""
    return head.use_embedder(check_runtime(runtime), make_embedder(runtime))


def variant_deviation(reference: np.ndarray, variant: np.ndarray) -> float:
    """The largest relative change of a prediction: max |variant - reference| / max(reference, 1)."""
    ref = np.asarray(reference, dtype=np.float64)
    return float(np.max(np.abs(np.asarray(variant, dtype=np.float64) - ref) / np.maximum(ref, 1.0)))


def check_variant(reference: Callable[[Sequence[str]], np.ndarray], variant: Callable[[Sequence[str]], np.ndarray],
                  texts: Sequence[str], tolerance: float, what: str) -> float:
    """Predictions (tokens) of the head as trained (``reference``) and of a faster ``variant`` of it on
    ``texts``; refuse the variant (ConfigError naming the deviation, the tolerance and the fix) when one
    prediction moves by more than ``tolerance`` (relative). Returns the largest relative deviation."""
    dev = variant_deviation(reference(texts), variant(texts))
    if not dev <= tolerance:
        raise ConfigError(f"{what} moves the head's predictions by up to {100 * dev:.1f}% on {len(texts)} check "
                          f"prompts, over the tolerance of {100 * tolerance:.1f}%",
                          "use the head's own runtime 'torch', or raise runtime_tolerance if that error is acceptable")
    return dev
