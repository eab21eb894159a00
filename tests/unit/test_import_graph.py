"""The modules of core/ import each other without a cycle (type-only and local imports count)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core"


def imports(path: Path, modules: set[str]) -> set[str]:
    """The core modules *path* imports anywhere (``from .x``, ``from . import x``, mmaplug.x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level == 1 or (node.level == 0 and parts[0] == "mmaplug"):
                head = parts[1:] if node.level == 0 else parts
                if head and head[0]:
                    found.add(head[0])
                else:  # from . import x, y
                    found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "mmaplug" and len(parts) > 1:
                    found.add(parts[1])
    return (found & modules) - {path.stem}


def graph() -> dict[str, set[str]]:
    modules = {p.stem for p in CORE.glob("*.py")}
    return {p.stem: imports(p, modules) for p in sorted(CORE.glob("*.py"))}


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


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from .manager import x", {"manager"}),
        ("from . import manager, plan", {"manager", "plan"}),
        ("def f():\n    from .translate import g", {"translate"}),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .analysis import A",
            {"analysis"},
        ),
        ("import mmaplug.patterns", {"patterns"}),
        ("from mmaplug.plan import p", {"plan"}),
        ("from .cuda.tensors import t\nimport numpy", set()),
    ],
    ids=[
        "relative",
        "package",
        "function_local",
        "type_checking",
        "absolute",
        "absolute_from",
        "other",
    ],
)
def test_every_import_form_is_seen(tmp_path, source, expected):
    """The parser sees relative, absolute, function-local and TYPE_CHECKING imports."""
    module = tmp_path / "mod.py"
    module.write_text(source)
    known = {"manager", "plan", "translate", "analysis", "patterns"}
    assert imports(module, known) == expected


def test_a_cycle_is_reported_as_a_path():
    """find_cycle names the modules of a cycle in order."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []
