"""Fixtures of the features tests: one tiny random Llama per session, and a fresh run per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from bad_inputs.features import make_run, make_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture()
def tiny_run(tmp_path: Path, tiny_model: Path) -> Path:
    return make_run(tmp_path / "run", tiny_model, n=12)
