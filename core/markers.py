"""The pluggy markers of the ``mmaplug`` project (``hookspec``, ``hookimpl``), and the names
provenance gives to values no plugin gave."""

from __future__ import annotations

from typing import Final

import pluggy

PROJECT: Final = "mmaplug"
hookspec: Final = pluggy.HookspecMarker(PROJECT)
hookimpl: Final = pluggy.HookimplMarker(PROJECT)

#: The source provenance names for the caller's own overrides (``mp.compile(overrides=...)``).
CALLER: Final = "caller"
#: The source provenance names for the ``mmaplug.testing.override_matmul_params`` blocks.
HARNESS_SOURCE: Final = "override_matmul_params"
#: Names no plugin may be registered under: they would take the credit for those values.
PROVENANCE_NAMES: Final = (CALLER, HARNESS_SOURCE)
