"""Input checks that several verbs share, each in one place: split roles, simulator loads, torch devices,
thread counts, the target's context length, and the sane limits of values that would otherwise run away.

Each raises a :class:`~lenpred.errors.LenpredError` naming the problem and the fix, before any work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lenpred.errors import ConfigError, ContextLengthError, ModelError

__all__ = ["LIMITS", "check_context", "check_device", "check_limit", "check_threads", "model_context", "parse_loads",
           "parse_roles", "prompt_text"]

ROLES = ("train", "val", "test")  # lenpred.data.split.ROLES (not imported: pandas would load for --help)

# Upper limits of values whose cost grows with them; far above any useful setting, far below a hang.
LIMITS: dict[str, int] = {
    "--k": 64,  # draft tokens per cycle: acceptance decays geometrically, EAGLE uses <= 8
    "tree depth": 64,
    "tree top-k": 256,
    "tree nodes": 4096,
    "--n-boot": 100_000,  # bootstrap resamples: intervals settle by 1,000
    "--n-requests": 10_000_000,  # simulated requests: 100,000 take ~3 s
}


def check_limit(name: str, value: int, fix: str | None = None, label: str | None = None) -> None:
    """Refuse ``value`` above ``LIMITS[name]`` (it would run for hours or exhaust memory);
    ``label`` names the value in the message when it is not the flag (a config field)."""
    top = LIMITS[name]
    if value > top:
        raise ConfigError(f"{label or name} {value:,} is above the limit of {top:,}",
                          fix or f"pass {name} {top:,} or less")


def parse_roles(text: str | Sequence[str], flag: str = "--roles") -> tuple[str, ...]:
    """``"train,val"`` -> ``("train", "val")`` in split order; an empty or unknown role is refused."""
    items = [x.strip() for x in (text.split(",") if isinstance(text, str) else text) if x.strip()]
    if not items:
        raise ConfigError(f"{flag} {text!r} names no split role", f"pass some of {', '.join(ROLES)} (e.g. {flag} test)")
    bad = [r for r in items if r not in ROLES]
    if bad:
        raise ConfigError(f"{flag}: unknown split role {bad[0]!r}", f"roles are {', '.join(ROLES)} (e.g. {flag} train,val)")
    return tuple(r for r in ROLES if r in items)


def parse_loads(text: str, flag: str = "--loads") -> tuple[tuple[float, ...], bool]:
    """``"0.5,1,2"`` -> ``((0.5, 1.0, 2.0), False)``; ``"0.9x,1.1x"`` -> ``((0.9, 1.1), True)``: the loads a
    simulator sweep runs at and whether they are marked as multiples of the measured capacity (``x``).
    An empty list, a non-number, nan or inf, and a list mixing marked and plain numbers (one of them
    is surely a typo) are refused."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ConfigError(f"{flag} is empty", f"e.g. {flag} 0.5,1,2 (or 0.9x,1.1x for multiples of capacity)")
    marked = [x for x in items if x.lower().endswith("x")]
    if marked and len(marked) != len(items):
        plain = next(x for x in items if not x.lower().endswith("x"))
        raise ConfigError(f"{flag} mixes multiples of capacity ({marked[0]!r}) and plain numbers ({plain!r})",
                          "give every load as a multiple of capacity (0.9x) or every one as a plain number")
    try:
        loads = tuple(float(x[:-1] if marked else x) for x in items)
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated numbers, got {text!r}",
                          f"e.g. {flag} 0.5,1,2 (or 0.9x,1.1x for multiples of capacity)") from None
    bad = [x for x in loads if not math.isfinite(x)]
    if bad:  # not "a rate of 0": nan and inf are not rates at all
        raise ConfigError(f"{flag} must be finite numbers, got {bad[0]!r}",
                          f"pass arrival rates (req/s) or multiples of capacity, e.g. {flag} 0.5,1,2")
    return loads, bool(marked)


def check_threads(n: int | None, flag: str = "--threads") -> None:
    if n is not None and n < 0:
        raise ConfigError(f"{flag} must be >= 0, got {n}", f"pass {flag} 0 for torch's default, or a count of CPU threads")


def check_device(name: str, flag: str = "--device") -> str:
    """A torch device this machine has (``cpu``, ``cuda``, ``cuda:1``, ``mps`` ...), checked before any
    file is written or any weights are loaded."""
    import torch

    try:
        dev = torch.device(name)
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError, ValueError, TypeError) as e:
        reason = " ".join(str(e).split())[:160] or type(e).__name__
        raise ModelError(f"{flag} {name!r} is not a torch device this machine has ({reason})",
                         "pass --device cpu, or cuda / cuda:N on a machine with a GPU") from None
    return name


def check_context(n_prompt: int, context: int, *, max_new_tokens: int = 0, what: str = "the prompt",
                  fix: str | None = None) -> None:
    """Refuse a prompt the target cannot read: over its context, or leaving no room for the answer.

    ``context``: the model's context length in tokens (its ``max_position_embeddings``); a model
    fed past it runs and returns garbage instead of failing. Every verb that feeds the target calls
    this (generate and the demo's live generation, collect's prompt table).
    """
    if n_prompt > context:
        raise ContextLengthError(f"{what} has {n_prompt:,} tokens, over the model's context of {context:,}",
                                 fix or "shorten the prompt")
    if max_new_tokens and n_prompt + max_new_tokens > context:
        raise ContextLengthError(
            f"{what} has {n_prompt:,} tokens: with max_new_tokens={max_new_tokens:,} it exceeds the model's "
            f"context of {context:,}", fix or f"shorten the prompt, or pass --max-new-tokens {max(context - n_prompt, 1):,} or less")


def model_context(config: Any, default: int = 2048) -> int:
    """The context length a transformers config declares (its text part for multimodal configs)."""
    get = getattr(config, "get_text_config", None)
    tc = get() if callable(get) else config
    return int(getattr(tc, "max_position_embeddings", 0) or default)


def prompt_text(prompt: str | None, prompt_file: str | None) -> str:
    """The user message of ``--prompt TEXT`` or ``--prompt-file FILE`` (exactly one; not empty)."""
    if (prompt is None) == (prompt_file is None):
        raise ConfigError("generate needs exactly one user message: --prompt and --prompt-file were both given, or neither"
                          if prompt is not None else "no user message given",
                          "pass exactly one of --prompt TEXT and --prompt-file FILE")
    where = "--prompt"
    text = prompt or ""
    if prompt_file is not None:
        pf = Path(prompt_file)
        where = f"prompt file {pf}"
        if pf.is_dir():
            raise ConfigError(f"{where} is a directory", "pass the path of a text file holding the user message")
        if not pf.is_file():
            raise ConfigError(f"{where} does not exist", "check the path")
        try:
            text = pf.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{where} is not UTF-8 text", "save it as UTF-8") from None
    if not text.strip():
        raise ConfigError(f"{where} is empty", "pass the user message to generate an answer for")
    return text
