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


@pytest.fixture()
def two(stubs):
    """The module's two stubs, started (a test may have stopped one) and reset before and after the test."""
    for s in stubs:
        if not s.alive:
            s.start()
        s.reset()
    yield stubs
    for s in stubs:
        s.reset()
