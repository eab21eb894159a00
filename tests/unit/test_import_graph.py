"""The modules of core/ import each other without a cycle (type-only and local imports count)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core"


def module_name(path: Path) -> str:
    """The dotted name of a file under core/ (``core/ir/fusion.py`` is ``mmaplug.ir.fusion``)."""
    parts = [p for p in path.relative_to(CORE).with_suffix("").parts if p != "__init__"]
    return ".".join(["mmaplug", *parts])


def imports(path: Path, modules: set[str]) -> set[str]:
    """The core modules *path* imports anywhere: absolute, relative, local or type-only."""
    return imports_at(path, path, modules)


def imports_at(source: Path, path: Path, modules: set[str]) -> set[str]:
    """``imports`` of the text of *source* as if it were the core file *path*."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
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


def graph() -> dict[str, set[str]]:
    files = sorted(CORE.rglob("*.py"))
    modules = {module_name(p) for p in files}
    return {module_name(p): imports(p, modules) for p in files}


def find_cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle as a path (first module repeated at the end), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for dep in sorted(edges[module]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[module] = 2
        return []

    for module in sorted(edges):
        if module not in state and (cycle := visit(module)):
            return cycle
    return []


def test_core_imports_form_no_cycle():
    """No core module reaches itself through imports, counted wherever they are written."""
    cycle = find_cycle(graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def package_of(module: str, packages: Iterable[str]) -> str | None:
    """The one of *packages* that is *module* or holds it, else None."""
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def crossings(
    edges: dict[str, set[str]], packages: Iterable[str]
) -> dict[tuple[str, str], list[str]]:
    """The imports from one of *packages* into another: (importer's package, imported's
    package) -> the module edges ("a -> b"), sorted."""
    packages = tuple(packages)
    found: dict[tuple[str, str], list[str]] = {}
    for module, deps in sorted(edges.items()):
        source = package_of(module, packages)
        for dep in sorted(deps):
            target = package_of(dep, packages)
            if source and target and source != target:
                found.setdefault((source, target), []).append(f"{module} -> {dep}")
    return found


def test_cuda_and_sim_depend_one_way():
    """mmaplug.cuda imports mmaplug.sim and sim imports nothing of cuda (imports counted
    wherever they are written), as the two packages' docstrings say."""
    cuda, sim = "mmaplug.cuda", "mmaplug.sim"
    found = crossings(graph(), (cuda, sim))
    assert not ((cuda, sim) in found and (sim, cuda) in found), f"both ways: {found}"
    assert (sim, cuda) not in found, "sim imports cuda: " + ", ".join(found[sim, cuda])


def test_crossings_name_each_package_edge():
    """crossings groups the module edges between packages by direction, ignoring the rest."""
    edges = {
        "p.a": {"p.b", "q.c"},
        "p.b": set(),
        "q.c": {"p", "r.d"},
        "q": set(),
        "p": set(),
        "r.d": set(),
    }
    assert crossings(edges, ("p", "q")) == {
        ("p", "q"): ["p.a -> q.c"],
        ("q", "p"): ["q.c -> p"],
    }
    assert package_of("pq.x", ("p", "pq")) == "pq"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from .plan import x", {"mmaplug.planning.plan"}),
        ("from . import manager, plan", {"mmaplug.planning.manager", "mmaplug.planning.plan"}),
        ("from ..ir import fusion", {"mmaplug.ir.fusion"}),
        ("def f():\n    from mmaplug.analysis.translate import g", {"mmaplug.analysis.translate"}),
        (
            "import typing\nif typing.TYPE_CHECKING:\n    from mmaplug.ir import fusion",
            {"mmaplug.ir.fusion"},
        ),
        ("import mmaplug.analysis.patterns", {"mmaplug.analysis.patterns"}),
        ("from mmaplug.planning.plan import p\nimport numpy", {"mmaplug.planning.plan"}),
    ],
    ids=["relative", "package", "parent", "function_local", "type_checking", "absolute", "other"],
)
def test_every_import_form_is_seen(tmp_path, source, expected):
    """The parser sees relative, absolute, function-local and TYPE_CHECKING imports."""
    module = CORE / "planning" / "probe_module.py"
    known = {
        "mmaplug.planning.plan",
        "mmaplug.planning.manager",
        "mmaplug.ir.fusion",
        "mmaplug.analysis.translate",
        "mmaplug.analysis.patterns",
    }
    path = tmp_path / "probe_module.py"
    path.write_text(source)
    assert imports_at(path, module, known) == expected


def test_a_cycle_is_reported_as_a_path():
    """find_cycle names the modules of a cycle in order."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []
