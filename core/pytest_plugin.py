"""The ``mmaplug`` pytest plugin: fixtures ``mmaplug_pm`` and ``mmaplug_recorder``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .manager import PluginManager
    from .testing import HookRecorder


@pytest.fixture
def mmaplug_pm() -> PluginManager:
    """A hermetic, strict plugin manager: the built-in plugins only, no entry points."""
    from .manager import make_plugin_manager  # imported late: pytest loads this plugin early

    return make_plugin_manager(load_entrypoints=False, strict=True)


@pytest.fixture
def mmaplug_recorder(mmaplug_pm: PluginManager) -> Iterator[HookRecorder]:
    """A ``HookRecorder`` on ``mmaplug_pm``, recording for the whole test."""
    from .testing import HookRecorder

    with HookRecorder(mmaplug_pm) as recorder:
        yield recorder
