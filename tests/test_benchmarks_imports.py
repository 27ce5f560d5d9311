"""benchmarks/ is a package (issue 39): run as ``python -m benchmarks.bench_x`` from the repository root,
so no module of it edits ``sys.path`` or loads another by file path; it imports nothing from tests/
(tests may import benchmarks and lenpred, not the reverse); its docs generators (benchmarks/report/)
import no benchmark; and importing any module of it runs nothing.

The scan reads every module's syntax tree: ``sys.path`` in any form (``sys.path.insert``, ``import sys.path``
aside), ``site.addsitedir``, ``importlib.util.spec_from_file_location``; imports of ``tests``, of a module
or folder that tests/ holds (``route_procs`` was one, ``predictors.synth`` another), of ``bench_scripts``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import benchmarks

ROOT = Path(benchmarks.__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
TESTS = ROOT / "tests"


def _test_modules(tests: Path = TESTS) -> set[str]:
    """Top-level names an import of test code would use: ``tests``, every module file under tests/ and
    every folder directly under it (importable as a namespace package when tests/ is on sys.path)."""
    names = {"tests"} | {p.stem for p in tests.rglob("*.py")}
    names |= {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    return names - {"__init__"}


def _module(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def problems(path: Path, test_names: set[str], root: Path = ROOT) -> list[str]:
    """What ``path`` does that a module of the benchmarks package must not (``file:line: what``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(root)
    in_report = _module(path, root).startswith("benchmarks.report")
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Attribute):
            v = node.value
            if isinstance(v, ast.Name) and (v.id, node.attr) in {("sys", "path"), ("site", "addsitedir")}:
                what = f"edits the import path ({v.id}.{node.attr})"
            elif node.attr == "spec_from_file_location":
                what = "loads a module by file path (spec_from_file_location)"
        elif isinstance(node, ast.ImportFrom | ast.Import):
            mods = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for m in mods:
                top = m.split(".")[0]
                if top in test_names:
                    what = f"imports test code ({m})"
                elif in_report and m.startswith("benchmarks") and not (m == "benchmarks" or m.startswith("benchmarks.report")):
                    what = f"a docs generator imports a benchmark ({m})"
                elif in_report and isinstance(node, ast.ImportFrom) and m == "benchmarks":
                    names = {a.name for a in node.names}
                    if names - {"ROOT", "report"}:
                        what = f"a docs generator imports a benchmark (from benchmarks import {', '.join(sorted(names))})"
        if what:
            out.append((node.lineno, what))
    return [f"{rel}:{n}: {what}" for n, what in sorted(out)]


def test_no_module_edits_sys_path_or_imports_tests() -> None:
    names = _test_modules()
    found = [p for f in sorted(BENCH.rglob("*.py")) for p in problems(f, names)]
    assert not found, "benchmarks/ must be a plain package (python -m benchmarks.X):\n" + "\n".join(found)


def test_every_folder_is_a_package() -> None:
    """Every folder of modules has its __init__.py (no namespace package: ``benchmarks.X`` resolves to this tree)."""
    missing = [str(d.relative_to(ROOT)) for d in [BENCH, *BENCH.rglob("*")] if d.is_dir() and d.name != "__pycache__"
               and any(d.glob("*.py")) and not (d / "__init__.py").is_file()]
    assert missing == []


def test_the_scan_finds_each_kind(tmp_path: Path) -> None:
    (tmp_path / "tests" / "route").mkdir(parents=True)
    (tmp_path / "tests" / "route" / "route_helpers.py").write_text("")
    (tmp_path / "benchmarks" / "report").mkdir(parents=True)
    probe = tmp_path / "benchmarks" / "probe.py"
    probe.write_text("import sys\nsys.path.insert(0, 'x')\nfrom route_helpers import a\nimport tests.x\n"
                     "from route.y import b\nfrom benchmarks.report import ok\n"
                     "import importlib.util\nimportlib.util.spec_from_file_location('m', 'm.py')\n")
    report = tmp_path / "benchmarks" / "report" / "page.py"
    report.write_text("from benchmarks import ROOT\nfrom benchmarks.report import figures\n"
                      "from benchmarks.bench_policies import x\nfrom benchmarks import bench_kv\n")
    names = _test_modules(tmp_path / "tests")
    assert [p.split(": ", 1)[0] for p in problems(probe, names, tmp_path)] == [
        f"benchmarks/probe.py:{n}" for n in (2, 3, 4, 5, 8)]
    assert [p.split(": ", 1)[0] for p in problems(report, names, tmp_path)] == [
        "benchmarks/report/page.py:3", "benchmarks/report/page.py:4"]


def test_importing_a_module_runs_nothing() -> None:
    """Every module imports from the repository root in a fresh interpreter, printing nothing and leaving
    sys.argv unread (a benchmark runs only from its ``main``); ``--help`` then works for each."""
    mods = sorted(_module(p) for p in BENCH.rglob("*.py"))
    code = ("import importlib, sys\nsys.argv = ['x', '--definitely-not-a-flag']\n"
            f"for m in {mods!r}:\n    importlib.import_module(m)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr[-2000:]
