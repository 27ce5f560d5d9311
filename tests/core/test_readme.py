"""The README's Python API example runs as written (on the committed reference run), and every file or
folder of this repository it names exists (a moved test or module must not leave a stale path)."""

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


def test_readme_names_only_paths_that_exist():
    text = (ROOT / "README.md").read_text()
    named = set(re.findall(r"(?<![\w./-])((?:src/lenpred|tests|benchmarks|docs|experiments)/[\w./-]*\w/?)", text))
    assert any(p.startswith("tests/") for p in named)  # the pattern still finds what it is for
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert not missing, f"README.md names paths that do not exist: {missing}"
