"""Fixtures of the collect tests: the fake engine, registered for one test, and a prompt file."""

from __future__ import annotations

from pathlib import Path

import pytest
from collect_testing import PROMPTS, FakeEngine, write_prompts

from lenpred.collect.base import ENGINES


@pytest.fixture()
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> type[FakeEngine]:
    """Registers :class:`FakeEngine` as engine ``fake`` for one test."""
    from lenpred.collect import engines  # noqa: F401  (the real engines first)

    monkeypatch.setitem(ENGINES._table, "fake", FakeEngine)
    monkeypatch.setattr(FakeEngine, "created", 0)
    monkeypatch.setattr(FakeEngine, "jobs", [])
    return FakeEngine


@pytest.fixture()
def prompt_file(tmp_path: Path) -> Path:
    """:data:`collect_testing.PROMPTS` as a JSONL prompt file."""
    return write_prompts(tmp_path / "prompts.jsonl", PROMPTS)
