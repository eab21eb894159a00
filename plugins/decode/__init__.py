"""The ``decode`` scheduler plugin: a few activation rows against a weight streamed at the HBM
limit (decode steps and small batches of LLM inference), sm_80 and newer.

Everything about the kernel is its scheduler object's (``scheduler.SCHEDULER``): what it takes,
its space, rules and resource model (``limits``), and its build (``artifact``).
"""

from __future__ import annotations

from mmaplug.markers import hookimpl
from mmaplug.planning.scheduler import Scheduler

from .scheduler import SCHEDULER


@hookimpl
def mmaplug_schedulers() -> list[Scheduler]:
    """The decode scheduler."""
    return [SCHEDULER]
