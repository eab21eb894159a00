"""The ``mmaplug`` pytest plugin: fixtures ``mmaplug_pm``, ``mmaplug_recorder``; marker ``gpu``;
every test isolated from the others' changes to the process-wide plugin manager."""

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the tests marked ``gpu`` on a machine without a CUDA GPU (each reported at its own
    line, as ``skipif`` reports)."""
    marked = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not marked:
        return
    from mmaplug.cuda import presence

    if presence.cuda_device_count() == 0:
        skip = pytest.mark.skip(reason="marked gpu: needs a CUDA GPU; the driver reports none")
        for item in marked:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _mmaplug_restores_the_global_manager() -> Iterator[None]:
    """Each test finds ``mp.get_plugin_manager()`` as the one before it left it: a manager
    a test built (reading ``MMAPLUG_*`` as that test set them) and plugins a test registered on
    it do not reach the next test (``mmaplug.testing.restoring_plugin_manager``)."""
    from mmaplug.testing import restoring_plugin_manager

    with restoring_plugin_manager():
        yield


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
