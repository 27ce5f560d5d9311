"""No import cycles between lenpred's modules, nor between its packages, counting every import wherever
it is written; and the layers the package keeps: the router does not import the simulator, and the
scheduling both share imports neither.

Module-level imports count, ``if TYPE_CHECKING:`` imports count (a module that needs another's types
to describe what it receives from it is coupled to it both ways), and imports inside functions count
too: a lazy import keeps start-up cheap, it does not make two modules independent. The one exception
is an explicit allow-list of lazy imports through which a registry loads a plug-in by its name
(:data:`LAZY_BY_NAME`): such an edge may close a cycle, and nothing else may.

Packages are the nodes ``lenpred.<name>`` (a top-level module is its own node): package A imports B
when any module of A imports any module of B. :data:`PACKAGE_EDGES_TO_REMOVE` names the package
imports that still close a cycle while they are being untangled; the list may only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lenpred

ROOT = Path(lenpred.__file__).parent

# (importer, imported): function-level imports that load a plug-in by its registry name
LAZY_BY_NAME = {
    # a saved head names its class by registry key; loading one looks the key up in the registry,
    # which imports every head (a head that loads other heads must not make that a cycle)
    ("lenpred.predictors.io", "lenpred.predictors.registry"),
    # (the trajectory head, lenpred.outlets.head, adds itself to the predictor registry when imported; the
    # commands import it, lenpred.commands.heads: lenpred.predictors does not name lenpred.outlets, issue 39)
}


# (importer, imported) packages: the imports that still close a package cycle while they are untangled
# (none left: outlets returns data and commands call report; the predictor registry loads outlets' head
# by name)
PACKAGE_EDGES_TO_REMOVE: set[tuple[str, str]] = set()
# what the scheduling package may import: the simulator and the router import it, never the reverse
# (lenpred.config: the config base of its policies' typed parameters, lenpred.sched.queue / params; it imports
# only lenpred.errors. lenpred.stats: the normal quantile Z90, lenpred.stats.quantiles)
SCHED_MAY_IMPORT = {"lenpred.config", "lenpred.errors", "lenpred.registry", "lenpred.stats"}


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.Module, name: str, is_pkg: bool, package: str) -> dict[str, bool]:
    """Modules of ``package`` that the module ``name`` imports -> True when every import of it is
    inside a function (lazy), False when one is at module level (or under ``if`` / ``try`` there)."""
    out: dict[str, bool] = {}

    def add(mods: set[str], lazy: bool) -> None:
        for m in mods:
            out[m] = out.get(m, True) and lazy

    def targets(node: ast.Import | ast.ImportFrom) -> set[str]:
        if isinstance(node, ast.Import):
            return {a.name for a in node.names if a.name.split(".")[0] == package}
        if node.level:  # relative import
            base = name.split(".") if is_pkg else name.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            mod = ".".join(base + ([node.module] if node.module else []))
        else:
            mod = node.module or ""
        if mod.split(".")[0] != package:
            return set()
        return {mod} | {f"{mod}.{a.name}" for a in node.names}

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                add(targets(child), lazy)
            else:
                inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                visit(child, inner)

    visit(tree, False)
    return out


def _graph(root: Path = ROOT, allowed: set[tuple[str, str]] = LAZY_BY_NAME) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (anywhere), less the allow-listed lazy edges."""
    mods = {_module_name(p, root): p for p in root.rglob("*.py")}
    g: dict[str, set[str]] = {}
    for name, p in mods.items():
        deps = _imports(ast.parse(p.read_text(encoding="utf-8")), name, p.name == "__init__.py", root.name)
        # an import of a package's member may be a submodule or a name in its __init__
        g[name] = {d for d, lazy in deps.items() if d in mods and d != name and not name.startswith(d + ".")
                   and not (lazy and (name, d) in allowed)}
    return g


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
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


def _package_of(module: str, root: str = "lenpred") -> str:
    """``lenpred.sim.engine`` -> ``lenpred.sim``; a top-level module (``lenpred.errors``) is its own node."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == root else module


def _packages(g: dict[str, set[str]], root: str = "lenpred") -> dict[str, set[str]]:
    """The module graph collapsed onto packages (imports within a package dropped)."""
    out: dict[str, set[str]] = {}
    for a, deps in g.items():
        pa = _package_of(a, root)
        out.setdefault(pa, set()).update(pd for pd in (_package_of(d, root) for d in deps) if pd != pa)
    return out


def _reachable(g: dict[str, set[str]], start: str) -> set[str]:
    """Every node ``start`` imports, directly or through others."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        for w in g.get(stack.pop(), ()):
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


def _without(g: dict[str, set[str]], edges: set[tuple[str, str]]) -> dict[str, set[str]]:
    return {a: {b for b in deps if (a, b) not in edges} for a, deps in g.items()}


def _package(tmp: Path, files: dict[str, str]) -> Path:
    root = tmp / "planted"
    for rel, text in {"__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_cycle_finder_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_cycle_through_an_import_inside_a_function_is_caught(tmp_path):
    root = _package(tmp_path, {
        "base.py": "def save():\n    from planted.io import write\n    return write()\n",
        "io.py": "from planted.base import save\n\ndef write():\n    return 1\n",
        "sub/__init__.py": "",
        "sub/leaf.py": "from . import helper\n",
        "sub/helper.py": "import planted.io\n",
    })
    assert _cycles(_graph(root, set())) == [["planted.base", "planted.io"]]


def test_type_checking_and_method_imports_count_too(tmp_path):
    root = _package(tmp_path, {
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted.b import B\n",
        "b.py": "class B:\n    def go(self):\n        import planted.c\n",
        "c.py": "import planted.a\n",
    })
    assert _cycles(_graph(root, set())) == [["planted.a", "planted.b", "planted.c"]]


def test_only_a_lazy_allow_listed_edge_is_excused(tmp_path):
    lazy = {"reg.py": "from planted.head import Head\n",
            "head.py": "def load(name):\n    from planted.reg import Head\n"}
    root = _package(tmp_path, lazy)
    assert _cycles(_graph(root, set())) == [["planted.head", "planted.reg"]]
    assert _cycles(_graph(root, {("planted.head", "planted.reg")})) == []
    eager = _package(tmp_path / "eager", {"reg.py": "from planted.head import Head\n",
                                           "head.py": "from planted.reg import Head\n"})
    assert _cycles(_graph(eager, {("planted.head", "planted.reg")})) == [["planted.head", "planted.reg"]]


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_allow_list_names_real_lazy_imports():
    g = _graph(allowed=set())
    assert all(b in g.get(a, set()) for a, b in LAZY_BY_NAME)


def test_packages_collapse_the_module_graph(tmp_path):
    root = _package(tmp_path, {
        "a/__init__.py": "", "a/x.py": "import planted.b.y\n", "a/z.py": "from planted.a import x\n",
        "b/__init__.py": "", "b/y.py": "from planted import top\n", "top.py": "",
    })
    assert _packages(_graph(root, set()), "planted") == {
        "planted": set(), "planted.a": {"planted.b"}, "planted.b": {"planted.top"}, "planted.top": set()}
    assert _cycles(_packages({"p.a.x": {"p.b.y"}, "p.b.y": {"p.c"}, "p.c": {"p.a.z"}}, "p")) == [["p.a", "p.b", "p.c"]]


def test_no_package_cycles():
    assert _cycles(_without(_packages(_graph()), PACKAGE_EDGES_TO_REMOVE)) == []


def test_the_package_edges_to_remove_are_real():
    g = _packages(_graph())
    assert all(b in g.get(a, set()) for a, b in PACKAGE_EDGES_TO_REMOVE)


def test_the_router_does_not_import_the_simulator():
    g = _packages(_graph())
    assert "lenpred.sim" not in g["lenpred.route"]
    assert "lenpred.sim" not in _reachable(_without(g, PACKAGE_EDGES_TO_REMOVE), "lenpred.route")  # nor through others


def test_scheduling_imports_neither_the_simulator_nor_the_router():
    g = _packages(_graph())
    assert g["lenpred.sched"] <= SCHED_MAY_IMPORT
    assert not {"lenpred.sim", "lenpred.route"} & _reachable(g, "lenpred.sched")
    # nor a predictor or OUTLETS (Z90 lives in lenpred.stats.quantiles, which imports no lenpred module)
    assert not {"lenpred.predictors", "lenpred.outlets"} & _reachable(g, "lenpred.sched")
    assert _reachable(_graph(), "lenpred.stats.quantiles") == set()


def test_predictors_do_not_import_outlets():
    assert "lenpred.outlets" not in _reachable(_packages(_graph(allowed=set())), "lenpred.predictors")
