"""Fixtures of the run-data tests (run directory, prompt sources)."""

from __future__ import annotations

import pytest

from model_testing import WordTokenizer


@pytest.fixture()
def word_tok() -> WordTokenizer:
    return WordTokenizer()
