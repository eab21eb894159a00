"""docs/plugin-reference.md: its generated sections are what the code says today."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from mmaplug import MatmulParams
from mmaplug.errors import UsageError
from mmaplug.plugin_reference import SECTIONS, main, refresh

PAGE = Path(__file__).resolve().parents[1] / "docs" / "plugin-reference.md"
COMMAND = "python -m mmaplug.plugin_reference docs/plugin-reference.md"


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


def test_refusals_quote_the_schedulers_rules(fresh: str) -> None:
    """A refused value is shown with the limit its scheduler states."""
    section = fresh.split("### `warp_specialized`\n", 1)[1].split("###", 1)[0]
    assert "**ampere** (a100): default heuristic: `False`; accepted False; refused True" in section
    assert "**hopper** (h200): default heuristic: `True`; accepted True; refused False" in section


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
    assert f"python -m mmaplug.plugin_reference {page}" in capsys.readouterr().out
    assert main([str(page)]) == 0
    assert main(["--check", str(page)]) == 0
    assert "STALE-TEXT" not in page.read_text()


def test_a_missing_section_is_an_error() -> None:
    """A page without one of the generated sections is refused, naming it."""
    with pytest.raises(UsageError, match="rules"):
        refresh("<!-- generated: accepted -->\n<!-- end generated: accepted -->\n")
