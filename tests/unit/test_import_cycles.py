"""No two of the project's modules import each other, directly or around a loop.

import-linter's layers contract orders the packages, but inside one package a
cycle goes unseen: two modules that need each other are one module split in
two files, and whichever is imported first sees the other half-built. The
graph here counts every import a reader sees, including those under
`if TYPE_CHECKING:` and those inside functions, because each of them is a
dependency the design has to explain.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("api", "dra_driver", "cdi", "libvgpu", "kubeletplugin", "controller", "simulator")


def _module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    return {
        _module_name(root, path): path
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
    }


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Each dotted name an import statement names; `from a import b` gives `a.b`."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports (as grimp counts: no edge to parent packages)."""
    modules = _project_modules(root, packages)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, path in modules.items():
        for name in _imported_names(module, path):
            parts = name.split(".")
            # `from a.b import c` reaches a.b.c when that is a module, else a.b's own code.
            for end in range(len(parts), 0, -1):
                target = ".".join(parts[:end])
                if target in modules:
                    if target != module:
                        graph[module].add(target)
                    break
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the groups of modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return groups


def _describe(group: list[str], graph: dict[str, set[str]]) -> str:
    members = set(group)
    edges = [
        f"  {module} -> {target}" for module in group for target in sorted(graph[module] & members)
    ]
    return "cycle among " + ", ".join(group) + ":\n" + "\n".join(edges)


def test_the_graph_sees_type_checking_function_local_and_relative_imports(
    tmp_path: Path,
) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .sub import leaf\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "leaf.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..types import Shape\n"
        "def late():\n    import pkg.late\n"
    )
    (package / "types.py").write_text("from pkg import sub\nfrom . import late\n")
    (package / "late.py").write_text("from pkg.types import *\n")
    graph = _import_graph(tmp_path, ("pkg",))
    assert graph == {
        "pkg": {"pkg.sub.leaf"},
        "pkg.sub": set(),
        "pkg.sub.leaf": {"pkg.types", "pkg.late"},
        "pkg.types": {"pkg.sub", "pkg.late"},
        "pkg.late": {"pkg.types"},
    }
    assert _strongly_connected(graph) == [["pkg.late", "pkg.types"]]


def test_no_import_cycles_between_project_modules() -> None:
    graph = _import_graph()
    cycles = _strongly_connected(graph)
    assert not cycles, "\n".join(_describe(group, graph) for group in cycles)
