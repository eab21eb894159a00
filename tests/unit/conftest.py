"""Unit tier fixtures: the device scripts under ``scripts/`` loaded as modules."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).parents[2] / "scripts"


@pytest.fixture(scope="module")
def load_script() -> Callable[[str], ModuleType]:
    """``load_script("ffn_probe")``: ``scripts/ffn_probe.py`` as a module (its imports at module
    level must need neither torch nor a GPU), with ``scripts/`` first on ``sys.path`` as
    ``python scripts/ffn_probe.py`` has it, so a script imports its neighbours."""

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        with pytest.MonkeyPatch.context() as patch:
            patch.syspath_prepend(str(SCRIPTS))
            spec.loader.exec_module(module)
        return module

    return load
