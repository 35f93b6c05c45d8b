"""The import graph of the project's own packages, read from the source (no module is imported).

`import_graph(root)` gives, for every module of `dynamo_lite`, `router`, `planner`
and `connectors`, the project modules it imports: at the top of the file or inside
a function, since a lazy import is still a dependency. `package_graph` folds that
onto packages (`dynamo_lite.frontend`, `router`, ...), for docs/architecture.md and
for the test that keeps imports one way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

TOP_PACKAGES = ("dynamo_lite", "router", "planner", "connectors")
"""The importable top-level packages of this repository."""

LIBRARIES = ("router", "planner", "connectors")
"""Libraries with their own types: they import nothing from `dynamo_lite`, which wires them."""

Graph = dict[str, set[str]]


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterable[str]:
    """Every dotted name an import statement names: `a.b` for `import a.b`, `a.b.c` for `from a.b import c`."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(root: Path) -> Graph:
    """Module -> the project modules it imports.

    A name is mapped to the longest module it starts with: `from a.b import C` (C a
    class) depends on `a.b`, `from a import b` (b a module) on `a.b`.
    """
    files = {module_name(root, p): p for top in TOP_PACKAGES for p in sorted((root / top).rglob("*.py"))}
    graph: Graph = {}
    for module, path in files.items():
        targets: set[str] = set()
        for name in _imported(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def package_of(module: str) -> str:
    """`dynamo_lite.frontend.flow` -> `dynamo_lite.frontend`; `router.index` -> `router`."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "dynamo_lite" and len(parts) > 1 else parts[0]


def package_graph(modules: Mapping[str, set[str]]) -> Graph:
    graph: Graph = {}
    for module, targets in modules.items():
        source = package_of(module)
        graph.setdefault(source, set()).update(package_of(t) for t in targets if package_of(t) != source)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one node (or a node importing itself), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def graph_markdown(graph: Mapping[str, set[str]]) -> str:
    """One line per package: what it imports of the project."""
    lines = ["| package | imports (of this project) |", "|---|---|"]
    for source in sorted(graph):
        targets = ", ".join(f"`{t}`" for t in sorted(graph[source])) or "-"
        lines.append(f"| `{source}` | {targets} |")
    return "\n".join(lines)
