"""Every error lenpred raises for a person names the problem *and* the fix (lenpred.errors): the CLI
prints ``problem -- fix: what to do`` on one line. A ``raise SomeLenpredError("problem")`` with no
fix printed a bare problem (issue 39: "8 range errors have no '-- fix'"); this scan finds such a
call anywhere in the package, so a new one fails here rather than in front of a user.

A call counts as naming its fix when it passes a second positional argument or ``fix=``. Errors
built elsewhere (a message assembled in a variable, ``*args``) are not judged.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lenpred
from lenpred import errors

ROOT = Path(lenpred.__file__).parent
ERRORS = {name for name, obj in vars(errors).items()
          if isinstance(obj, type) and issubclass(obj, errors.LenpredError)}

# Files whose messages are being rewritten in parallel (issue 39 parts 2 and 4: the router's config and the
# simulator's policy file); the scan takes them in once those land. The list may only shrink.
PENDING: set[str] = set()


def _calls_without_fix(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text(encoding="utf-8")
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name not in ERRORS or any(isinstance(a, ast.Starred) for a in node.args):
            continue
        if len(node.args) < 2 and not any(k.arg in ("fix", None) for k in node.keywords):
            out.append(f"{path.relative_to(root)}:{node.lineno}: {ast.get_source_segment(text, node)}")
    return out


def test_every_raised_error_names_a_fix() -> None:
    found = [c for p in sorted(ROOT.rglob("*.py")) if str(p.relative_to(ROOT)) not in PENDING
             for c in _calls_without_fix(p)]
    assert not found, "errors without a fix (pass one: ConfigError(problem, fix)):\n" + "\n".join(found)


def test_the_scan_finds_a_call_without_a_fix(tmp_path: Path) -> None:
    f = tmp_path / "probe.py"
    f.write_text('from lenpred.errors import ConfigError\n\nraise ConfigError("x must be >= 1")\n'
                 'raise ConfigError("y must be >= 1", "pass 1 or more")\nraise ConfigError("z", fix="w")\n')
    assert [c.split(": ", 1)[0] for c in _calls_without_fix(f, tmp_path)] == ["probe.py:3"]
