"""core/'s import graph holds to docs/architecture.md: no module reaches itself through imports
(type-only and local ones count), and each package's imports that run point only to the
packages below it, in the order of ``LAYERS``. The graph is scripts/import_graph.py's."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))
import import_graph as ig  # noqa: E402 (scripts/ is not a package)

#: The packages of core/, lowest first: a package's imports that run may name only packages
#: before it (docs/architecture.md, "Who may import whom").
LAYERS = (
    ig.BASE,
    "ir",
    "hooks",
    "analysis",
    "codegen",
    "sim",
    "cuda",
    "planning",
    "runtime",
    "tune",
    "cli",
    ig.API,
)


#: core/'s graphs, parsed once for this module: all imports, and the imports that run
ALL = functools.cache(ig.graph)
RUNNING = functools.cache(lambda: ig.graph(runtime=True))


def test_core_imports_form_no_cycle() -> None:
    """No core module reaches itself through imports, counted wherever they are written."""
    cycle = ig.find_cycle(ALL())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_every_package_is_placed_in_the_layers() -> None:
    assert set(ig.package_graph(RUNNING())) == set(LAYERS)


@pytest.mark.parametrize("package", LAYERS)
def test_a_package_imports_only_the_layers_below(package: str) -> None:
    """The imports that run go down the layers; each one that does not is named."""
    edges = RUNNING()
    below = set(LAYERS[: LAYERS.index(package)])
    upward = sorted(
        f"{module} -> {dep}"
        for module, deps in edges.items()
        if ig.package_of(module, edges) == package
        for dep in deps
        if ig.package_of(dep, edges) not in below | {package}
    )
    assert not upward, f"{package} imports above its layer: {upward}"


def test_sim_imports_nothing_of_cuda_even_locally() -> None:
    """The simulator's emulation is opt-in: cuda binds it, sim never reaches back."""
    edges = ALL()
    back = [
        f"{m} -> {d}"
        for m, deps in edges.items()
        if ig.package_of(m, edges) == "sim"
        for d in deps
        if ig.package_of(d, edges) == "cuda"
    ]
    assert not back, back


PLAN = "mmaplug.planning.plan"
TRANSLATE = "mmaplug.analysis.translate"
TYPE_ONLY = "import typing\nif typing.TYPE_CHECKING:\n    from mmaplug.ir import fusion"


@pytest.mark.parametrize(
    ("source", "expected", "runtime"),
    [
        ("from .plan import x", {"mmaplug.planning.plan"}, False),
        ("from . import plan, planner", {PLAN, "mmaplug.planning.planner"}, False),
        ("from ..ir import fusion", {"mmaplug.ir.fusion"}, False),
        ("def f():\n    from mmaplug.analysis.translate import g", {TRANSLATE}, True),
        (TYPE_ONLY, {"mmaplug.ir.fusion"}, False),
        (TYPE_ONLY, set(), True),
        ("import mmaplug.analysis.patterns", {"mmaplug.analysis.patterns"}, False),
        ("from mmaplug.planning.plan import p\nimport numpy", {"mmaplug.planning.plan"}, True),
    ],
    ids=["relative", "package", "parent", "function_local", "type_checking", "type_only_skipped",
         "absolute", "other"],
)  # fmt: skip
def test_every_import_form_is_seen(
    tmp_path: Path, source: str, expected: set[str], runtime: bool
) -> None:
    """Relative, absolute, function-local and TYPE_CHECKING imports (the last left out when
    only the imports that run are asked for)."""
    known = {
        "mmaplug.planning.plan",
        "mmaplug.planning.planner",
        "mmaplug.ir.fusion",
        "mmaplug.analysis.translate",
        "mmaplug.analysis.patterns",
    }
    path = tmp_path / "probe_module.py"
    path.write_text(source)
    as_if = ig.CORE / "planning" / "probe_module.py"
    assert ig.imports_at(path, as_if, known, runtime=runtime) == expected


def test_a_cycle_is_reported_as_a_path() -> None:
    """find_cycle names the modules of a cycle in order."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert ig.find_cycle(edges) == ["a", "b", "c", "a"]
    assert ig.find_cycle({"a": {"b"}, "b": set()}) == []


def test_package_of_places_top_modules_in_base_or_api() -> None:
    edges = {"mmaplug.errors": set(), "mmaplug.testing": set(), "mmaplug.ir.fusion": set(),
             "mmaplug.ir": set()}  # fmt: skip
    assert [ig.package_of(m, edges) for m in edges] == [ig.BASE, ig.API, "ir", "ir"]


def test_the_architecture_page_draws_this_graph() -> None:
    """docs/architecture.md's flowchart has exactly the package edges of the code."""
    page = (SCRIPTS.parent / "docs" / "architecture.md").read_text()
    chart = page.split("```mermaid\n", 1)[1].split("```", 1)[0]
    drawn = {line.strip() for line in chart.splitlines()[1:] if "-->" in line}
    actual = {line.strip() for line in ig.mermaid(ig.package_graph(RUNNING())).splitlines()[1:]}
    assert drawn == actual, (sorted(drawn - actual), sorted(actual - drawn))
