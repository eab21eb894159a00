"""The ``hopper`` scheduler plugin: TMA + mbarrier + wgmma, warp-specialized, for sm_90a.

Everything about its kernels is one object, ``scheduler.SCHEDULER``: what it takes, its fields'
legal values (``space``), its rules and resource model (``limits``), and its build step.
"""

from __future__ import annotations

from collections.abc import Sequence

from mmaplug.markers import hookimpl
from mmaplug.planning.scheduler import Scheduler

from .scheduler import SCHEDULER

__all__ = ["SCHEDULER", "mmaplug_schedulers"]


@hookimpl
def mmaplug_schedulers() -> Sequence[Scheduler]:
    """The hopper scheduler."""
    return [SCHEDULER]
