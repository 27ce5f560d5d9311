"""Live generation: the target decodes (speculatively with an EAGLE-3 head), an OUTLETS head re-predicts.

:func:`open_generation` is everything ``lenpred generate`` and ``lenpred demo`` share: the draft head
and the length head loaded with every check (:func:`lenpred.outlets.online.open_heads`, before the
target's weights load), the sampling card (``card=`` a run directory or card.json, else the one
recorded when the draft head was trained, else lenpred's defaults), the target, the prompt rendered
with the card's chat template, the decoder and the online length head. :meth:`Generation.run`
decodes, calling ``on_cycle(cycle, event)`` per cycle (``event``: the length head's
:class:`~lenpred.outlets.online.LengthEvent`, or None without one).

:func:`live_generation` is what ``lenpred demo`` shows: every ``every`` generated tokens a line gives
the tokens so far, the predicted remaining tokens with their 80% interval and the predicted total;
when the answer is done the true length is known and each line's error is reported.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lenpred.errors import ConfigError, DataError

__all__ = ["Generation", "GenerationResult", "GenerationSpec", "LivePoint", "LiveResult", "live_generation",
           "open_generation", "sampling_card"]


def sampling_card(card: str | Path | None, draft_meta: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(sampling section, prompts section, where it came from): ``card`` (a run directory or its
    card.json), else the run card recorded when the draft head was trained, else lenpred's defaults."""
    if card:
        p = Path(card)
        f = p / "card.json" if p.is_dir() else p
        if not f.is_file():
            raise DataError(f"{p} has no card.json" if p.is_dir() else f"card {p} does not exist",
                            "pass a run directory or its card.json")
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{f} is not valid JSON ({e})", "pass a run directory or its card.json") from None
        if not isinstance(data, dict) or not isinstance(data.get("sampling"), dict):
            raise DataError(f"{f} has no sampling section", "pass a lenpred run card")
        return data["sampling"], data.get("prompts") or {}, str(f)
    train = ((draft_meta or {}).get("training") or {}).get("run_card") or {}
    if isinstance(train.get("sampling"), dict):
        return train["sampling"], train.get("prompts") or {}, "the head's training run"
    return {}, {}, "lenpred's defaults"


@dataclass
class GenerationResult:
    text: str
    gen: Any  # lenpred.draft.speculative.Generation: tokens, stop_reason, tau, target passes
    seconds: float
    head_seconds: list[float] = field(default_factory=list)  # per cycle: row + length head (empty without one)

    @property
    def head_ms_per_cycle(self) -> float | None:
        """Median cost of the length head per cycle (row building + prediction), ms."""
        import numpy as np

        return 1e3 * float(np.median(self.head_seconds)) if self.head_seconds else None

    @property
    def loop_pass_ms(self) -> float:
        """Mean target pass of this generation (verifying passes and the prefill), ms."""
        return 1e3 * self.gen.target_seconds / max(self.gen.target_forwards, 1)


@dataclass
class Generation:
    """A generation set up by :func:`open_generation`; :meth:`run` decodes it."""

    heads: Any  # lenpred.outlets.online.OpenedHeads
    lm: Any  # the loaded target (model, tokenizer)
    ids: list[int]  # the rendered prompt
    sampling: Any  # lenpred.draft.sampling.SamplingConfig (its seed seeds the generator; greedy ignores it)
    card_source: str  # where the sampling card came from
    decoder: Any  # lenpred.draft.speculative.SpeculativeDecoder
    online: Any = None  # lenpred.outlets.online.OnlineLengthHead, with a length head

    def run(self, on_cycle: Callable[[Any, Any], None] | None = None) -> GenerationResult:
        """Decode; ``on_cycle(cycle, event)`` after each cycle (event: the length head's, or None)."""
        import numpy as np
        import torch

        def step(c: Any) -> None:
            ev = self.online(c) if self.online is not None else None
            if on_cycle is not None:
                on_cycle(c, ev)

        gen = torch.Generator().manual_seed(int(self.sampling.seed))
        t0 = time.perf_counter()
        g = self.decoder.generate(self.ids, generator=gen, on_cycle=step)
        dt = time.perf_counter() - t0
        per = list(np.add(self.online.row_seconds, self.online.head_seconds)) if self.online is not None else []
        return GenerationResult(self.lm.tokenizer.decode(g.tokens, skip_special_tokens=True), g, dt, per)


@dataclass(frozen=True)
class GenerationSpec:
    """How to generate, built once by ``lenpred generate`` (or the demo) from its flags: the EAGLE-3
    head ``draft`` (None: plain decoding), the OUTLETS ``length_head`` (needs ``draft``), the target
    ``model`` (default: the heads' own), the sampling ``card``, greedy or sampled, ``k`` drafted tokens
    a cycle, a ``tree`` (:class:`lenpred.draft.speculative.TreeSpec`, greedy only), the token budget
    and seed (default: the card's) and whether to render the prompt with the chat template."""

    draft: str | Path | None = None
    length_head: str | Path | None = None
    model: str | None = None
    card: str | Path | None = None
    greedy: bool = False
    k: int = 3
    tree: Any = None
    max_new_tokens: int | None = None
    seed: int | None = None
    chat_template: bool = True


def open_generation(prompt: str, spec: GenerationSpec) -> Generation:
    """Load and check everything a generation of ``prompt`` needs (see the module docstring); nothing
    decoded yet."""
    from lenpred.checks import check_context, model_context
    from lenpred.data.sources import PromptConfig, encode_prompt
    from lenpred.draft.sampling import sampling_from_card
    from lenpred.draft.speculative import SpeculativeDecoder
    from lenpred.draft.target import Target
    from lenpred.models import load
    from lenpred.models.loading import eos_ids, hf_folder, load_config, load_tokenizer
    from lenpred.outlets.online import OnlineLengthHead, open_heads

    heads = open_heads(spec.draft, spec.length_head, model=spec.model)
    sampling_d, prompts_d, where = sampling_card(spec.card, heads.draft.meta if heads.draft else None)
    sampling = sampling_from_card(sampling_d, max_new_tokens=spec.max_new_tokens, seed=spec.seed)
    model_spec, _ = hf_folder(heads.model)
    tokenizer = load_tokenizer(model_spec)
    pcfg = PromptConfig(chat_template=spec.chat_template and prompts_d.get("chat_template", True),
                        system_prompt=prompts_d.get("system_prompt"))
    ids = encode_prompt(tokenizer, prompt, pcfg)
    # past its context the target runs on and returns garbage; the tokenizer and the config tell before the weights load
    check_context(len(ids), model_context(load_config(model_spec)), max_new_tokens=sampling.max_new_tokens,
                  what="the rendered prompt")
    lm = load(model_spec, tokenizer=tokenizer)
    target = Target(lm.model, heads.layers)
    dec = SpeculativeDecoder(target, heads.draft.model if heads.draft else None, k=spec.k if heads.draft else 0,
                             sampling=None if spec.greedy else sampling, max_new_tokens=sampling.max_new_tokens,
                             eos_ids=eos_ids(lm.model, lm.tokenizer), tree=spec.tree)
    online = None
    if heads.length_head is not None:
        online = OnlineLengthHead(heads.length_head, len(ids), heads.layers, spec=heads.length_spec)
    return Generation(heads, lm, ids, sampling, where, dec, online)


# ---------------------------------------------------------------------------------------- the demo's view
@dataclass
class LivePoint:
    n_generated: int  # tokens generated when the line was printed
    t: int  # position of the newest draft state the head read
    remaining: float  # predicted remaining after n_generated (median, clipped at 0)
    remaining_q10: float
    remaining_q90: float
    total: float  # predicted total length


@dataclass
class LiveResult:
    text: str
    n_tokens: int
    stop_reason: str
    tau: float
    seconds: float
    points: list[LivePoint] = field(default_factory=list)
    head_ms_per_cycle: float | None = None
    target_ms_per_pass: float | None = None

    def errors(self) -> list[float]:
        """Predicted total minus the true length, per point."""
        return [p.total - self.n_tokens for p in self.points]


def live_generation(prompt: str, spec: GenerationSpec, *, every: int = 16, console: Any = None) -> LiveResult:
    """Generate an answer to ``prompt`` (a user message, rendered with the head's training card) with
    the EAGLE-3 head ``spec.draft``, running the OUTLETS ``spec.length_head`` at every cycle (at most
    ``spec.max_new_tokens`` tokens, default 256).

    Checks as ``lenpred generate`` does: the length head must have been trained on this draft head's
    features and this target. Prints a line every ``every`` tokens on ``console`` (a rich Console).
    """
    if spec.max_new_tokens is None:
        spec = replace(spec, max_new_tokens=256)
    max_new_tokens, k = spec.max_new_tokens, spec.k
    if not str(prompt).strip():
        raise ConfigError("the prompt is empty", "pass a user message")
    if every < 1 or max_new_tokens < 1 or k < 1:
        raise ConfigError(f"every, max_new_tokens and k must be >= 1 (got {every}, {max_new_tokens}, {k})",
                          "pass 1 or more for each")
    for what, p in (("draft head", spec.draft), ("length head", spec.length_head)):
        if p is None or not Path(p).is_dir():
            raise DataError(f"{what} {p} does not exist", "see docs/outlets.md for the commands that make it")
    session = open_generation(prompt, spec)
    points: list[LivePoint] = []
    next_line = [0]

    def on_cycle(_c: Any, ev: Any) -> None:
        if ev is None or ev.n_generated < next_line[0]:
            return
        next_line[0] = (ev.n_generated // every + 1) * every
        shift = ev.n_generated - ev.t  # tokens committed after the state the head read
        p = LivePoint(n_generated=int(ev.n_generated), t=int(ev.t), remaining=float(ev.remaining_now),
                      remaining_q10=max(float(ev.remaining_q10) - shift, 0.0),
                      remaining_q90=max(float(ev.remaining_q90) - shift, 0.0), total=float(ev.total))
        points.append(p)
        if console is not None:
            console.print(f"  {p.n_generated:4d} tokens | remaining ~{p.remaining:4.0f} "
                          f"[{p.remaining_q10:.0f}-{p.remaining_q90:.0f}] | total ~{p.total:4.0f}")

    res = session.run(on_cycle)
    g = res.gen
    return LiveResult(text=res.text, n_tokens=len(g.tokens), stop_reason=g.stop_reason, tau=g.tau, seconds=res.seconds,
                      points=points, head_ms_per_cycle=res.head_ms_per_cycle, target_ms_per_pass=res.loop_pass_ms)
