"""Every runnable example runs to completion (planning only on a machine without a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script: Path) -> None:
    """The example exits 0 and prints the problem it planned."""
    env = dict(os.environ, MMAPLUG_DISABLE_PLUGIN_AUTOLOAD="1")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "precision=HSH" in done.stdout and "kernel" in done.stdout


PACKAGES = sorted(p.parent for p in (EXAMPLES[0].parent).glob("*/pyproject.toml"))


@pytest.mark.parametrize("package", PACKAGES, ids=[p.name for p in PACKAGES])
def test_example_package_is_a_documented_plugin(package: Path) -> None:
    """Each example package has a README and an ``mmaplug`` entry point naming a module of its
    ``src/`` whose hooks are marked (a strict manager accepts it, from the source tree)."""
    import importlib.util
    import tomllib

    import mmaplug as mp

    assert (package / "README.md").is_file()
    meta = tomllib.loads((package / "pyproject.toml").read_text())
    points = meta["project"]["entry-points"]["mmaplug"]
    assert points, f"{package.name}: no [project.entry-points.mmaplug]"
    for name, module in points.items():
        init = package / "src" / module.replace(".", "/") / "__init__.py"
        assert init.is_file(), f"{package.name}: entry point {name} = {module}: no {init}"
        spec = importlib.util.spec_from_file_location(f"_example_{name}", init)
        assert spec is not None and spec.loader is not None
        plugin = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(plugin)
        pm = mp.make_plugin_manager(plugins=[plugin], load_entrypoints=False, strict=True)
        hooks = [h for h in dir(plugin) if h.startswith("mmaplug_")]
        assert hooks and all(pm.hook.__dict__[h].get_hookimpls() for h in hooks), name
