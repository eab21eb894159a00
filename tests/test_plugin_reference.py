"""docs/plugin-reference.md: its generated sections are what the code says today."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

import mmaplug
from mmaplug import MatmulParams
from mmaplug.analysis.problem import MatmulProblem
from mmaplug.errors import UsageError
from mmaplug.planning.choices import Adjustment, KernelSpec
from mmaplug.planning.device import Device
from mmaplug.planning.plugin_reference import SECTIONS, main, refresh
from mmaplug.planning.scheduler import Resources, Rule, Space

PAGE = Path(__file__).resolve().parents[1] / "docs" / "plugin-reference.md"
COMMAND = "python -m mmaplug.planning.plugin_reference docs/plugin-reference.md"


@pytest.fixture(scope="module")
def fresh() -> str:
    """The page with every generated section written now."""
    return refresh(PAGE.read_text())


def test_the_page_is_fresh(fresh: str) -> None:
    """The committed page is what the generator writes; refresh it with the command."""
    assert fresh == PAGE.read_text(), f"docs/plugin-reference.md is stale: run `{COMMAND}`"


def test_every_field_has_its_section(fresh: str) -> None:
    """Each MatmulParams field has a heading with a line per scheduler."""
    for field in attrs.fields(MatmulParams):
        section = fresh.split(f"### `{field.name}`\n", 1)[1].split("###", 1)[0]
        assert "- **ampere** (a100):" in section and "- **hopper** (h200):" in section


def test_each_scheduler_states_its_space_and_rules(fresh: str) -> None:
    """A field's line per scheduler quotes its space, the default's choice and its rules."""
    section = fresh.split("### `warp_specialized`\n", 1)[1].split("###", 1)[0]
    assert (
        "**ampere** (a100): accepts `False`; default heuristic `False`; rules: `False`." in section
    )
    assert "**hopper** (h200): accepts `True`; default heuristic `True`; rules: `True`." in section


def _toy_rule(params: MatmulParams, problem: MatmulProblem, device: Device) -> str | None:
    return None if params.stages % 2 else f"toy runs odd stages, not {params.stages}"


class Toy:
    """A third scheduler: it reads two fields and states one rule."""

    name = "toy"
    priority = 0

    def accepts(self, problem: MatmulProblem, device: Device) -> str | None:
        return None if problem.horizontal == 1 else "toy runs one matmul"

    def space(self, problem: MatmulProblem, device: Device) -> Sequence[Space]:
        return [
            Space("stages", "3 or 5 (toy)", values=(3, 5), examples=(3,)),
            Space("cta_tile", "m == 64 (toy)", accepts=lambda t: getattr(t, "m", 0) == 64),
        ]

    def rules(self, problem: MatmulProblem, device: Device) -> Sequence[Rule]:
        return [Rule("stages", "odd (toy)", _toy_rule)]

    def resources(self, params: MatmulParams, problem: MatmulProblem) -> Resources:
        return Resources(smem_bytes=0, threads=32)

    def adjustments(
        self, params: MatmulParams, problem: MatmulProblem, device: Device
    ) -> Sequence[Adjustment]:
        return ()

    def build(self, spec: KernelSpec, analysis: object) -> object:
        raise NotImplementedError


class ToyPlugin:
    """Registers Toy."""

    @mmaplug.hookimpl
    def mmaplug_schedulers(self) -> list[Toy]:
        return [Toy()]


def test_a_registered_scheduler_appears(fresh: str) -> None:
    """A scheduler a plugin registers is listed field by field and with its rules, from its
    space and rules alone; the built-in ones are as before."""
    pm = mmaplug.make_plugin_manager(plugins=[ToyPlugin()], load_entrypoints=False)
    text = refresh(PAGE.read_text(), pm=pm)
    stages = text.split("### `stages`\n", 1)[1].split("###", 1)[0]
    assert (
        "- **toy** (h200): accepts `3 or 5 (toy)`; values 3, 5; tuner tries 3; rules: `odd (toy)`."
        in stages
    )
    cluster = text.split("### `cluster_dims`\n", 1)[1].split("###", 1)[0]
    assert "- **toy** (h200): not read (any value)." in cluster
    rules = text.split("<!-- generated: rules", 1)[1].split("<!-- end generated: rules", 1)[0]
    assert f"**toy** (h200; `{Toy.__module__}`):" in rules
    assert "| `stages` | odd (toy) | ✓ | ✓ |\n" in rules  # TN and NT; not the horizontal fusion
    for line in fresh.splitlines():  # every line about ampere or hopper is unchanged
        if line.startswith(("- **ampere**", "- **hopper**", "**ampere**", "**hopper**")):
            assert line in text.splitlines()


def test_check_mode_names_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--check exits 1 on a stale page and says how to refresh it; the refresh fixes it."""
    page = tmp_path / "page.md"
    page.write_text(
        "".join(
            f"<!-- generated: {name} -->\nSTALE-TEXT\n<!-- end generated: {name} -->\n"
            for name in SECTIONS
        )
    )
    assert main(["--check", str(page)]) == 1
    assert f"python -m mmaplug.planning.plugin_reference {page}" in capsys.readouterr().out
    assert main([str(page)]) == 0
    assert main(["--check", str(page)]) == 0
    assert "STALE-TEXT" not in page.read_text()


def test_a_missing_section_is_an_error() -> None:
    """A page without one of the generated sections is refused, naming it."""
    with pytest.raises(UsageError, match="rules"):
        refresh("<!-- generated: accepted -->\n<!-- end generated: accepted -->\n")
