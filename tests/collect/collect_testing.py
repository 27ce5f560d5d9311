"""Test helpers of the collect tests (imported by name: ``from collect_testing import ...``): a fake engine.

Suite-wide helpers (the word tokenizer, ``needs_llama``) live in tests/model_testing.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from lenpred.collect.base import EngineOptions, EngineSetup, Job, Result

__all__ = ["FakeEngine", "FakeOptions"]


class FakeOptions(EngineOptions):
    """The fake engine's options: ``fail_after`` raises after that many results (-1 = never)."""

    fail_after: int = -1


class FakeEngine:
    """A deterministic engine for runner tests: sample (p, k) has ``seed % 7`` tokens, stops on EOS.

    ``FakeEngine.created`` counts engines built, ``FakeEngine.jobs`` records every job seen.
    """

    name: ClassVar[str] = "fake"
    Options: ClassVar[type[FakeOptions]] = FakeOptions
    created: ClassVar[int] = 0
    jobs: ClassVar[list[Job]] = []

    def __init__(self, options: FakeOptions) -> None:
        self.options = options

    @classmethod
    def identity(cls, options: FakeOptions, setup: EngineSetup) -> dict[str, Any]:
        return {"name": cls.name, "version": "1"}

    @classmethod
    def create(cls, options: FakeOptions, setup: EngineSetup) -> FakeEngine:
        FakeEngine.created += 1
        return cls(options)

    def generate(self, jobs: Iterator[Job]) -> Iterator[Result]:
        for n, j in enumerate(jobs):
            if n == self.options.fail_after:
                from lenpred.errors import EngineError

                raise EngineError("scripted failure", "none")
            FakeEngine.jobs.append(j)
            toks = tuple(range(10, 10 + j.seed % 7))
            yield Result(j.prompt_id, j.sample_idx, toks, "eos", " ".join(map(str, toks)), j.seed)

    def close(self) -> None:
        pass
