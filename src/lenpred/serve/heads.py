"""What the service runs for a batch of requests: a head, and whatever turns a request into its input.

Two runners, chosen by the head's ``input_kind``:

* :class:`TextRunner` (``proxy``, ``ngram``, ``gbdt``): the prompt's raw text -> the head's encoding
  (MiniLM, optionally on a faster runtime, or hashed n-grams, or cheap prompt features) -> head. No
  target model. The text heads were trained on each prompt's raw text (the first user turn, no chat template), so
  a ``prompt`` string is embedded as is and ``messages`` contribute their **last user message**.
* :class:`PrefillRunner` (hidden-state heads: ridge, mlp, ...): the request is rendered exactly as
  ``lenpred collect`` rendered the training prompts (the target's chat template, the run card's
  system prompt, ``add_generation_prompt``; a ``prompt`` string is one user message), tokenized,
  run through the target's prefill (:class:`lenpred.features.prefill.Extractor`, the same code that
  computed the training features, rounded to the features' storage dtype), and the head reads the
  pooled states. Right for SmolLM2-135M on a CPU; for a large model this is a second prefill of
  every request, on hardware of its own.

:meth:`Runner.run` is called from one worker thread; each request succeeds or fails on its own
(one bad request never fails its batch: a failed model call is repeated request by request).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lenpred.checks import check_context
from lenpred.errors import CardMismatchError, DataError, LenpredError, ModelError
from lenpred.serve.errors import BadRequestError, ContextLengthError, InternalError, ServeError
from lenpred.serve.schema import PredictRequest

__all__ = ["RawPrediction", "Runner", "TextOptions", "PrefillOptions", "TextRunner", "PrefillRunner", "load_runner"]


@dataclass(frozen=True)
class TextOptions:
    """How a text head runs: the proxy's encoder ``runtime`` (:data:`lenpred.predictors.proxy_runtime.RUNTIMES`),
    refused when it moves a prediction on :data:`~lenpred.serve.check_prompts.CHECK_PROMPTS` by more than
    ``tolerance`` (relative) from the head's own fp32 encoder."""

    runtime: str = "torch"
    tolerance: float = 0.10


@dataclass(frozen=True)
class PrefillOptions:
    """How a hidden-state head's input is computed: the target ``model`` (None: the one the head records;
    checked by fingerprint), the longest prompt taken (None: the model's context), the torch ``device``."""

    model: str | None = None
    max_prompt_tokens: int | None = None
    device: str = "cpu"


@dataclass(frozen=True)
class RawPrediction:
    point: float
    q10: float | None
    q50: float | None
    q90: float | None
    prompt_tokens: int | None = None


Outcome = RawPrediction | ServeError


def _summaries(head: Any, X: Any) -> list[RawPrediction]:
    point, q10, q50, q90 = head.predict_quantiles(X)  # (n,) each, the inputs read once
    return [RawPrediction(float(p), float(a), float(m), float(b))
            for p, a, m, b in zip(point.tolist(), q10.tolist(), q50.tolist(), q90.tolist(), strict=True)]


class Runner:
    """A head plus its input pipeline. ``calls`` counts :meth:`run` calls (one per service batch)."""

    input_kind = ""

    def __init__(self, head: Any, meta: dict[str, Any], path: Path) -> None:
        self.head = head
        self.meta = meta
        self.path = path
        self.calls = 0

    @property
    def predictor(self) -> str:
        return str(self.head.name)

    @property
    def model_id(self) -> str | None:
        return None

    def run(self, reqs: Sequence[PredictRequest]) -> list[Outcome]:
        """One outcome per request, in order: a prediction, or the error that request gets."""
        self.calls += 1
        out: list[Outcome | None] = [None] * len(reqs)
        prepared: list[Any] = []
        ok: list[int] = []
        for i, r in enumerate(reqs):
            try:
                prepared.append(self._prepare(r))
                ok.append(i)
            except Exception as e:  # noqa: BLE001 - whatever one request raises is that request's answer
                out[i] = self._error(e)
        for i, p in zip(ok, self._predict_each(prepared), strict=True):
            out[i] = p
        return [o for o in out if o is not None]

    def _predict_each(self, prepared: list[Any]) -> list[Outcome]:
        """The batch's predictions; when its model call fails, each request runs alone, so that a request
        the model cannot take fails alone and its batch mates get their answers."""
        if not prepared:
            return []
        try:
            return self._predict(prepared)
        except Exception as e:  # noqa: BLE001 - a failed model call must answer every request, not hang them
            if len(prepared) == 1:
                return [self._error(e)]
        return [self._predict_each([p])[0] for p in prepared]

    def _error(self, e: Exception) -> ServeError:
        """The error one request gets for ``e``: its own ServeError, a LenpredError as a bad request, and
        anything else as an internal error."""
        if isinstance(e, ServeError):
            return e
        if isinstance(e, LenpredError):
            return BadRequestError(e.problem, e.fix)
        return InternalError(f"the {self.predictor} head failed on this request ({type(e).__name__}: {e})"
                             .splitlines()[0][:300])

    def _prepare(self, req: PredictRequest) -> Any:
        raise NotImplementedError

    def _predict(self, prepared: list[Any]) -> list[Outcome]:
        raise NotImplementedError


class TextRunner(Runner):
    """Text heads (proxy, ngram, gbdt): raw prompt text -> the head's own encoding (``head.encode``: MiniLM
    for the proxy, hashed n-grams, cheap prompt features) -> head."""

    input_kind = "text"

    def __init__(self, head: Any, meta: dict[str, Any], path: Path, options: TextOptions | None = None) -> None:
        super().__init__(head, meta, path)
        opts = options or TextOptions()
        if head.name == "proxy":
            from lenpred.predictors.proxy import PACKAGE, embedder_spec

            want = head.feature_spec_
            have = embedder_spec()
            if want is not None and want != have:
                diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
                raise ModelError(f"the installed {PACKAGE} differs from the one head {path} was trained with "
                                 f"({', '.join(diff)})", f"install the {PACKAGE} version the head records, or retrain it")
        self.deviation = 0.0  # the runtime's largest relative change of a check prompt's prediction
        if opts.runtime != "torch":
            self.deviation = self._use_runtime(opts)

    def _use_runtime(self, opts: TextOptions) -> float:
        from lenpred.errors import ConfigError
        from lenpred.predictors.proxy_runtime import check_runtime, check_variant, make_embedder, use_runtime
        from lenpred.serve.check_prompts import CHECK_PROMPTS

        check_runtime(opts.runtime)
        if self.head.name != "proxy":
            raise ConfigError(f"runtime {opts.runtime!r} applies to the proxy head's encoder; head {self.path} is "
                              f"a {self.head.name} head", "use runtime 'torch' with this head")
        fast = make_embedder(opts.runtime)
        dev = check_variant(lambda t: self.head.predict(make_embedder("torch")(t)),
                            lambda t: self.head.predict(fast(t)), CHECK_PROMPTS, opts.tolerance,
                            f"the {opts.runtime} runtime of head {self.path}")
        use_runtime(self.head, opts.runtime)
        return dev

    def _prepare(self, req: PredictRequest) -> str:
        if req.prompt is not None:
            return req.prompt
        assert req.messages is not None
        users = [m.text for m in req.messages if m.role == "user" and m.text.strip()]
        if not users:
            raise BadRequestError("the proxy head reads the last user message, and 'messages' has no user message "
                                  "with text", "add a {\"role\": \"user\", \"content\": \"...\"} message",
                                  param="messages")
        return users[-1]

    def predict_texts(self, texts: list[str]) -> list[RawPrediction]:
        """Predictions for prompt texts, in order (no request parsing; an error raises). The texts go to the
        head as they are: it reads them once for the point and the distribution, by its own fastest path
        (the ngram head never builds its full hashed design matrix for a prediction)."""
        return _summaries(self.head, texts)

    def _predict(self, texts: list[str]) -> list[Outcome]:
        return list(_summaries(self.head, texts))


class PrefillRunner(Runner):
    """Hidden-state heads: render -> tokenize -> the target's prefill -> pooled features -> head."""

    input_kind = "features"

    def __init__(self, head: Any, meta: dict[str, Any], path: Path, options: PrefillOptions | None = None, *,
                 threads: int | None = 1, batch_tokens: int = 16384) -> None:
        super().__init__(head, meta, path)
        options = options or PrefillOptions()
        model, max_prompt_tokens = options.model, options.max_prompt_tokens
        from transformers import AutoConfig, AutoTokenizer

        from lenpred.data.sources import text_sha256
        from lenpred.features.prefill import Extractor, FeatureConfig, make_spec, text_config
        from lenpred.models.loading import hf_folder, resolve
        from lenpred.predictors.base import check_feature_spec

        spec = dict(head.feature_spec_ or {})
        recorded = (spec.get("model") or {}) if isinstance(spec.get("model"), dict) else {}
        if not recorded.get("id") or not recorded.get("fingerprint"):
            raise DataError(f"head {path} records no target model in its feature spec (it was trained on features "
                            "that did not come from `lenpred features`)",
                            "serve a head trained on features computed by `lenpred features`")
        self._model_id = str(recorded["id"])
        try:
            mspec = resolve(model or self._model_id)
        except ModelError as e:
            if model is not None:
                raise
            raise ModelError(f"head {path} reads the prefill features of model {self._model_id!r}, which cannot be "
                             f"loaded here ({e.problem})",
                             "pass --model with that model's folder or id (it is checked by fingerprint)") from None
        if mspec.fingerprint != recorded["fingerprint"]:
            raise CardMismatchError(
                f"model {model or self._model_id!r} has fingerprint {mspec.fingerprint[:19]}..., head {path} was "
                f"trained on features of {str(recorded['fingerprint'])[:19]}...",
                "pass --model with the model the head's features were computed with")
        mspec, folder = hf_folder(mspec)
        card = dict(meta.get("card") or {})
        self.chat_template = bool(card.get("prompts.chat_template", True))
        self.system_prompt = card.get("prompts.system_prompt")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder)
            mconfig = AutoConfig.from_pretrained(folder)
        except Exception as e:  # transformers raises many types
            raise ModelError(f"cannot load the tokenizer of {folder} ({type(e).__name__}: {e})".splitlines()[0],
                             "pass the head's model as a folder with its tokenizer and config.json") from e
        if self.chat_template:
            template = getattr(self.tokenizer, "chat_template", None)
            if not template:
                raise ModelError(f"the tokenizer of {folder} has no chat template, and head {path} was trained on "
                                 "chat-rendered prompts", "pass --model with the model the head was trained on")
            want = card.get("model.chat_template_sha256")
            if want and text_sha256(template) != want:
                raise CardMismatchError(f"the chat template of {folder} differs from the one head {path} was trained "
                                        "under", "pass --model with the model the head was trained on")
        cfg = FeatureConfig.from_spec(spec, threads=threads, device=options.device)
        check_feature_spec(spec, make_spec(cfg, mconfig, self._model_id, mspec.fingerprint), what=f"head {path}")
        self.storage_dtype = np.float16 if spec["dtype"] == "float16" else np.float32
        self.context = int(getattr(text_config(mconfig), "max_position_embeddings", 0) or spec["max_tokens"])
        self.max_prompt_tokens = min(self.context, max_prompt_tokens or self.context)
        self.batch_tokens = int(batch_tokens)
        self.spec = spec
        self.extractor = Extractor.load(folder, cfg, cfg.layers or ())
        self.forward_calls = 0

    @property
    def model_id(self) -> str | None:
        return self._model_id

    def render(self, req: PredictRequest) -> str:
        """The exact text the target would see (as ``lenpred.data.sources.render`` built the training prompts)."""
        if not self.chat_template:
            if req.prompt is None:
                raise BadRequestError("this head's target read raw prompts (its run used no chat template): "
                                      "send 'prompt', not 'messages'", param="messages")
            return req.prompt
        if req.prompt is not None:
            messages = [{"role": "user", "content": req.prompt}]
        else:
            assert req.messages is not None
            messages = [m.as_template_message() for m in req.messages]
        if self.system_prompt is not None and messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        try:
            return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        except Exception as e:  # noqa: BLE001 - jinja's TemplateError and friends: the messages do not fit the template
            raise BadRequestError(f"the model's chat template refused these messages ({e})".splitlines()[0][:300],
                                  param="messages") from None

    def _prepare(self, req: PredictRequest) -> list[int]:
        text = self.render(req)
        ids = self.tokenizer(text, add_special_tokens=not self.chat_template)["input_ids"]
        if not ids:
            raise BadRequestError("the prompt has no tokens", param="prompt" if req.prompt is not None else "messages")
        param = "prompt" if req.prompt is not None else "messages"
        try:  # the one context check every verb that feeds the target uses; here it answers HTTP 400
            check_context(len(ids), self.context, what="the rendered prompt")
        except LenpredError as e:
            raise ContextLengthError(e.problem, e.fix, param=param) from None
        if len(ids) > self.max_prompt_tokens:  # the service's own, lower limit
            raise ContextLengthError(f"the rendered prompt has {len(ids)} tokens, over the service's max_prompt_tokens "
                                     f"of {self.max_prompt_tokens}", "shorten the prompt", param=param)
        return [int(t) for t in ids]

    def _predict(self, seqs: list[list[int]]) -> list[Outcome]:
        from lenpred.features.prefill import plan_batches
        from lenpred.features.store import Features

        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))  # similar lengths per pass: less padding
        lens = [min(len(seqs[i]), self.extractor.max_tokens) for i in order]
        blocks: dict[str, np.ndarray] = {}
        side = np.zeros((len(seqs), len(self.spec["side_names"])), dtype=np.float32)
        for batch in plan_batches(lens, len(seqs), self.batch_tokens):
            rows = [order[j] for j in batch]
            b, s = self.extractor.features([seqs[i] for i in rows])
            self.forward_calls += 1
            for k, v in b.items():
                blocks.setdefault(k, np.zeros((len(seqs), v.shape[1]), dtype=np.float32))[rows] = v
            side[rows] = s
        # the training features were stored in the spec's dtype: round the same way
        blocks = {k: v.astype(self.storage_dtype).astype(np.float32) for k, v in blocks.items()}
        feats = Features(np.array([f"r{i}" for i in range(len(seqs))]), blocks, side,
                         tuple(self.spec["side_names"]), dict(self.spec))
        preds = _summaries(self.head, feats)
        return [RawPrediction(p.point, p.q10, p.q50, p.q90, len(s)) for p, s in zip(preds, seqs, strict=True)]


def load_runner(path: str | os.PathLike[str], *, prefill: PrefillOptions | None = None, threads: int | None = 1,
                text: TextOptions | None = None) -> Runner:
    """Load the head at ``path`` (strictly) and the input pipeline it needs (``prefill``: how a hidden-state
    head's input is computed, ``threads``: its torch CPU threads; ``text``: how a text head runs)."""
    from lenpred.predictors.io import read_head

    p = Path(path)
    if not p.exists():
        raise DataError(f"head {p} does not exist", "pass a head directory written by `lenpred train`")
    if not p.is_dir():
        raise DataError(f"head {p} is not a directory", "pass a head directory written by `lenpred train`")
    head, art = read_head(p)
    if head.input_kind == "text":
        return TextRunner(head, art.meta, p, text)
    if head.input_kind == "features":
        if text is not None and text.runtime != "torch":
            raise DataError(f"runtime {text.runtime!r} applies to the proxy head's encoder; head {p} reads the "
                            "target's prefill", "use runtime 'torch' with this head")
        return PrefillRunner(head, art.meta, p, prefill, threads=threads)
    what = "an OUTLETS head" if head.input_kind == "trajectory" else f"a {head.name} head"
    raise DataError(f"head {p} is {what} (input kind {head.input_kind!r}): it reads states along a generation, which "
                    "a request has not started when it is predicted; serve takes heads of input kind 'text' (proxy) "
                    "or 'features' (ridge, mlp, ...: the prompt's prefill)",
                    "serve a head written by `lenpred train`; an OUTLETS head runs inside generation "
                    "(lenpred generate --draft DRAFT --length-head HEAD)")
