"""No import cycle anywhere in the package, counting imports inside functions.

A function-level import hides a cycle from Python at load time but not from the reader: the
modules still depend on each other, and a later edit that hoists the import turns it into a
partially-initialised-module error. So every ``import`` statement counts, wherever it sits,
except those under ``if TYPE_CHECKING:`` (they never run). ``from a import b`` is an edge to
``a.b`` when that is a module of the package, else to ``a``; a package's ``__init__`` is the
module named by the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1] / "tracescale"


def _module_names(root: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (packages by their ``__init__``)."""
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree``, nested ones included, skipping TYPE_CHECKING blocks."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _resolve(
    node: ast.Import | ast.ImportFrom, here: str, is_pkg: bool, known: set[str]
) -> set[str]:
    """The package modules one import statement in module ``here`` depends on."""

    def owner(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    targets: list[str] = []
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = here.split(".") if is_pkg else here.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            targets.append(sub if sub in known else base)
    return {o for o in map(owner, targets) if o is not None and o != here}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package modules it imports, at any depth of its source."""
    names = _module_names(root)
    known = set(names)
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_pkg = path.name == "__init__.py"
        graph[name] = set()
        for node in _imports(tree):
            graph[name] |= _resolve(node, name, is_pkg, known)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


# Edges that still close a cycle through the root package: these modules read
# ``tracescale.__version__`` / ``__file__`` from ``tracescale/__init__``, whose lazy ``__getattr__``
# imports ``api`` -> ``pipeline`` -> ... back to them. The fix is a leaf version module; until it
# lands they are listed here, and the second assertion makes whoever removes one drop its entry.
PENDING_EDGES: frozenset[tuple[str, str]] = frozenset(
    {
        ("tracescale.study", "tracescale"),
        ("tracescale.parallel.cache", "tracescale"),
        ("tracescale.parallel.study_cache", "tracescale"),
    }
)


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "tracescale.report.render" in graph  # the walk found the package
    pruned = {m: {t for t in ts if (m, t) not in PENDING_EDGES} for m, ts in graph.items()}
    assert cycles(pruned) == []
    assert {(m, t) for m, t in PENDING_EDGES if t in graph.get(m, set())} == PENDING_EDGES


def test_the_checker_sees_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "tracescale"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from tracescale.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tracescale.sub import b\n"
        "def g():\n    import tracescale.sub.a\n"
    )
    (pkg / "leaf.py").write_text("if TYPE_CHECKING:\n    from tracescale.sub import a\n")
    graph = import_graph(pkg)
    assert graph["tracescale.sub.b"] == {"tracescale.sub.c"}
    assert graph["tracescale.leaf"] == set()
    assert cycles(graph) == [["tracescale.sub.a", "tracescale.sub.b", "tracescale.sub.c"]]
