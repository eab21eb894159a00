"""The ``mmaplug`` command: explain, plugins, demo, bench, cache, tuning and reports."""

from typing import Any


def __getattr__(name: str) -> Any:
    """Names of the 0.1 module ``mmaplug.cli``, for one release (``mmaplug.moved``)."""
    from mmaplug.moved import package_getattr

    return package_getattr(__name__, name)
