"""The engine contract shared by every generation backend.

An engine receives :class:`Job` objects (one sample of one prompt) and yields :class:`Result`
objects as samples finish, in any order. It never touches the run directory: the runner owns
resumption, sharding and progress. ``token_ids`` never include the terminating EOS token, so
``n_tokens`` is the response length a user sees; a sample cut at ``max_new_tokens`` has exactly
that many tokens and ``stop_reason == "length"`` (censored, not a length).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from lenpred.errors import ConfigError
from lenpred.registry import Registry


@dataclass(frozen=True)
class SamplingConfig:
    """The sampling card. ``top_k=0`` means no top-k cut, ``top_p=1`` no nucleus cut, ``min_p=0`` no
    min-p cut, ``repetition_penalty=1`` none. The order of the processors is the one vLLM uses:
    penalties, temperature, top-k, top-p, min-p.

    ``repetition_penalty`` is the multiplicative (CTRL / transformers / vLLM) penalty over prompt +
    output tokens. With a chat template it also penalises the end-of-turn token, which occurs in the
    prompt, so it *lengthens* answers (measured in the pilot). ``frequency_penalty`` and
    ``presence_penalty`` are OpenAI's additive penalties over output tokens only.
    """

    temperature: float = 1.0
    top_p: float = 0.95
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    max_new_tokens: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.temperature > 0):
            raise ConfigError(f"temperature must be > 0 for sampling, got {self.temperature}")
        if not (0 < self.top_p <= 1):
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not (0 <= self.min_p < 1):
            raise ConfigError(f"min_p must be in [0, 1), got {self.min_p}")
        if not (self.repetition_penalty > 0):
            raise ConfigError(f"repetition_penalty must be > 0 (1 = off), got {self.repetition_penalty}")
        if not (-2 <= self.frequency_penalty <= 2 and -2 <= self.presence_penalty <= 2):
            raise ConfigError("frequency_penalty and presence_penalty must be in [-2, 2] (OpenAI's range)")
        if self.max_new_tokens <= 0:
            raise ConfigError(f"max_new_tokens must be positive, got {self.max_new_tokens}")

    def card(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Job:
    prompt_id: str
    sample_idx: int
    prompt_token_ids: tuple[int, ...]
    prompt_text: str  # the rendered prompt (chat template applied), for text-only engines
    seed: int


@dataclass(frozen=True)
class Result:
    prompt_id: str
    sample_idx: int
    token_ids: tuple[int, ...]
    stop_reason: str  # "eos" | "length"
    text: str
    seed: int

    def row(self) -> dict[str, Any]:
        return {
            "prompt_id": self.prompt_id,
            "sample_idx": self.sample_idx,
            "n_tokens": len(self.token_ids),
            "stop_reason": self.stop_reason,
            "text": self.text,
            "token_ids": list(self.token_ids),
            "seed": self.seed,
        }


def sample_seed(card_seed: int, prompt_id: str, sample_idx: int) -> int:
    """A per-sample seed that depends only on the card seed and the sample's key.

    So a resumed or extended run draws the same random stream for a given sample, whatever
    order or batch it lands in (numerics of batched kernels may still differ by engine).
    """
    h = hashlib.sha256(f"{card_seed}:{prompt_id}:{sample_idx}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


class Engine(Protocol):
    name: str

    def identity(self) -> dict[str, Any]:
        """What goes into the card's ``engine`` section (name, version, weights that matter)."""

    def runtime(self) -> dict[str, Any]:
        """Settings that do not change the sample distribution (batch size, threads, url)."""

    def generate(self, jobs: Iterator[Job]) -> Iterator[Result]:
        """Run jobs, yielding results as they finish."""

    def close(self) -> None: ...


ENGINES: Registry[Any] = Registry("engine")
