"""The ``mmaplug`` pytest plugin: fixtures ``mmaplug_pm``, ``mmaplug_recorder``; marker ``gpu``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from mmaplug.hooks.manager import PluginManager
    from mmaplug.testing import HookRecorder


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``gpu`` marker, so plugin authors can use it under ``--strict-markers``."""
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped when none is found)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test marked ``gpu`` on a machine without a CUDA GPU."""
    if item.get_closest_marker("gpu") is not None:
        from mmaplug.cuda import presence

        if presence.cuda_device_count() == 0:
            pytest.skip("marked gpu: needs a CUDA GPU; the driver reports none")


@pytest.fixture
def mmaplug_pm() -> PluginManager:
    """A hermetic, strict plugin manager: the built-in plugins only, no entry points."""
    from mmaplug.hooks.manager import (
        make_plugin_manager,  # imported late: pytest loads this plugin early
    )

    return make_plugin_manager(load_entrypoints=False, strict=True)


@pytest.fixture
def mmaplug_recorder(mmaplug_pm: PluginManager) -> Iterator[HookRecorder]:
    """A ``HookRecorder`` on ``mmaplug_pm``, recording for the whole test."""
    from mmaplug.testing import HookRecorder

    with HookRecorder(mmaplug_pm) as recorder:
        yield recorder
