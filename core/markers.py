"""The pluggy markers of the ``mmaplug`` project: ``hookspec`` and ``hookimpl``."""

from __future__ import annotations

from typing import Final

import pluggy

PROJECT: Final = "mmaplug"
hookspec: Final = pluggy.HookspecMarker(PROJECT)
hookimpl: Final = pluggy.HookimplMarker(PROJECT)
