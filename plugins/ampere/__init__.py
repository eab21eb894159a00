"""The ``ampere`` scheduler plugin: mma.sync m16n8k16 with a cp.async pipeline, sm_80 and newer.

Everything about the kernel is its scheduler object's (``scheduler.SCHEDULER``): what it takes,
its space and rules (``limits``), its resource model (``resources``), its adjustments and build.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmaplug.markers import hookimpl
from mmaplug.planning.scheduler import Scheduler

from .scheduler import SCHEDULER

__all__ = ["SCHEDULER", "mmaplug_schedulers"]


@hookimpl
def mmaplug_schedulers() -> Sequence[Scheduler]:
    """The ampere scheduler."""
    return [SCHEDULER]
