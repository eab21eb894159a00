"""The import graph of core/: modules, the packages they form, cycles and the longest chain.

    python scripts/import_graph.py [CORE_DIR]            # summary and a mermaid package graph
    python scripts/import_graph.py CORE_DIR --modules    # every module's imports

Every import counts wherever it is written (module level, inside a function, under
TYPE_CHECKING): each is a dependency a reader has to hold. ``from pkg import sub`` counts as an
import of ``pkg.sub`` only; the package's ``__init__`` is not a dependency of its own modules.
tests/unit/test_import_graph.py holds core/ to the rules in docs/architecture.md with it.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Mapping
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core"
BASE = "base"  # modules directly in core/ that every stage uses and that import no stage
BASE_MODULES = frozenset({"errors", "env", "log", "markers", "moved", "progress"})
API = "api"  # the other modules directly in core/: the public surfaces (__init__, testing...)


def module_name(path: Path, core: Path = CORE) -> str:
    """The dotted name of a file under *core* (``core/ir/fusion.py`` is ``mmaplug.ir.fusion``)."""
    parts = [p for p in path.relative_to(core).with_suffix("").parts if p != "__init__"]
    return ".".join(["mmaplug", *parts])


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return found


def imports_at(
    source: Path, path: Path, modules: set[str], core: Path = CORE, *, runtime: bool = False
) -> set[str]:
    """The core modules the text of *source* imports, read as if it were the core file *path*
    (with *runtime*, the imports that run: those under ``TYPE_CHECKING`` left out)."""
    name = module_name(path, core)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(source.read_text(), str(source))
    skip = _type_only(tree) if runtime else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            named = {f"{target}.{alias.name}" for alias in node.names}
            found.update(named)
            if not named <= modules:  # a name from the module itself, not only its submodules
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return (found & modules) - {name}


def graph(core: Path = CORE, *, runtime: bool = False) -> dict[str, set[str]]:
    """Each module of *core* and the core modules it imports (*runtime*: ``imports_at``)."""
    files = sorted(core.rglob("*.py"))
    modules = {module_name(p, core) for p in files}
    return {module_name(p, core): imports_at(p, p, modules, core, runtime=runtime) for p in files}


def package_of(module: str, edges: Mapping[str, set[str]]) -> str:
    """The subpackage of core a module belongs to (``ir``, ``cuda``...), BASE or API."""
    parts = module.split(".")
    if len(parts) > 2:
        return parts[1]
    if len(parts) == 2 and any(m.startswith(module + ".") for m in edges):
        return parts[1]  # the package's own __init__
    return BASE if parts[-1] in BASE_MODULES else API


def package_graph(edges: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the packages its modules import (within-package imports left out)."""
    result: dict[str, set[str]] = {}
    for module, deps in edges.items():
        mine = package_of(module, edges)
        result.setdefault(mine, set()).update(
            p for d in deps if (p := package_of(d, edges)) != mine
        )
    return result


def find_cycle(edges: Mapping[str, set[str]]) -> list[str]:
    """One import cycle as a path (first node repeated at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in sorted(edges[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def longest_chain(edges: Mapping[str, set[str]]) -> list[str]:
    """The longest import chain of an acyclic graph (a module, what it imports, ...)."""

    @functools.cache
    def chain(node: str) -> tuple[str, ...]:
        return (node, *max((chain(d) for d in edges[node]), key=len, default=()))

    return list(max((chain(n) for n in edges), key=len, default=()))


def mermaid(packages: Mapping[str, set[str]]) -> str:
    """A mermaid flowchart of the package graph (edges to BASE left out: every package uses it)."""
    lines = ["flowchart TD"]
    for package in sorted(packages):
        for dep in sorted(packages[package] - {BASE}):
            lines.append(f"    {package} --> {dep}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    core = Path(argv[0]).resolve() if argv and not argv[0].startswith("-") else CORE
    edges = graph(core)
    if "--modules" in argv:
        for module in sorted(edges):
            print(module, "->", " ".join(sorted(edges[module])))
        return 0
    running = graph(core, runtime=True)
    packages = package_graph(running)
    cycle = find_cycle(edges)
    print(f"{len(edges)} modules in {len(packages)} packages")
    print("module cycle:", " -> ".join(cycle) if cycle else "none")
    package_cycle = find_cycle(packages)
    print(
        "package cycle (imports that run):", " -> ".join(package_cycle) if package_cycle else "none"
    )
    if not find_cycle(running):
        chain = longest_chain(running)
        print(f"longest chain of imports that run ({len(chain)} modules):", " -> ".join(chain))
    print(mermaid(packages))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
