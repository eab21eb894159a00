"""Shared pytest setup: skip tiers whose tools this machine lacks (probed once per session)."""

from __future__ import annotations

import functools
import os

import pytest


@functools.cache
def nvvm_missing() -> str | None:
    """Return why `cuda.compile_ptx` cannot run here, or None when NVVM works."""
    try:
        from numba import cuda
        from numba.cuda import types

        def probe(out):
            out[0] = 1

        cuda.compile_ptx(probe, (types.int32[::1],), cc=(8, 0))
    except Exception as exc:  # any failure means the PTX tier cannot run
        return f"NVVM unavailable: {type(exc).__name__}: {exc}"
    return None


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pyproject.toml's addopts): no workers on a machine with a CUDA GPU.

    The GPU tier shares the one device and asserts on launch and first-result times, so there
    the suite runs in one process, as it always did (``-n 4`` still asks for workers). Elsewhere
    pytest-xdist decides (``PYTEST_XDIST_AUTO_NUM_WORKERS``, else one worker per CPU).
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    from mmaplug.cuda import presence

    return 0 if presence.cuda_device_count() else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # PYTEST_SHARD=i/n keeps every n-th test from the i-th (parallel GPU runs on one machine)
    shard = os.environ.get("PYTEST_SHARD", "")
    if shard:
        index, count = (int(p) for p in shard.split("/"))
        kept = [item for pos, item in enumerate(items) if pos % count == index]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    ptx_items = [item for item in items if item.get_closest_marker("ptx")]
    if ptx_items and (reason := nvvm_missing()):
        for item in ptx_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def pm():  # noqa: ANN201 - mmaplug.PluginManager
    """A hermetic plugin manager: built-in plugins only, no entry points, strict policy."""
    import mmaplug

    return mmaplug.make_plugin_manager(load_entrypoints=False, strict=True)
