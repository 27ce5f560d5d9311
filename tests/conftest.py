"""Shared fixtures. ``LENPRED_HOME`` is left as configured so the converted embedded model is reused.

The collect / run-directory helpers (WordTokenizer, FakeEngine, needs_llama) live in
tests/foundation/collect_testing.py and their fixtures in tests/foundation/conftest.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def smol_tokenizer() -> Any:
    from lenpred.models import load_tokenizer

    return load_tokenizer("smollm2-135m")


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for the test (tiny models: thread start-up costs more than the arithmetic,
    and the CPUs are shared); use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
