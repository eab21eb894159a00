"""The 0.1 module paths keep working for one release (``mmaplug.moved``), each with a warning."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import mmaplug as mp
from mmaplug.moved import BECAME_PACKAGES, MOVED


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    """Run *code* in a new interpreter with every DeprecationWarning shown once."""
    return subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_old_path_gives_the_new_module_and_names_it_at_the_import_line() -> None:
    """``import mmaplug.params`` is mmaplug.planning.params; the warning points at the import."""
    done = _fresh("import mmaplug.params as p, mmaplug.planning.params as q; assert p is q")
    assert done.returncode == 0, done.stderr
    assert "<string>:1: DeprecationWarning: mmaplug.params moved to mmaplug.planning.params" in (
        done.stderr
    )


def test_an_old_module_that_became_a_package_keeps_its_names() -> None:
    """``from mmaplug.analysis import MatmulAnalysis`` works, warning once."""
    done = _fresh(
        "from mmaplug.analysis import MatmulAnalysis; import mmaplug as mp\n"
        "assert MatmulAnalysis is mp.MatmulAnalysis"
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("DeprecationWarning") == 1, done.stderr
    assert "mmaplug.analysis.matmul_analysis.MatmulAnalysis" in done.stderr


def test_new_paths_and_submodules_of_those_packages_warn_nothing() -> None:
    """Submodules of analysis/cli/codegen import as themselves, silently."""
    done = _fresh(
        "from mmaplug.cli import main, bench\nfrom mmaplug.analysis import patterns\n"
        "import types; assert isinstance(main, types.ModuleType)"
    )
    assert done.returncode == 0, done.stderr
    assert "DeprecationWarning" not in done.stderr, done.stderr


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_path_resolves(old: str) -> None:
    """Each entry of the table names a module that exists (a typo would be a dead alias)."""
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {MOVED[old]}"):
        sys.modules.pop(old, None)
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])


def test_public_functions_are_not_replaced_by_modules() -> None:
    """compile, evaluate and prebuild stay the functions (no alias for their old modules)."""
    assert not {"mmaplug.compile", "mmaplug.evaluate", "mmaplug.prebuild"} & set(MOVED)
    assert callable(mp.compile) and callable(mp.evaluate) and callable(mp.prebuild)
    assert set(BECAME_PACKAGES) == {"mmaplug.analysis", "mmaplug.codegen", "mmaplug.cli"}


def test_an_unknown_name_of_a_former_module_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        importlib.import_module("mmaplug.analysis").nothing_here  # noqa: B018
