"""No import cycles between lenpred's modules.

Module-level imports count, and so do ``if TYPE_CHECKING:`` imports: a module that needs another's
types to describe what it receives from it is coupled to it both ways (sim/instances.py calling back
into the simulator was such a cycle). Function-local imports don't count (lazy by design).
"""

from __future__ import annotations

import ast
from pathlib import Path

import lenpred

ROOT = Path(lenpred.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level_imports(tree: ast.Module, name: str, is_pkg: bool) -> set[str]:
    out: set[str] = set()

    def visit(stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.startswith("lenpred"))
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative import
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                if mod.startswith("lenpred"):
                    out.add(mod)
                    out.update(f"{mod}.{a.name}" for a in node.names)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)

    visit(tree.body)
    return out


def _graph() -> dict[str, set[str]]:
    mods = {}
    for p in ROOT.rglob("*.py"):
        mods[_module_name(p)] = p
    g: dict[str, set[str]] = {}
    for name, p in mods.items():
        deps = _top_level_imports(ast.parse(p.read_text()), name, p.name == "__init__.py")
        # an import of a package's member may be a submodule or a name in its __init__
        g[name] = {d for d in deps if d in mods and d != name and not name.startswith(d + ".")}
    return g


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def test_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert _cycles(_graph()) == []
