"""One live generation with the OUTLETS head re-predicting the remaining length every cycle.

What ``lenpred demo`` shows (issue: OUTLETS, part 7) and what ``lenpred generate --length-head``
streams, as a function: the draft head decodes speculatively, the length head reads the draft states
the loop already computed, and every ``every`` generated tokens a line gives the tokens so far, the
predicted remaining tokens with their 80% interval and the predicted total. When the answer is done
the true length is known and each line's error is reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lenpred.errors import ConfigError, DataError

__all__ = ["LivePoint", "LiveResult", "live_generation"]


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


def live_generation(*, draft: str | Path, length_head: str | Path, prompt: str, max_new_tokens: int = 256,
                    greedy: bool = False, k: int = 3, every: int = 16, seed: int | None = None,
                    console: Any = None) -> LiveResult:
    """Generate an answer to ``prompt`` (a user message, rendered with the head's training card) with
    the EAGLE-3 head ``draft``, running the OUTLETS ``length_head`` at every cycle.

    Checks as ``lenpred generate`` does: the length head must have been trained on this draft head's
    features and this target. Prints a line every ``every`` tokens on ``console`` (a rich Console).
    """
    import time

    import numpy as np
    import torch

    from lenpred.data.sources import PromptConfig, encode_prompt
    from lenpred.draft.sampling import sampling_from_card
    from lenpred.draft.speculative import SpeculativeDecoder
    from lenpred.draft.target import Target
    from lenpred.models import load
    from lenpred.models.loading import eos_ids
    from lenpred.outlets.online import OnlineLengthHead, open_heads

    if not str(prompt).strip():
        raise ConfigError("the prompt is empty", "pass a user message")
    if every < 1 or max_new_tokens < 1 or k < 1:
        raise ConfigError(f"every, max_new_tokens and k must be >= 1 (got {every}, {max_new_tokens}, {k})")
    for what, p in (("draft head", draft), ("length head", length_head)):
        if not Path(p).is_dir():
            raise DataError(f"{what} {p} does not exist", "see docs/outlets.md for the commands that make it")
    heads = open_heads(draft, length_head)
    card = (((heads.draft.meta or {}).get("training") or {}).get("run_card")) or {}
    sampling = sampling_from_card(card.get("sampling") or {}, max_new_tokens=max_new_tokens, seed=seed)
    pd_ = card.get("prompts") or {}
    lm = load(heads.model)
    target = Target(lm.model, heads.layers)
    ids = encode_prompt(lm.tokenizer, prompt, PromptConfig(chat_template=pd_.get("chat_template", True),
                                                           system_prompt=pd_.get("system_prompt")))
    dec = SpeculativeDecoder(target, heads.draft.model, k=k, sampling=None if greedy else sampling,
                             max_new_tokens=max_new_tokens, eos_ids=eos_ids(lm.model, lm.tokenizer))
    points: list[LivePoint] = []
    next_line = [0]

    def emit(ev: Any) -> None:
        if ev.n_generated < next_line[0]:
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

    online = OnlineLengthHead(heads.length_head, len(ids), heads.layers, spec=heads.length_spec, emit=emit)
    gen = torch.Generator().manual_seed(int(sampling.seed))
    t0 = time.perf_counter()
    g = dec.generate(ids, generator=gen, on_cycle=online)
    dt = time.perf_counter() - t0
    per = float(np.median(np.add(online.row_seconds, online.head_seconds))) if online.head_seconds else None
    fwd = g.target_seconds / max(g.target_forwards, 1)
    return LiveResult(text=lm.tokenizer.decode(g.tokens, skip_special_tokens=True), n_tokens=len(g.tokens),
                      stop_reason=g.stop_reason, tau=g.tau, seconds=dt, points=points,
                      head_ms_per_cycle=None if per is None else 1e3 * per, target_ms_per_pass=1e3 * fwd)
