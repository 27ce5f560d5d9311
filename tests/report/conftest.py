"""Fixtures of the report tests: the inputs and the full page, made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from report.report_inputs import Inputs, make_inputs, make_page


@pytest.fixture(scope="session")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    return make_inputs(tmp_path_factory.mktemp("report-inputs"))


@pytest.fixture(scope="session")
def full_page(inputs: Inputs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_page(inputs, tmp_path_factory.mktemp("report") / "report.html")
