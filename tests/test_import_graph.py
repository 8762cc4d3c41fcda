"""The package's shape: no import cycle among mempp's modules (lazy and type-only imports
included), and no module over 800 lines.

The graph is read from the source with ``ast``, not by importing: every ``import`` and
``from ... import`` anywhere in a module (inside functions and ``if TYPE_CHECKING:`` blocks too)
is an edge, resolved to the module it names (``from mempp.search import fusion`` is an edge to
``mempp.search.fusion``; ``from mempp.importers import get`` to the package ``mempp.importers``).
A parent package that Python initialises on the way is not an edge of its own: that is how
every package's ``__init__`` works, and it is the explicit imports a reader has to follow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_LINES = 800


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(
    name: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]
) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    base = node.module or ""
    if node.level:  # relative: counted from the module's package
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in known else base


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of ``root``'s packages and the modules of theirs it imports."""
    known = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _imported(name, path, node, set(known)):
                    while target and target not in known:  # `import a.b.c` of a name in a.b
                        target = target.rpartition(".")[0]
                    if target and target != name:
                        edges.add(target)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_mempps_modules() -> None:
    graph = import_graph(SRC)
    assert graph.get("mempp.memory")  # the graph was read at all
    assert cycles(graph) == []


def test_the_check_finds_a_cycle_through_a_lazy_and_a_type_only_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""A package."""\n')
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n"
    )
    (package / "c.py").write_text("from . import a\n")
    graph = import_graph(tmp_path)
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
    (package / "c.py").write_text("import os\n")
    assert cycles(import_graph(tmp_path)) == []


def test_no_module_over_800_lines() -> None:
    long = {
        name: lines
        for name, path in modules(SRC).items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}
