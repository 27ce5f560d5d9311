"""The bad-input contract, checked one way for every verb (see tests/test_bad_input.py).

A :class:`BadInput` row is: a ``lenpred`` command line with ``{placeholders}``, an optional
``setup(tmp_path) -> dict`` that builds the bad input and returns the placeholders, and the text
the one-line error must contain. :func:`check` runs the command in-process and asserts the
contract: exit code 1, exactly one line on stderr of the form ``lenpred VERB: error: ...`` that
contains ``expect`` (case-insensitive) and, for a lenpred error (exit 1), `` -- fix: `` (every message
names the problem and the fix), no traceback, and nothing new written under ``tmp_path``
(every path the setup made is left byte-identical, and no new file or folder appears -- no
``OUT.work`` either) unless ``writes_ok``. ``cleanup`` undoes what tmp_path's removal cannot (a
read-only directory made with :func:`read_only`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# rows whose message does not name its fix yet: the router's config messages, rewritten in parallel
# (issue 39 part 2; lenpred/route/config.py). The set may only shrink.
FIX_PENDING: set[str] = set()


@dataclass(frozen=True)
class BadInput:
    id: str
    argv: list[str]
    setup: Callable[[Path], dict[str, Any]] | None = None
    expect: str = ""
    writes_ok: bool = False  # a case whose command may legitimately create files (rare)
    marks: tuple[Any, ...] = field(default_factory=tuple)  # e.g. (pytest.mark.slow,)
    cleanup: Callable[[Path], None] | None = None  # undo what setup did that tmp_path's removal cannot
    # the module whose ``main(argv)`` runs the command line: lenpred's CLI, or a benchmark
    # ("benchmarks.bench_yardstick": its errors read ``python -m benchmarks.bench_yardstick: error: ...``)
    entry: str = "lenpred.cli"

    def param(self) -> Any:
        return pytest.param(self, id=self.id, marks=list(self.marks))


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[str(p.relative_to(root)) + "/"] = "dir"
    return out


def read_only(path: Path) -> Path:
    """Make ``path`` (a directory) unwritable, for root too (``chattr +i``); undo with :func:`writable`."""
    import os
    import subprocess

    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
            pytest.skip("running as root where chattr +i does not work: no read-only directory to test")
    else:
        path.chmod(0o555)
    return path


def writable(path: Path) -> None:
    import os
    import subprocess

    for p in [q for q in path.rglob("*") if q.is_dir()] + [path]:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(p)], capture_output=True)
        p.chmod(0o755)


def check(case: BadInput, tmp_path: Path, capsys: Any) -> None:
    try:
        _check(case, tmp_path, capsys)
    finally:
        if case.cleanup is not None:
            case.cleanup(tmp_path)


def _check(case: BadInput, tmp_path: Path, capsys: Any) -> None:
    import importlib

    main = importlib.import_module(case.entry).main
    values = {"tmp": str(tmp_path)}
    if case.setup is not None:
        values.update({k: str(v) for k, v in case.setup(tmp_path).items()})
    argv = [a.format(**values) for a in case.argv]
    before = _snapshot(tmp_path)
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse errors exit 2 by themselves
        rc = e.code if isinstance(e.code, int) else 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert rc in (1, 2), f"exit code {rc}, stderr: {err!r}"
    error_lines = [ln for ln in lines if ": error: " in ln]
    assert len(error_lines) == 1, f"want one error line, got: {err!r}"
    if rc == 1:  # a lenpred error: that one line and nothing else (argparse adds its usage line)
        assert len(lines) == 1, f"want exactly one line on stderr, got: {err!r}"
        assert " -- fix: " in error_lines[0] or case.id in FIX_PENDING, f"the error names no fix: {error_lines[0]!r}"
    assert case.expect.lower() in error_lines[0].lower(), f"{case.expect!r} not in {error_lines[0]!r}"
    if not case.writes_ok:
        after = _snapshot(tmp_path)
        assert after == before, f"files changed: {sorted(set(after.items()) ^ set(before.items()))}"
