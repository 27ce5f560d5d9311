"""Test helpers of the collect tests (imported by name: ``from collect_testing import ...``): a fake engine.

Run as a script, it is ``lenpred`` with the fake engine registered, so a test can stop a collector
in a child process: ``python collect_testing.py collect --engine fake --hold-after 4 ...``.
Suite-wide helpers (the word tokenizer, ``needs_llama``) live in tests/model_testing.py.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from lenpred.collect.base import ENGINES, EngineOptions, EngineSetup, Job, Result
from lenpred.data.rundir import RunDir
from lenpred.errors import EngineError

__all__ = ["HOLDING", "PROMPTS", "FakeEngine", "FakeOptions", "main", "run_keys", "write_prompts"]

PROMPTS = [  # the prompt_file fixture's prompts (ids q0..q5): short answers keep the real model quick
    "Name a color.",
    "What is 3 + 4?",
    "Say hello in French.",
    "Give one word that rhymes with cat.",
    "Name a planet.",
    "What is the capital of Italy?",
]

HOLDING = "fake engine: holding after"  # the stderr line that says the held results are with the runner
HOLD_LIMIT_S = 600.0  # a held engine nobody stops gives up (no orphan process)


class FakeOptions(EngineOptions):
    """The fake engine's options: ``fail_after`` raises after that many results, ``hold_after`` waits
    to be stopped (a signal) after that many, printing :data:`HOLDING` on stderr (-1 = never)."""

    fail_after: int = -1
    hold_after: int = -1


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
                raise EngineError("scripted failure", "none")
            if n == self.options.hold_after:
                _hold(n)
            FakeEngine.jobs.append(j)
            toks = tuple(range(10, 10 + j.seed % 7))
            yield Result(j.prompt_id, j.sample_idx, toks, "eos", " ".join(map(str, toks)), j.seed)

    def close(self) -> None:
        pass


def write_prompts(path: Path, texts: Sequence[str]) -> Path:
    """A JSONL prompt file (source ``jsonl``): one ``{"id": "q<i>", "prompt": text}`` per line."""
    path.write_text("".join(json.dumps({"id": f"q{i}", "prompt": t}) + "\n" for i, t in enumerate(texts)))
    return path


def run_keys(run: Path) -> list[tuple[str, int]]:
    """The ``(prompt_id, sample_idx)`` keys of a run's samples, in stored order (duplicates kept)."""
    s = RunDir.open(run).samples(columns=["prompt_id", "sample_idx"])
    return list(zip(s.prompt_id, s.sample_idx, strict=True))


def _hold(n: int) -> None:
    """Wait for a signal. The runner has taken the ``n`` results yielded so far (it asked for the next
    one), so a collector held here has exactly ``n`` samples, and cannot finish on its own."""
    print(f"{HOLDING} {n} results", file=sys.stderr, flush=True)
    time.sleep(HOLD_LIMIT_S)  # a signal handler that raises (SIGTERM, Ctrl-C) ends the wait
    raise EngineError(f"held {HOLD_LIMIT_S:.0f} s and nobody stopped the collector", "send it SIGTERM or SIGKILL")


def main(argv: list[str]) -> int:
    """``lenpred`` with the fake engine registered as ``fake``."""
    from lenpred.cli import main as lenpred_main
    from lenpred.collect import engines  # noqa: F401  (the real engines first)

    ENGINES.add("fake", FakeEngine)
    return lenpred_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
