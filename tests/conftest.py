"""Shared fixtures. ``LENPRED_HOME`` is left as configured so the converted embedded model is reused.

Shared helper modules are named ``<area>_testing.py`` and imported by name: an area's own in its
folder (tests/collect/collect_testing.py: the fake engine, its fixture in tests/collect/conftest.py),
the suite-wide ones here at the root (tests/model_testing.py: WordTokenizer, needs_llama), which this
conftest.py keeps on sys.path for every test.
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
