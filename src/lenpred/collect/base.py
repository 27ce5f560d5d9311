"""The engine contract shared by every generation backend, and the sampling card.

An engine receives :class:`Job` objects (one sample of one prompt) and yields :class:`Result`
objects as samples finish, in any order. It never touches the run directory: the runner owns
resumption, sharding and progress. ``token_ids`` never include the terminating EOS token, so
``n_tokens`` is the response length a user sees; a sample cut at ``max_new_tokens`` has exactly
that many tokens and ``stop_reason == "length"`` (censored, not a length).

Each engine has its own options class (an :class:`EngineOptions`). Its ``card_fields`` say which
options change the samples, and so belong to the run card's identity; every other option is
runtime only (recorded under ``engine_runtime``, free to change between invocations):

===========  ===========================================  =============================================
engine       in the card (``card["engine"]``)             runtime only
===========  ===========================================  =============================================
``hf``       ``dtype`` (+ transformers, torch versions)   ``batch_size``, ``device``
``llamacpp`` the GGUF file name (+ llama-cpp-python's      ``n_parallel``, ``n_batch``, ``n_threads``
             version); no option changes the samples
``openai``   ``api_model`` (+ the API, v1-completions)    ``base_url``, ``concurrency``,
                                                          ``n_per_request``, ``timeout``, ``retries``
===========  ===========================================  =============================================
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import Field, field_validator, model_validator

from lenpred.config import Config
from lenpred.errors import FieldError
from lenpred.registry import Registry

__all__ = [
    "ENGINES",
    "Engine",
    "EngineOptions",
    "EngineSetup",
    "FieldError",
    "Job",
    "Result",
    "SamplingConfig",
    "sample_seed",
]


class SamplingConfig(Config):
    """The sampling card. ``top_k=0`` means no top-k cut, ``top_p=1`` no nucleus cut, ``min_p=0`` no
    min-p cut, ``repetition_penalty=1`` none. The order of the processors is the one vLLM uses:
    penalties, temperature, top-k, top-p, min-p.

    ``repetition_penalty`` is the multiplicative (CTRL / transformers / vLLM) penalty over prompt +
    output tokens. With a chat template it also penalises the end-of-turn token, which occurs in the
    prompt, so it *lengthens* answers (measured in the pilot). ``frequency_penalty`` and
    ``presence_penalty`` are OpenAI's additive penalties over output tokens only.
    """

    temperature: float = Field(1.0, description="softmax temperature (> 0)")
    top_p: float = Field(0.95, description="nucleus cut in (0, 1]; 1 = off")
    top_k: int = Field(0, description="keep the k most likely tokens; 0 = off")
    min_p: float = Field(0.0, description="drop tokens below min_p x the top probability; 0 = off")
    repetition_penalty: float = Field(1.0, description="multiplicative penalty over prompt + output; 1 = off")
    frequency_penalty: float = Field(0.0, description="OpenAI's additive penalty per occurrence, output only; 0 = off")
    presence_penalty: float = Field(0.0, description="OpenAI's additive penalty once per seen token, output only; 0 = off")
    max_new_tokens: int = Field(1024, description="cap on response tokens; a sample cut here is censored")
    seed: int = Field(0, description="sampling seed (each sample's seed derives from it and the sample's key)")

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float) -> float:
        if not v > 0:
            raise FieldError(f"must be > 0 for sampling, got {v}", "use a small value such as 0.05 for near-greedy sampling")
        return v

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, v: float) -> float:
        if not 0 < v <= 1:
            raise FieldError(f"must be in (0, 1], got {v}", "use 1 to turn the nucleus cut off")
        return v

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, v: int) -> int:
        if v < 0:
            raise FieldError(f"must be >= 0, got {v}", "use 0 to turn the top-k cut off")
        return v

    @field_validator("min_p")
    @classmethod
    def _min_p(cls, v: float) -> float:
        if not 0 <= v < 1:
            raise FieldError(f"must be in [0, 1), got {v}", "use 0 to turn the min-p cut off")
        return v

    @field_validator("repetition_penalty")
    @classmethod
    def _repetition(cls, v: float) -> float:
        if not v > 0:
            raise FieldError(f"must be > 0, got {v}", "use 1 to turn the repetition penalty off")
        return v

    @field_validator("frequency_penalty", "presence_penalty")
    @classmethod
    def _additive(cls, v: float) -> float:
        if not -2 <= v <= 2:
            raise FieldError(f"must be in [-2, 2] (OpenAI's range), got {v}", "use 0 to turn it off")
        return v

    @field_validator("max_new_tokens")
    @classmethod
    def _max_new(cls, v: int) -> int:
        if v <= 0:
            raise FieldError(f"must be positive, got {v}", "pass --max-new-tokens 1 or more")
        return v

    def card(self) -> dict[str, Any]:
        """The card's ``sampling`` section (every field: all of them change the samples)."""
        return self.model_dump()


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


class EngineOptions(Config):
    """Base of every engine's options. ``card_fields`` names the options that change the samples
    (part of the run card's identity); all other fields are runtime only."""

    card_fields: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _card_fields_exist(self) -> EngineOptions:
        missing = set(self.card_fields) - set(type(self).model_fields)
        if missing:  # a programming error in an engine module, caught by its first use
            raise TypeError(f"{type(self).__name__}.card_fields names unknown options {sorted(missing)}")
        return self

    def card(self) -> dict[str, Any]:
        """The options that go into the card's ``engine`` section."""
        return {k: v for k, v in self.to_dict().items() if k in self.card_fields}

    def runtime(self) -> dict[str, Any]:
        """The options recorded under the card's ``engine_runtime`` (bookkeeping, not identity)."""
        return {k: v for k, v in self.to_dict().items() if k not in self.card_fields}


@dataclass(frozen=True)
class EngineSetup:
    """What an engine is built from besides its own options (the run's fixed choices)."""

    model: str  # the model name or path as the user gave it
    spec: Any  # lenpred.models.ModelSpec: fingerprint, GGUF / HF folder
    tokenizer: Any  # the run's tokenizer (chat template, EOS, detokenization)
    sampling: SamplingConfig
    max_prompt_tokens: int  # the longest prompt the run admits (llama.cpp sizes its context by it)


@runtime_checkable
class Engine(Protocol):
    """A generation backend. Register an implementation with ``@ENGINES.register(name)``."""

    name: ClassVar[str]
    Options: ClassVar[type[EngineOptions]]

    @classmethod
    def identity(cls, options: Any, setup: EngineSetup) -> dict[str, Any]:
        """The card's ``engine`` section: name, version and whatever else changes the samples
        (``options.card()`` plus facts of the setup, e.g. the GGUF file). Cheap: loads no model."""
        ...

    @classmethod
    def create(cls, options: Any, setup: EngineSetup) -> Engine:
        """Build a ready engine (load the model, reach the server); fails before any write."""
        ...

    def generate(self, jobs: Iterator[Job]) -> Iterator[Result]:
        """Run jobs, yielding results as they finish."""
        ...

    def close(self) -> None: ...


ENGINES: Registry[Any] = Registry("engine")
