"""Every bad input a new user tried, as one table: exit code 1, one line naming the problem and the
fix, nothing written. Rows live in tests/bad_inputs/<area>.py (``CASES``); this file runs them all."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import bad_inputs
from bad_input_harness import BadInput, check


def _all_cases() -> list[BadInput]:
    cases: list[BadInput] = []
    for mod in pkgutil.iter_modules(bad_inputs.__path__):
        cases.extend(importlib.import_module(f"bad_inputs.{mod.name}").CASES)
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "bad-input ids must be unique"
    return cases


@pytest.mark.parametrize("case", [c.param() for c in _all_cases()])
def test_bad_input(case: BadInput, tmp_path, capsys) -> None:
    check(case, tmp_path, capsys)
