"""Shared fixtures. ``LENPRED_HOME`` is left as configured so the converted embedded model is reused.

The collect / run-directory helpers (WordTokenizer, FakeEngine, needs_llama) live in
tests/foundation/collect_testing.py and their fixtures in tests/foundation/conftest.py.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def smol_tokenizer() -> Any:
    from lenpred.models import load_tokenizer

    return load_tokenizer("smollm2-135m")
