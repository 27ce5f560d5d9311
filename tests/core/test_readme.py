"""The README's Python API example runs as written (on the committed reference run)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _api_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "the README's Python API section has no python block"
    return blocks[0]


def test_readme_python_api_example_runs(capsys):
    if not (ROOT / "data/runs/smollm2-sharegpt/split.json").is_file():
        pytest.skip("the reference run is not in this checkout")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        ns: dict = {}
        exec(compile(_api_block(), "README.md", "exec"), ns)
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    m = re.search(r"bound (\d+) tokens; constant (\d+) = ([\d.]+) x bound", out)
    assert m, out
    bound, const, ratio = int(m[1]), int(m[2]), float(m[3])
    assert 100 < bound < 180 and const > bound and ratio > 1  # the constant floor cannot beat the bound
    assert ns["sweep"].runs and len(ns["sweep"].runs) == 2
