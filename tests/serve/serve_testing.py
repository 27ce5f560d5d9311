"""Helpers of the serve tests (fixtures in conftest.py; tests/route/test_route_heads.py uses them too).

* :func:`fit_proxy_head`: a proxy head with a planted answer (short vs long prompts);
* :func:`make_tiny_target`: a randomly initialised 2-layer Llama with SmolLM2's tokenizer and chat
  template (a real chat template, a tiny model); :func:`fit_head` trains a ridge head on its prefill
  features (rendered exactly as the collector renders prompts) with a known answer: 3 * tokens + 20;
* :class:`FakeRunner`: a runner whose "model" is arithmetic, for the batcher's mechanics.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from lenpred.serve.errors import BadRequestError
from lenpred.serve.heads import RawPrediction, Runner

SHORT = [f"Answer with one word: is {i} even?" for i in range(12)]
LONG = [f"Write a detailed, long essay with many sections about topic {i}." for i in range(12)]
CAP = 1024


def sampling_card(**prompts: Any) -> dict[str, Any]:
    return {"model": {"fingerprint": "sha256:none"}, "prompts": {"chat_template": True, "system_prompt": None, **prompts},
            "sampling": {"temperature": 1.0, "max_new_tokens": CAP, "seed": 0}}


def fit_proxy_head(out: Path) -> Path:
    """A proxy head (the real MiniLM, a small MLP) trained on SHORT (~7 tokens) and LONG (~620): known answers."""
    from lenpred.predictors.registry import make_predictor
    from lenpred.predictors.targets import Targets

    y = np.array([[6.0, 8.0]] * len(SHORT) + [[600.0, 640.0]] * len(LONG))
    head = make_predictor("proxy", {"hidden": 32, "epochs": 80, "patience": 80})
    head.fit(SHORT + LONG, Targets(y, np.zeros_like(y, dtype=bool), CAP))
    head.save(out, card=sampling_card(), meta={"run": "synthetic"})
    return out


# ---------------------------------------------------------------- a tiny target with a real chat template
def make_tiny_target(folder: Path, layers: int = 2, context: int = 160) -> Path:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from lenpred.models.loading import hf_folder

    _, smol = hf_folder("smollm2-135m")  # the converted embedded model's folder: its tokenizer
    tok = AutoTokenizer.from_pretrained(smol)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=context,
                      initializer_range=0.3, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).eval().save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def target_card(folder: Path, **prompts: Any) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from lenpred.data.sources import text_sha256
    from lenpred.models.loading import resolve

    tok = AutoTokenizer.from_pretrained(folder)
    card = sampling_card(**prompts)
    card["model"] = {"id": str(folder), "fingerprint": resolve(str(folder)).fingerprint,
                     "chat_template_sha256": text_sha256(tok.chat_template)}
    return card


def extract(folder: Path, texts: list[str], system_prompt: str | None = None) -> tuple[Any, list[int]]:
    """Features of ``texts`` rendered as the collector renders prompts, and their token counts."""
    from transformers import AutoConfig, AutoTokenizer

    from lenpred.data.sources import PromptConfig, render
    from lenpred.features.prefill import Extractor, FeatureConfig, make_spec
    from lenpred.features.store import Features
    from lenpred.models.loading import resolve

    tok = AutoTokenizer.from_pretrained(folder)
    pc = PromptConfig(system_prompt=system_prompt)
    seqs = [tok(render(tok, t, pc), add_special_tokens=False)["input_ids"] for t in texts]
    cfg = FeatureConfig(layers=(1, 2), pools=("last", "mean"), threads=1)
    spec = make_spec(cfg, AutoConfig.from_pretrained(folder), str(folder), resolve(str(folder)).fingerprint)
    ext = Extractor.load(folder, cfg, (1, 2))
    blocks, side = ext.features(seqs)
    blocks = {k: v.astype(np.float16).astype(np.float32) for k, v in blocks.items()}  # stored as float16
    return Features(np.array([f"p{i}" for i in range(len(texts))]), blocks, side, tuple(spec["side_names"]), spec), \
        [len(s) for s in seqs]


def train_texts() -> list[str]:
    rng = np.random.default_rng(0)
    words = ["tea", "river", "engine", "cloud", "paper", "garden", "signal", "orbit"]
    return [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 40, size=40)]


def count_target(n_tokens: np.ndarray) -> np.ndarray:
    return 3.0 * np.asarray(n_tokens, dtype=np.float64) + 20.0


def fit_head(folder: Path, out: Path, params: dict[str, Any], system_prompt: str | None = None) -> Path:
    from lenpred.predictors.registry import make_predictor
    from lenpred.predictors.targets import Targets

    feats, counts = extract(folder, train_texts(), system_prompt)
    y = np.repeat(count_target(counts)[:, None], 2, axis=1)
    head = make_predictor("ridge", params).fit(feats, Targets(y, np.zeros_like(y, dtype=bool), CAP))
    head.save(out, card=target_card(folder, system_prompt=system_prompt), meta={"run": "synthetic"})
    return out


# ---------------------------------------------------------------- a runner without a model
class FakeRunner(Runner):
    """Prediction = 10 * (characters of the prompt); ``sleep`` seconds per call; prompt "bad" fails in
    preparation, prompt "boom" fails the model call of any batch it is in (the runner then runs each
    request of that batch alone)."""

    input_kind = "text"

    def __init__(self, sleep: float = 0.0) -> None:
        super().__init__(SimpleNamespace(name="fake"), {"card_hash": "feedfacecafebeef"}, Path("/heads/fake-head"))
        self.sleep = sleep
        self.sizes: list[int] = []

    def _prepare(self, req: Any) -> str:
        text = req.prompt if req.prompt is not None else req.messages[-1].text
        if text == "bad":
            raise BadRequestError("this prompt is bad", param="prompt")
        return text

    def _predict(self, texts: list[str]) -> list[Any]:
        self.sizes.append(len(texts))
        if self.sleep:
            time.sleep(self.sleep)
        if "boom" in texts:
            raise RuntimeError("the model fell over")
        return [RawPrediction(10.0 * len(t), 5.0 * len(t), 10.0 * len(t), 20.0 * len(t)) for t in texts]


class GatedRunner(FakeRunner):
    """A FakeRunner whose model calls wait for ``gate`` (a threading.Event): a test holds a call in the
    worker thread and releases it when it has seen what it waits for; :meth:`running` waits for a call
    to have started."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    async def running(self) -> None:
        await asyncio.wait_for(asyncio.to_thread(self.entered.wait), 60)

    def _predict(self, texts: list[str]) -> list[Any]:
        self.entered.set()
        self.gate.wait(60)
        return super()._predict(texts)
