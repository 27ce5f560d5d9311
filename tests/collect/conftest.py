"""Fixtures of the collect tests: the fake engine, registered for one test."""

from __future__ import annotations

import pytest
from collect_testing import FakeEngine

from lenpred.collect.base import ENGINES


@pytest.fixture()
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> type[FakeEngine]:
    """Registers :class:`FakeEngine` as engine ``fake`` for one test."""
    from lenpred.collect import engines  # noqa: F401  (the real engines first)

    monkeypatch.setitem(ENGINES._table, "fake", FakeEngine)
    monkeypatch.setattr(FakeEngine, "created", 0)
    monkeypatch.setattr(FakeEngine, "jobs", [])
    return FakeEngine
