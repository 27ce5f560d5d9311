"""Test helpers of the collect / run-directory tests (imported by name: ``from collect_testing import ...``).

A uniquely named module, not ``conftest``: with several conftest.py files in the tree, ``from
conftest import X`` resolves to whichever one pytest imported last.
"""

from __future__ import annotations

import importlib.util
import zlib
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from lenpred.collect.base import EngineOptions, EngineSetup, Job, Result

__all__ = ["FakeEngine", "FakeOptions", "WordTokenizer", "needs_llama"]


class WordTokenizer:
    """A tiny deterministic tokenizer (one id per whitespace word) for unit tests of prompt handling.

    Ids come from crc32, not ``hash()``: str hashes are salted per process (PYTHONHASHSEED), so a
    test could pass in one run and fail in the next.
    """

    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    eos_token = "</s>"
    eos_token_id = 0

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [1 + zlib.crc32(w.encode()) % 1000 for w in text.split()]}

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool = False, add_generation_prompt: bool = True) -> str:
        return "".join(f"<{m['role']}> {m['content']} " for m in messages) + "<assistant>"

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        return " ".join(f"w{i}" for i in ids)

    def __len__(self) -> int:
        return 1001


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


_no_llama = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed")


def needs_llama(test: Any) -> Any:
    """Marks a test ``llamacpp`` and ``slow`` (the real embedded model through llama.cpp) and skips it
    where llama-cpp-python is not installed. Select or drop them with ``-m llamacpp`` / ``-m 'not slow'``."""
    return pytest.mark.slow(pytest.mark.llamacpp(_no_llama(test)))
