"""The ``mmaplug`` logger and its children per stage; silent until the application configures it."""

from __future__ import annotations

import logging
import sys
from typing import Final, TextIO

__all__ = ["BUILD", "CACHE", "DUMP", "LAUNCH", "LOGGER", "PLAN", "STAGES", "to_stream"]

#: The library's logger; a NullHandler keeps it quiet when the application configures nothing.
LOGGER: Final = logging.getLogger("mmaplug")
LOGGER.addHandler(logging.NullHandler())

#: Plans: the scheduler and params chosen (INFO), the full ``explain`` text (DEBUG).
PLAN: Final = logging.getLogger("mmaplug.plan")
#: Kernel builds by the scheduler plugins, with their times (INFO).
BUILD: Final = logging.getLogger("mmaplug.build")
#: Disk-cache hits and misses: generated modules and Numba's machine code (DEBUG).
CACHE: Final = logging.getLogger("mmaplug.cache")
#: The first launch of a kernel for a new input signature: its time (INFO), the miss (DEBUG).
LAUNCH: Final = logging.getLogger("mmaplug.launch")
#: Files written for ``MMAPLUG_DUMP`` (INFO).
DUMP: Final = logging.getLogger("mmaplug.dump")

STAGES: Final = ("plan", "build", "cache", "launch", "dump")
FORMAT: Final = "%(name)s: %(message)s"


def to_stream(level: int = logging.INFO, stream: TextIO | None = None) -> logging.Handler:
    """Print ``mmaplug`` records of *level* and above to *stream* (stderr); returns the handler.

    For scripts and the ``mmaplug -v`` option; applications usually configure ``logging``.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    LOGGER.addHandler(handler)
    LOGGER.setLevel(level)
    return handler
