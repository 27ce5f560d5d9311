"""Fixtures the router's tests share."""

from __future__ import annotations

import pytest
from route_testing import Stub


@pytest.fixture(scope="module")
def stubs():
    """Two stub backends, "a" and "b", for one test module."""
    a, b = Stub("a").start(), Stub("b").start()
    yield a, b
    a.stop()
    b.stop()
